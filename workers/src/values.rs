//! The elements of a leaf, read and written by dtype: membership checks and random samples of
//! flat spaces, as [`check_env`](crate::check_env) and random agents need them.
//!
//! Elements of any [`DType`] are read as `i128` or `f64`, so one code path serves every dtype.
//! Membership and sampling follow Gymnasium's `contains` and `sample`.
//!
//! ```
//! use ringenv_worker::{values, DType, EnvRng, Space};
//! use rand::SeedableRng;
//! let space = Space::boxed(DType::U8, &[3], 0.0, 4.0);
//! let mut leaf = [0u8; 3];
//! values::sample(&space, &mut EnvRng::seed_from_u64(1), &mut leaf);
//! assert!(values::contains(&space, &leaf).is_ok());
//! let err = values::contains(&space, &[0, 9, 1]).unwrap_err();
//! assert_eq!(err, "element 1 is 9, outside [0, 4]");
//! ```

use crate::{EnvRng, Space};
use rand::Rng;
use ringenv_runtime::DType;

fn bytes_of<const N: usize>(leaf: &[u8], dtype: DType, k: usize) -> [u8; N] {
    let at = k * dtype.size();
    leaf[at..at + N].try_into().expect("element width")
}

/// Whether `dtype` holds integers (`bool` counts: 0 and 1).
///
/// ```
/// use ringenv_worker::{values::is_integer, DType};
/// assert!(is_integer(DType::Bool) && is_integer(DType::U64) && !is_integer(DType::F32));
/// ```
pub fn is_integer(dtype: DType) -> bool {
    !matches!(dtype, DType::F16 | DType::F32 | DType::F64)
}

/// Element `k` of `leaf` as an exact integer.
///
/// ```
/// let leaf: Vec<u8> = [7u64, u64::MAX].iter().flat_map(|v| v.to_ne_bytes()).collect();
/// assert_eq!(ringenv_worker::values::read_int(&leaf, ringenv_worker::DType::U64, 1), u64::MAX as i128);
/// ```
///
/// # Panics
/// For a float dtype, or `k` past the end of `leaf`.
pub fn read_int(leaf: &[u8], dtype: DType, k: usize) -> i128 {
    match dtype {
        DType::Bool | DType::U8 => i128::from(leaf[k]),
        DType::I8 => i128::from(i8::from_ne_bytes(bytes_of(leaf, dtype, k))),
        DType::I16 => i128::from(i16::from_ne_bytes(bytes_of(leaf, dtype, k))),
        DType::I32 => i128::from(i32::from_ne_bytes(bytes_of(leaf, dtype, k))),
        DType::I64 => i128::from(i64::from_ne_bytes(bytes_of(leaf, dtype, k))),
        DType::U16 => i128::from(u16::from_ne_bytes(bytes_of(leaf, dtype, k))),
        DType::U32 => i128::from(u32::from_ne_bytes(bytes_of(leaf, dtype, k))),
        DType::U64 => i128::from(u64::from_ne_bytes(bytes_of(leaf, dtype, k))),
        DType::F16 | DType::F32 | DType::F64 => panic!("read_int of a {dtype} leaf"),
    }
}

/// Element `k` of `leaf` as `f64` (exact for every dtype but 64-bit integers beyond 2^53).
///
/// ```
/// let leaf = [1.5f32.to_ne_bytes(), (-2f32).to_ne_bytes()].concat();
/// assert_eq!(ringenv_worker::values::read_f64(&leaf, ringenv_worker::DType::F32, 1), -2.0);
/// ```
///
/// # Panics
/// For `float16`, or `k` past the end of `leaf`.
pub fn read_f64(leaf: &[u8], dtype: DType, k: usize) -> f64 {
    match dtype {
        DType::F32 => f64::from(f32::from_ne_bytes(bytes_of(leaf, dtype, k))),
        DType::F64 => f64::from_ne_bytes(bytes_of(leaf, dtype, k)),
        DType::F16 => panic!("float16 leaves have no Rust element type"),
        _ => read_int(leaf, dtype, k) as f64,
    }
}

