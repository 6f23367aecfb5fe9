//! Observation and action spaces of a Rust env, and their byte layout in the segment.
//!
//! A [`Space`] mirrors the Gymnasium space of the same name closely enough for the Python side to
//! rebuild it exactly (`gymnasium.spaces.Box(low, high, shape, dtype)`,
//! `gymnasium.spaces.Discrete(n, start)`).
//!
//! ```
//! use ringenv_worker::Space;
//! use ringenv_runtime::DType;
//! let s = Space::boxed(DType::F32, &[4], -1.0, 1.0);
//! assert_eq!(s.array_spec().shape, vec![4]);
//! assert_eq!(Space::Discrete { n: 2, start: 0 }.array_spec().dtype, DType::I64);
//! ```

use ringenv_runtime::{ArraySpec, DType};

/// A Gymnasium-compatible space whose elements have a fixed byte layout.
#[derive(Clone, Debug, PartialEq)]
pub enum Space {
    /// `gymnasium.spaces.Box`: an array of `shape` and `dtype`, element `k` in `[low[k], high[k]]`
    /// (`low` and `high` have one entry per element, row-major; infinities allowed).
    Box {
        /// Element type.
        dtype: DType,
        /// Shape of one env's array.
        shape: Vec<usize>,
        /// Lower bound of each element.
        low: Vec<f64>,
        /// Upper bound of each element.
        high: Vec<f64>,
    },
    /// `gymnasium.spaces.Discrete`: an `int64` scalar in `start..start + n`.
    Discrete {
        /// Number of values.
        n: i64,
        /// Smallest value.
        start: i64,
    },
}

impl Space {
    /// A Box whose every element has the same bounds.
    pub fn boxed(dtype: DType, shape: &[usize], low: f64, high: f64) -> Space {
        let count = shape.iter().product();
        Space::Box { dtype, shape: shape.to_vec(), low: vec![low; count], high: vec![high; count] }
    }

    /// The byte layout of one env's element: a Box is its dtype and shape, a Discrete an `int64`
    /// scalar (shape `[]`), as Gymnasium batches them.
    pub fn array_spec(&self) -> ArraySpec {
        match self {
            Space::Box { dtype, shape, .. } => ArraySpec::new(*dtype, shape),
            Space::Discrete { .. } => ArraySpec::new(DType::I64, &[]),
        }
    }
}
