//! The values an action array may hold, checked over its raw bytes before they are written into
//! a slot.
//!
//! A whole batch is checked in one pass before anything is copied into a slot. The rules are
//! Gymnasium's: `Discrete` / `MultiDiscrete` / `MultiBinary` within their bounds, and no NaN in a
//! float `Box`.
//!
//! ```
//! use ringenv_runtime::{ActionBounds, DType};
//! let discrete = ActionBounds::integer(vec![0], vec![1]).unwrap();
//! let actions: Vec<u8> = [0i64, 1, 2, 1].iter().flat_map(|a| a.to_ne_bytes()).collect();
//! assert_eq!(discrete.first_outside(DType::I64, &actions), Some(2));
//! let nan: Vec<u8> = [0.5f32, f32::NAN].iter().flat_map(|a| a.to_ne_bytes()).collect();
//! assert_eq!(ActionBounds::NotNan.first_outside(DType::F32, &nan), Some(1));
//! ```

use crate::dtype::DType;

/// What [`ActionBounds::first_outside`] checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActionBounds {
    /// Any value (Gymnasium passes actions to its envs unchecked).
    Unchecked,
    /// Integers within inclusive per-element bounds: element `i` of the batch (all rows, C order)
    /// is checked against `low[i % low.len()]` and `high[i % high.len()]`.
    Integer {
        /// The smallest value of each element of one env's action.
        low: Vec<i64>,
        /// The largest value of each element of one env's action.
        high: Vec<i64>,
    },
    /// Floats that are not NaN.
    NotNan,
}

impl ActionBounds {
    /// Integer bounds, one `(low, high)` pair per element of one env's action.
    ///
    /// # Errors
    /// A message when `low` and `high` differ in length or are empty.
    pub fn integer(low: Vec<i64>, high: Vec<i64>) -> Result<ActionBounds, String> {
        if low.is_empty() || low.len() != high.len() {
            return Err(format!(
                "integer action bounds need as many lows as highs, at least one: got {} and {}",
                low.len(),
                high.len()
            ));
        }
        Ok(ActionBounds::Integer { low, high })
    }

    /// The index of the first element of `bytes` (elements of `dtype`, native byte order) that
    /// these bounds refuse, or `None` when every element is allowed. Integer bounds refuse every
    /// element of a float dtype and NaN bounds every element of an integer one (the caller
    /// checks the dtype first), and trailing bytes that make no whole element are refused.
    pub fn first_outside(&self, dtype: DType, bytes: &[u8]) -> Option<usize> {
        let size = dtype.size();
        if !bytes.len().is_multiple_of(size) {
            return Some(bytes.len() / size);
        }
        let mut elements = bytes.chunks_exact(size);
        match self {
            ActionBounds::Unchecked => None,
            ActionBounds::Integer { low, high } => {
                let k = low.len();
                elements.enumerate().position(|(i, e)| match integer(dtype, e) {
                    Some(v) => v < i128::from(low[i % k]) || v > i128::from(high[i % k]),
                    None => true,
                })
            }
            ActionBounds::NotNan => elements.position(|e| match dtype {
                DType::F32 => f32::from_ne_bytes(e.try_into().expect("4 bytes")).is_nan(),
                DType::F64 => f64::from_ne_bytes(e.try_into().expect("8 bytes")).is_nan(),
                // binary16: a NaN has every exponent bit set and a non-zero fraction.
                DType::F16 => {
                    let bits = u16::from_ne_bytes(e.try_into().expect("2 bytes"));
                    bits & 0x7c00 == 0x7c00 && bits & 0x03ff != 0
                }
                _ => true,
            }),
        }
    }
}