/// Writes `v` as element `k` of `leaf`, cast to `dtype` as Rust's `as` casts (floats to
/// integers saturate; `bool` stores `v != 0`).
///
/// ```
/// use ringenv_worker::{values::write_f64, DType};
/// let mut leaf = [0u8; 4];
/// write_f64(&mut leaf, DType::I16, 1, -300.0);
/// write_f64(&mut leaf, DType::I8, 0, 1e9); // saturates
/// assert_eq!((i16::from_ne_bytes([leaf[2], leaf[3]]), leaf[0] as i8), (-300, 127));
/// ```
///
/// # Panics
/// For `float16`, or `k` past the end of `leaf`.
pub fn write_f64(leaf: &mut [u8], dtype: DType, k: usize, v: f64) {
    let at = k * dtype.size();
    let out = &mut leaf[at..at + dtype.size()];
    match dtype {
        DType::Bool => out[0] = u8::from(v != 0.0),
        DType::U8 => out[0] = v as u8,
        DType::I8 => out.copy_from_slice(&(v as i8).to_ne_bytes()),
        DType::I16 => out.copy_from_slice(&(v as i16).to_ne_bytes()),
        DType::I32 => out.copy_from_slice(&(v as i32).to_ne_bytes()),
        DType::I64 => out.copy_from_slice(&(v as i64).to_ne_bytes()),
        DType::U16 => out.copy_from_slice(&(v as u16).to_ne_bytes()),
        DType::U32 => out.copy_from_slice(&(v as u32).to_ne_bytes()),
        DType::U64 => out.copy_from_slice(&(v as u64).to_ne_bytes()),
        DType::F32 => out.copy_from_slice(&(v as f32).to_ne_bytes()),
        DType::F64 => out.copy_from_slice(&v.to_ne_bytes()),
        DType::F16 => panic!("float16 leaves have no Rust element type"),
    }
}

/// Writes the integer `v` as element `k` of `leaf` (truncating to the dtype's width).
fn write_int(leaf: &mut [u8], dtype: DType, k: usize, v: i128) {
    let at = k * dtype.size();
    let bytes = v.to_le_bytes();
    let out = &mut leaf[at..at + dtype.size()];
    if cfg!(target_endian = "little") {
        out.copy_from_slice(&bytes[..out.len()]);
    } else {
        write_f64(leaf, dtype, k, v as f64);
    }
}

/// The smallest and largest value of an integer dtype.
fn int_range(dtype: DType) -> (i128, i128) {
    match dtype {
        DType::Bool => (0, 1),
        DType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DType::I16 => (i16::MIN.into(), i16::MAX.into()),
        DType::I32 => (i32::MIN.into(), i32::MAX.into()),
        DType::I64 => (i64::MIN.into(), i64::MAX.into()),
        DType::U8 => (0, u8::MAX.into()),
        DType::U16 => (0, u16::MAX.into()),
        DType::U32 => (0, u32::MAX.into()),
        _ => (0, u64::MAX.into()),
    }
}

/// An integer Box's bounds of element `k`, clipped to the dtype's range (as Python rebuilds them).
fn int_bounds(dtype: DType, low: f64, high: f64) -> (i128, i128) {
    let (min, max) = int_range(dtype);
    let clip = |v: f64| {
        if v <= min as f64 {
            min
        } else if v >= max as f64 {
            max
        } else {
            v as i128
        }
    };
    (clip(low.ceil()), clip(high.floor()))
}

/// Whether `leaf` (one env's element of the flat space `space`, native byte order) lies in
/// `space`.
///
/// ```
/// use ringenv_worker::{values::contains, Space};
/// let d = Space::Discrete { n: 3, start: 1 };
/// assert!(contains(&d, &3i64.to_ne_bytes()).is_ok());
/// assert_eq!(contains(&d, &0i64.to_ne_bytes()), Err("element 0 is 0, outside [1, 3]".into()));
/// ```
///
/// # Errors
/// A message naming the first element outside the space, its value and the allowed range.
///
/// # Panics
/// For a Dict or Tuple (check each part of [`Space::parts`]), or a leaf shorter than the space.
pub fn contains(space: &Space, leaf: &[u8]) -> Result<(), String> {
    let spec = space.array_spec();
    let outside = |k: usize, v: &dyn std::fmt::Display, lo: &dyn std::fmt::Display, hi: &dyn std::fmt::Display| {
        Err(format!("element {k} is {v}, outside [{lo}, {hi}]"))
    };
    for k in 0..spec.elements() {
        match space {
            Space::Box { dtype, low, high, .. } if is_integer(*dtype) => {
                let (lo, hi) = int_bounds(*dtype, low[k], high[k]);
                let v = read_int(leaf, *dtype, k);
                if v < lo || v > hi {
                    return outside(k, &v, &lo, &hi);
                }
            }
            Space::Box { dtype, low, high, .. } => {
                let v = read_f64(leaf, *dtype, k);
                if !(v >= low[k] && v <= high[k]) {
                    return outside(k, &v, &low[k], &high[k]);
                }
            }
            Space::Discrete { n, start } => {
                let v = read_int(leaf, DType::I64, k);
                let (lo, hi) = (i128::from(*start), i128::from(*start) + i128::from(*n) - 1);
                if v < lo || v > hi {
                    return outside(k, &v, &lo, &hi);
                }
            }
            Space::MultiDiscrete { nvec, start, dtype } => {
                let v = read_int(leaf, *dtype, k);
                let (lo, hi) = (i128::from(start[k]), i128::from(start[k]) + i128::from(nvec[k]) - 1);
                if v < lo || v > hi {
                    return outside(k, &v, &lo, &hi);
                }
            }
            Space::MultiBinary { .. } => {
                let v = read_int(leaf, DType::I8, k);
                if !(0..=1).contains(&v) {
                    return outside(k, &v, &0, &1);
                }
            }
            Space::Dict(_) | Space::Tuple(_) => unreachable!("array_spec panicked"),
        }
    }
    Ok(())
}