/// The integer value of one element of an integer (or bool) dtype; `None` for a float dtype.
fn integer(dtype: DType, e: &[u8]) -> Option<i128> {
    Some(match dtype {
        DType::Bool | DType::U8 => i128::from(e[0]),
        DType::I8 => i128::from(e[0] as i8),
        DType::I16 => i128::from(i16::from_ne_bytes(e.try_into().ok()?)),
        DType::U16 => i128::from(u16::from_ne_bytes(e.try_into().ok()?)),
        DType::I32 => i128::from(i32::from_ne_bytes(e.try_into().ok()?)),
        DType::U32 => i128::from(u32::from_ne_bytes(e.try_into().ok()?)),
        DType::I64 => i128::from(i64::from_ne_bytes(e.try_into().ok()?)),
        DType::U64 => i128::from(u64::from_ne_bytes(e.try_into().ok()?)),
        DType::F16 | DType::F32 | DType::F64 => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of<T: bytemuck::Pod>(values: &[T]) -> Vec<u8> {
        bytemuck::cast_slice(values).to_vec()
    }

    #[test]
    fn integer_bounds_cycle_over_the_elements_of_one_action() {
        // MultiDiscrete([3, 5], start=[0, -2]): element 0 in [0, 2], element 1 in [-2, 2].
        let b = ActionBounds::integer(vec![0, -2], vec![2, 2]).unwrap();
        assert_eq!(b.first_outside(DType::I64, &bytes_of(&[2i64, -2, 0, 2])), None);
        assert_eq!(b.first_outside(DType::I64, &bytes_of(&[2i64, -2, 0, 3])), Some(3));
        assert_eq!(b.first_outside(DType::I64, &bytes_of(&[2i64, -3, 0, 2])), Some(1));
        assert_eq!(b.first_outside(DType::I32, &bytes_of(&[-1i32, 0])), Some(0));
    }

    #[test]
    fn unsigned_and_small_integers_compare_by_value() {
        let b = ActionBounds::integer(vec![0], vec![4]).unwrap();
        assert_eq!(b.first_outside(DType::U64, &bytes_of(&[4u64, u64::MAX])), Some(1));
        assert_eq!(b.first_outside(DType::I8, &bytes_of(&[4i8, -1])), Some(1));
        assert_eq!(b.first_outside(DType::U8, &bytes_of(&[0u8, 4, 5])), Some(2));
        let binary = ActionBounds::integer(vec![0], vec![1]).unwrap();
        assert_eq!(binary.first_outside(DType::Bool, &[0, 1, 1]), None);
    }

    #[test]
    fn nan_is_refused_in_every_float_width_and_infinity_is_not() {
        let b = ActionBounds::NotNan;
        assert_eq!(b.first_outside(DType::F64, &bytes_of(&[f64::INFINITY, -1.0])), None);
        assert_eq!(b.first_outside(DType::F64, &bytes_of(&[0.0f64, f64::NAN])), Some(1));
        assert_eq!(b.first_outside(DType::F32, &bytes_of(&[f32::NAN])), Some(0));
        // binary16 +inf (0x7c00) is allowed, a quiet NaN (0x7e00) is not.
        assert_eq!(b.first_outside(DType::F16, &bytes_of(&[0x7c00u16, 0x3c00, 0x7e00])), Some(2));
    }

    #[test]
    fn a_dtype_the_bounds_do_not_fit_and_a_partial_element_are_refused() {
        let b = ActionBounds::integer(vec![0], vec![1]).unwrap();
        assert_eq!(b.first_outside(DType::F32, &bytes_of(&[0.0f32])), Some(0));
        assert_eq!(ActionBounds::NotNan.first_outside(DType::I64, &bytes_of(&[0i64])), Some(0));
        assert_eq!(b.first_outside(DType::I64, &[0u8; 12]), Some(1));
        assert_eq!(ActionBounds::Unchecked.first_outside(DType::I64, &[0u8; 16]), None);
        assert!(ActionBounds::integer(vec![], vec![]).is_err());
        assert!(ActionBounds::integer(vec![0], vec![1, 2]).is_err());
    }
}