/// A standard normal draw (Box-Muller).
fn normal(rng: &mut EnvRng) -> f64 {
    let u: f64 = 1.0 - rng.random::<f64>(); // (0, 1]
    let v: f64 = rng.random();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// Writes a random element of the flat space `space` into `leaf`, drawn with `rng`.
///
/// ```
/// use ringenv_worker::rand::SeedableRng;
/// use ringenv_worker::{values::sample, EnvRng, Space};
/// let mut leaf = [0u8; 8];
/// sample(&Space::discrete(4), &mut EnvRng::seed_from_u64(0), &mut leaf);
/// assert!((0..4).contains(&i64::from_ne_bytes(leaf)));
/// ```
///
/// # Panics
/// For a Dict or Tuple, or a leaf shorter than the space.
pub fn sample(space: &Space, rng: &mut EnvRng, leaf: &mut [u8]) {
    let spec = space.array_spec();
    for k in 0..spec.elements() {
        match space {
            Space::Box { dtype, low, high, .. } if is_integer(*dtype) => {
                let (lo, hi) = int_bounds(*dtype, low[k], high[k]);
                write_int(leaf, *dtype, k, rng.random_range(lo..=hi));
            }
            Space::Box { dtype, low, high, .. } => {
                let (lo, hi) = (low[k], high[k]);
                let v = match (lo.is_finite(), hi.is_finite()) {
                    (true, true) => lo + (hi - lo) * rng.random::<f64>(),
                    (true, false) => lo - (1.0 - rng.random::<f64>()).ln(),
                    (false, true) => hi + (1.0 - rng.random::<f64>()).ln(),
                    (false, false) => normal(rng),
                };
                write_f64(leaf, *dtype, k, v.clamp(lo, hi));
            }
            Space::Discrete { n, start } => write_int(leaf, DType::I64, k, i128::from(start + rng.random_range(0..*n))),
            Space::MultiDiscrete { nvec, start, dtype } => {
                write_int(leaf, *dtype, k, i128::from(start[k] + rng.random_range(0..nvec[k])));
            }
            Space::MultiBinary { .. } => write_int(leaf, DType::I8, k, i128::from(rng.random_range(0..=1u8))),
            Space::Dict(_) | Space::Tuple(_) => unreachable!("array_spec panicked"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn flat_spaces() -> Vec<Space> {
        vec![
            Space::Box {
                dtype: DType::F32,
                shape: vec![3],
                low: vec![-1.0, 0.0, f64::NEG_INFINITY],
                high: vec![1.0, f64::INFINITY, f64::INFINITY],
            },
            Space::boxed(DType::I64, &[2], f64::NEG_INFINITY, f64::INFINITY),
            Space::boxed(DType::U16, &[2, 2], 3.0, 9.0),
            Space::boxed(DType::Bool, &[4], 0.0, 1.0),
            Space::Discrete { n: 5, start: -2 },
            Space::MultiDiscrete { nvec: vec![2, 7], start: vec![1, -3], dtype: DType::I16 },
            Space::MultiBinary { shape: vec![2, 3] },
        ]
    }

    #[test]
    fn samples_lie_in_their_space_and_cover_it() {
        let mut rng = EnvRng::seed_from_u64(7);
        for space in flat_spaces() {
            let spec = space.array_spec();
            let mut leaf = vec![0u8; spec.bytes()];
            let mut seen = std::collections::BTreeSet::new();
            for _ in 0..400 {
                sample(&space, &mut rng, &mut leaf);
                assert_eq!(contains(&space, &leaf), Ok(()), "{space:?}");
                if is_integer(spec.dtype) {
                    seen.insert(read_int(&leaf, spec.dtype, 0));
                }
            }
            match &space {
                Space::Discrete { .. } => assert_eq!(seen.into_iter().collect::<Vec<_>>(), [-2, -1, 0, 1, 2]),
                Space::Box { dtype: DType::Bool, .. } => assert_eq!(seen.len(), 2),
                _ => {}
            }
        }
    }

    #[test]
    fn out_of_space_elements_are_named() {
        let md = Space::MultiDiscrete { nvec: vec![2, 7], start: vec![1, -3], dtype: DType::I16 };
        let leaf: Vec<u8> = [1i16, 4].iter().flat_map(|v| v.to_ne_bytes()).collect();
        assert_eq!(contains(&md, &leaf), Err("element 1 is 4, outside [-3, 3]".into()));
        let nan: Vec<u8> = [0.5f32, f32::NAN, 0.0].iter().flat_map(|v| v.to_ne_bytes()).collect();
        assert!(contains(&flat_spaces()[0], &nan).unwrap_err().starts_with("element 1 is NaN"));
        assert_eq!(
            contains(&Space::MultiBinary { shape: vec![2] }, &[1, 2]),
            Err("element 1 is 2, outside [0, 1]".into())
        );
        assert_eq!(
            contains(&Space::boxed(DType::Bool, &[1], 0.0, 1.0), &[3]),
            Err("element 0 is 3, outside [0, 1]".into())
        );
    }

    #[test]
    fn element_io_round_trips_every_dtype() {
        for dtype in [
            DType::I8,
            DType::I16,
            DType::I32,
            DType::I64,
            DType::U8,
            DType::U16,
            DType::U32,
            DType::U64,
            DType::F32,
            DType::F64,
        ] {
            let mut leaf = vec![0u8; 3 * dtype.size()];
            write_f64(&mut leaf, dtype, 2, 100.0);
            assert_eq!(read_f64(&leaf, dtype, 2), 100.0, "{dtype}");
            assert_eq!(read_f64(&leaf, dtype, 1), 0.0, "{dtype}");
        }
        let mut leaf = [0u8; 8];
        write_int(&mut leaf, DType::I64, 0, i128::from(i64::MIN));
        assert_eq!(read_int(&leaf, DType::I64, 0), i128::from(i64::MIN));
    }
}
