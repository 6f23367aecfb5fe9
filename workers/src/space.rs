//! Observation and action spaces of a Rust env, their leaves in the segment, and their JSON form.
//!
//! A [`Space`] mirrors the Gymnasium space of the same name closely enough for Python to rebuild
//! it: `Box`, `Discrete`, `MultiDiscrete`, `MultiBinary`, and `Dict` / `Tuple` of those. Its
//! *leaves* are the arrays it occupies in shared memory, as `ringenv._layout.plan` plans them: a
//! flat space is one leaf of its own dtype and shape (a Discrete is an `int64` scalar, a
//! MultiBinary `int8`); a Dict or Tuple is one leaf per flat component, depth first, each of shape
//! `[elements]`. A Dict keeps its declared key order.
//!
//! ```
//! use ringenv_worker::{DType, Space};
//! use ringenv_runtime::ArraySpec;
//! let s = Space::boxed(DType::F32, &[4], -1.0, 1.0);
//! assert_eq!(s.leaves(), [ArraySpec::new(DType::F32, &[4])]);
//! assert_eq!(Space::discrete(2).leaves(), [ArraySpec::new(DType::I64, &[])]);
//! let d = Space::dict([("grid", Space::boxed(DType::U8, &[3, 3], 0.0, 4.0)),
//!                      ("goal", Space::discrete(9))]);
//! assert_eq!(d.leaves(), [ArraySpec::new(DType::U8, &[9]), ArraySpec::new(DType::I64, &[1])]);
//! assert_eq!(Space::from_json(&d.to_json()).unwrap(), d);
//! assert!(Space::boxed(DType::F32, &[2], 1.0, 0.0).validate().is_err()); // low > high
//! ```

use ringenv_runtime::{ArraySpec, DType};
use serde_json::{json, Value};

/// A Gymnasium-compatible space whose elements have a fixed byte layout.
///
/// ```
/// use ringenv_worker::{DType, Space};
/// let grid = Space::boxed(DType::U8, &[8, 8], 0.0, 6.0);           // Box(0, 6, (8, 8), uint8)
/// let per_element = Space::Box { dtype: DType::F32, shape: vec![2],  // Box with bounds per element
///                                low: vec![-1.0, f64::NEG_INFINITY], high: vec![1.0, f64::INFINITY] };
/// let obs = Space::dict([("grid", grid), ("vel", per_element), ("facts", Space::multi_binary(5))]);
/// assert_eq!(obs.leaves().len(), 3);
/// assert!(obs.validate().is_ok() && !obs.is_flat());
/// let md = Space::MultiDiscrete { nvec: vec![3, 2], start: vec![0, 0], dtype: DType::I64 };
/// assert_eq!(Space::multi_discrete(&[3, 2]), md);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum Space {
    /// `gymnasium.spaces.Box`: an array of `shape` and `dtype`, element `k` in `[low[k], high[k]]`
    /// (`low` and `high` have one entry per element, row-major; infinities allowed for floats;
    /// integer bounds beyond 2^53 are rounded, and infinite integer bounds mean the dtype's
    /// range). Any dtype but `float16`; a `bool` Box has bounds 0 and 1 and is viewed in Rust as
    /// `u8` 0/1.
    Box {
        /// Element type.
        dtype: DType,
        /// Shape of one env's array (at most 8 dimensions).
        shape: Vec<usize>,
        /// Lower bound of each element.
        low: Vec<f64>,
        /// Upper bound of each element.
        high: Vec<f64>,
    },
    /// `gymnasium.spaces.Discrete`: an `int64` scalar in `start..start + n`.
    Discrete {
        /// Number of values (at least 1).
        n: i64,
        /// Smallest value.
        start: i64,
    },
    /// `gymnasium.spaces.MultiDiscrete`: a 1-D array, element `k` in
    /// `start[k]..start[k] + nvec[k]`, of an integer `dtype` (Gymnasium's default is `int64`).
    MultiDiscrete {
        /// Number of values of each element (each at least 1).
        nvec: Vec<i64>,
        /// Smallest value of each element.
        start: Vec<i64>,
        /// Integer element type.
        dtype: DType,
    },
    /// `gymnasium.spaces.MultiBinary`: an `int8` array of `shape` holding 0 or 1.
    MultiBinary {
        /// Shape (Gymnasium's `n`: an int for one dimension, a list for more).
        shape: Vec<usize>,
    },
    /// `gymnasium.spaces.Dict`: named components, in this order.
    Dict(Vec<(String, Space)>),
    /// `gymnasium.spaces.Tuple`: components, in this order.
    Tuple(Vec<Space>),
}

/// A space that cannot be laid out or rebuilt in Python: where (a path such as `grid` or
/// `1.pos`; empty at the top) and why.
///
/// ```
/// use ringenv_worker::Space;
/// let err = Space::dict([("goal", Space::discrete(0))]).validate().unwrap_err();
/// assert_eq!(err.to_string(), "component \"goal\": Discrete n must be at least 1, got 0");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidSpace {
    /// Path of the offending component: Dict keys and Tuple indices joined by dots.
    pub path: String,
    /// What is wrong, naming the values.
    pub reason: String,
}

impl std::fmt::Display for InvalidSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "component {:?}: {}", self.path, self.reason)
        }
    }
}
impl std::error::Error for InvalidSpace {}

/// The most dimensions a Box may have (the segment header's limit).
const MAX_NDIM: usize = ringenv_runtime::MAX_NDIM;

impl Space {
    /// A Box whose every element has the same bounds `[low, high]`.
    pub fn boxed(dtype: DType, shape: &[usize], low: f64, high: f64) -> Space {
        let count = shape.iter().product();
        Space::Box { dtype, shape: shape.to_vec(), low: vec![low; count], high: vec![high; count] }
    }

    /// `Discrete(n)`: an `int64` in `0..n`.
    pub fn discrete(n: i64) -> Space {
        Space::Discrete { n, start: 0 }
    }

    /// `MultiDiscrete(nvec)`: `int64` element `k` in `0..nvec[k]`.
    pub fn multi_discrete(nvec: &[i64]) -> Space {
        Space::MultiDiscrete { nvec: nvec.to_vec(), start: vec![0; nvec.len()], dtype: DType::I64 }
    }

    /// `MultiBinary(n)`: `n` `int8` elements holding 0 or 1.
    pub fn multi_binary(n: usize) -> Space {
        Space::MultiBinary { shape: vec![n] }
    }

    /// `Dict` of named components, kept in the given order.
    pub fn dict<K: Into<String>>(items: impl IntoIterator<Item = (K, Space)>) -> Space {
        Space::Dict(items.into_iter().map(|(k, s)| (k.into(), s)).collect())
    }

    /// `Tuple` of components.
    pub fn tuple(items: impl IntoIterator<Item = Space>) -> Space {
        Space::Tuple(items.into_iter().collect())
    }

    /// Whether the space is one array (Box, Discrete, MultiDiscrete, MultiBinary), not a Dict or
    /// Tuple. Action spaces of Rust envs must be flat.
    pub fn is_flat(&self) -> bool {
        !matches!(self, Space::Dict(_) | Space::Tuple(_))
    }

    /// The one leaf of a flat space: its dtype and shape, as Gymnasium batches it.
    ///
    /// # Panics
    /// For a Dict or Tuple (use [`Space::leaves`]).
    pub fn array_spec(&self) -> ArraySpec {
        match self {
            Space::Box { dtype, shape, .. } => ArraySpec::new(*dtype, shape),
            Space::Discrete { .. } => ArraySpec::new(DType::I64, &[]),
            Space::MultiDiscrete { nvec, dtype, .. } => ArraySpec::new(*dtype, &[nvec.len()]),
            Space::MultiBinary { shape } => ArraySpec::new(DType::I8, shape),
            Space::Dict(_) | Space::Tuple(_) => panic!("a Dict or Tuple space has several leaves: use Space::leaves"),
        }
    }

    /// The leaves of one env's element in the segment (see the [module docs](self)).
    pub fn leaves(&self) -> Vec<ArraySpec> {
        if self.is_flat() {
            return vec![self.array_spec()];
        }
        self.parts()
            .into_iter()
            .map(|(_, s)| s.array_spec())
            .map(|a| ArraySpec::new(a.dtype, &[a.elements()]))
            .collect()
    }

    /// The flat components in leaf order, each with its path (Dict keys and Tuple indices joined
    /// by dots; empty for a flat space).
    pub fn parts(&self) -> Vec<(String, &Space)> {
        fn walk<'s>(s: &'s Space, path: String, out: &mut Vec<(String, &'s Space)>) {
            let join = |name: &str| if path.is_empty() { name.to_string() } else { format!("{path}.{name}") };
            match s {
                Space::Dict(items) => items.iter().for_each(|(k, c)| walk(c, join(k), out)),
                Space::Tuple(items) => items.iter().enumerate().for_each(|(i, c)| walk(c, join(&i.to_string()), out)),
                flat => out.push((path, flat)),
            }
        }
        let mut out = Vec::new();
        walk(self, String::new(), &mut out);
        out
    }

    /// Checks that the space can be laid out and rebuilt in Python.
    ///
    /// # Errors
    /// [`InvalidSpace`] naming the component and the problem: a Box whose bounds do not have one
    /// entry per element, a `low` above its `high` (or NaN), `float16`, a `bool` Box with bounds
    /// outside 0 and 1, more than 8 dimensions; a Discrete or MultiDiscrete with fewer than one
    /// value; a MultiDiscrete of a non-integer dtype or a `start` of the wrong length; an empty
    /// MultiBinary, Dict or Tuple; an empty or repeated Dict key.
    pub fn validate(&self) -> Result<(), InvalidSpace> {
        fn check(s: &Space, path: &str) -> Result<(), InvalidSpace> {
            let bad = |reason: String| Err(InvalidSpace { path: path.to_string(), reason });
            let join = |name: &str| if path.is_empty() { name.to_string() } else { format!("{path}.{name}") };
            match s {
                Space::Box { dtype, shape, low, high } => {
                    let count: usize = shape.iter().product();
                    if shape.len() > MAX_NDIM {
                        return bad(format!("Box has {} dimensions; at most {MAX_NDIM} are supported", shape.len()));
                    }
                    if *dtype == DType::F16 {
                        return bad("Box dtype float16 has no Rust element type; use float32".into());
                    }
                    if low.len() != count || high.len() != count {
                        return bad(format!(
                            "Box of shape {shape:?} has {count} elements but low has {} and high {} \
                             (one bound per element, row-major)",
                            low.len(),
                            high.len()
                        ));
                    }
                    let pairs = low.iter().zip(high).enumerate();
                    if let Some((k, (l, h))) = pairs.clone().find(|(_, (l, h))| l.is_nan() || h.is_nan() || l > h) {
                        return bad(format!("Box element {k}: low {l} is not <= high {h}"));
                    }
                    if *dtype == DType::Bool {
                        if let Some((k, (l, h))) = pairs.clone().find(|(_, (l, h))| **l < 0.0 || **h > 1.0) {
                            return bad(format!("bool Box element {k}: bounds [{l}, {h}] must lie in [0, 1]"));
                        }
                    }
                    Ok(())
                }
                Space::Discrete { n, .. } if *n < 1 => bad(format!("Discrete n must be at least 1, got {n}")),
                Space::Discrete { .. } => Ok(()),
                Space::MultiDiscrete { nvec, start, dtype } => {
                    if !matches!(
                        dtype,
                        DType::I8
                            | DType::I16
                            | DType::I32
                            | DType::I64
                            | DType::U8
                            | DType::U16
                            | DType::U32
                            | DType::U64
                    ) {
                        return bad(format!("MultiDiscrete dtype must be an integer type, got {dtype}"));
                    }
                    if nvec.is_empty() || start.len() != nvec.len() {
                        return bad(format!(
                            "MultiDiscrete needs at least one element and one start per element, got nvec {nvec:?} \
                             and start {start:?}"
                        ));
                    }
                    match nvec.iter().position(|&n| n < 1) {
                        Some(k) => bad(format!("MultiDiscrete nvec[{k}] must be at least 1, got {}", nvec[k])),
                        None => Ok(()),
                    }
                }
                Space::MultiBinary { shape } if shape.is_empty() || shape.contains(&0) => {
                    bad(format!("MultiBinary shape must be non-empty with no zero dimension, got {shape:?}"))
                }
                Space::MultiBinary { shape } if shape.len() > MAX_NDIM => {
                    bad(format!("MultiBinary has {} dimensions; at most {MAX_NDIM} are supported", shape.len()))
                }
                Space::MultiBinary { .. } => Ok(()),
                Space::Dict(items) => {
                    if items.is_empty() {
                        return bad("a Dict space needs at least one component".into());
                    }
                    for (i, (key, _)) in items.iter().enumerate() {
                        if key.is_empty() {
                            return bad(format!("Dict key {i} is empty"));
                        }
                        if items[..i].iter().any(|(k, _)| k == key) {
                            return bad(format!("Dict key {key:?} appears twice"));
                        }
                    }
                    items.iter().try_for_each(|(k, c)| check(c, &join(k)))
                }
                Space::Tuple(items) if items.is_empty() => bad("a Tuple space needs at least one component".into()),
                Space::Tuple(items) => items.iter().enumerate().try_for_each(|(i, c)| check(c, &join(&i.to_string()))),
            }
        }
        check(self, "")
    }

    /// The JSON form read by `ringenv._layout.from_dict` (and by [`Space::from_json`]):
    /// `{"kind": "box", "dtype", "shape", "low", "high"}` (infinite bounds as the strings
    /// `"inf"` / `"-inf"`), `{"kind": "discrete", "n", "start"}`,
    /// `{"kind": "multi_discrete", "nvec", "start", "dtype"}`, `{"kind": "multi_binary", "n"}`
    /// (`n` the shape), `{"kind": "dict", "spaces": [[key, space], ...]}` or
    /// `{"kind": "tuple", "spaces": [space, ...]}`.
    pub fn to_json(&self) -> Value {
        fn bound(v: f64) -> Value {
            if v.is_finite() {
                json!(v)
            } else if v.is_nan() {
                json!("nan")
            } else if v > 0.0 {
                json!("inf")
            } else {
                json!("-inf")
            }
        }
        match self {
            Space::Box { dtype, shape, low, high } => json!({
                "kind": "box", "dtype": dtype.numpy_name(), "shape": shape,
                "low": low.iter().copied().map(bound).collect::<Vec<_>>(),
                "high": high.iter().copied().map(bound).collect::<Vec<_>>(),
            }),
            Space::Discrete { n, start } => json!({"kind": "discrete", "n": n, "start": start}),
            Space::MultiDiscrete { nvec, start, dtype } => {
                json!({"kind": "multi_discrete", "nvec": nvec, "start": start, "dtype": dtype.numpy_name()})
            }
            Space::MultiBinary { shape } => json!({"kind": "multi_binary", "n": shape}),
            Space::Dict(items) => json!({
                "kind": "dict",
                "spaces": items.iter().map(|(k, s)| json!([k, s.to_json()])).collect::<Vec<_>>(),
            }),
            Space::Tuple(items) => {
                json!({"kind": "tuple", "spaces": items.iter().map(Space::to_json).collect::<Vec<_>>()})
            }
        }
    }

    /// The space of a [`Space::to_json`] value.
    ///
    /// # Errors
    /// A message naming the missing or malformed field.
    pub fn from_json(value: &Value) -> Result<Space, String> {
        let field = |name: &str| value.get(name).ok_or_else(|| format!("space {value} has no field {name:?}"));
        let dtype = || -> Result<DType, String> {
            let name = field("dtype")?.as_str().ok_or("dtype must be a string")?;
            DType::from_numpy(name).ok_or_else(|| format!("unknown dtype {name:?}"))
        };
        let ints = |name: &str| -> Result<Vec<i64>, String> {
            let list = field(name)?.as_array().ok_or_else(|| format!("{name} must be a list"))?;
            list.iter().map(|v| v.as_i64().ok_or_else(|| format!("{name} holds {v}, not an integer"))).collect()
        };
        let floats = |name: &str| -> Result<Vec<f64>, String> {
            let list = field(name)?.as_array().ok_or_else(|| format!("{name} must be a list"))?;
            let one = |v: &Value| match v {
                Value::String(s) if s == "inf" => Ok(f64::INFINITY),
                Value::String(s) if s == "-inf" => Ok(f64::NEG_INFINITY),
                Value::String(s) if s == "nan" => Ok(f64::NAN),
                other => other.as_f64().ok_or_else(|| format!("{name} holds {other}, not a number")),
            };
            list.iter().map(one).collect()
        };
        let sizes = |name: &str| -> Result<Vec<usize>, String> {
            ints(name)?.into_iter().map(|v| usize::try_from(v).map_err(|_| format!("{name} holds {v}"))).collect()
        };
        let int = |name: &str| field(name)?.as_i64().ok_or_else(|| format!("{name} must be an integer"));
        let kind = field("kind")?.as_str().ok_or("kind must be a string")?;
        let components = || field("spaces")?.as_array().ok_or_else(|| "spaces must be a list".to_string());
        Ok(match kind {
            "box" => Space::Box { dtype: dtype()?, shape: sizes("shape")?, low: floats("low")?, high: floats("high")? },
            "discrete" => Space::Discrete { n: int("n")?, start: int("start")? },
            "multi_discrete" => Space::MultiDiscrete { nvec: ints("nvec")?, start: ints("start")?, dtype: dtype()? },
            "multi_binary" => Space::MultiBinary { shape: sizes("n")? },
            "dict" => Space::Dict(
                components()?
                    .iter()
                    .map(|pair| match pair.as_array().map(Vec::as_slice) {
                        Some([Value::String(k), s]) => Ok((k.clone(), Space::from_json(s)?)),
                        _ => Err(format!("a dict entry must be [key, space], got {pair}")),
                    })
                    .collect::<Result<_, _>>()?,
            ),
            "tuple" => Space::Tuple(components()?.iter().map(Space::from_json).collect::<Result<_, _>>()?),
            other => return Err(format!("unknown space kind {other:?}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> Space {
        Space::dict([
            (
                "pos",
                Space::Box {
                    dtype: DType::F64,
                    shape: vec![2],
                    low: vec![f64::NEG_INFINITY, 0.0],
                    high: vec![f64::INFINITY, 1.5],
                },
            ),
            ("mask", Space::boxed(DType::Bool, &[2, 2], 0.0, 1.0)),
            (
                "parts",
                Space::tuple([
                    Space::Discrete { n: 3, start: -1 },
                    Space::MultiDiscrete { nvec: vec![2, 5], start: vec![0, 1], dtype: DType::I32 },
                    Space::MultiBinary { shape: vec![2, 3] },
                ]),
            ),
        ])
    }

    #[test]
    fn composite_leaves_are_flattened_depth_first_in_declaration_order() {
        let leaves = every_kind().leaves();
        let want = [
            ArraySpec::new(DType::F64, &[2]),
            ArraySpec::new(DType::Bool, &[4]),
            ArraySpec::new(DType::I64, &[1]),
            ArraySpec::new(DType::I32, &[2]),
            ArraySpec::new(DType::I8, &[6]),
        ];
        assert_eq!(leaves, want);
        let paths: Vec<_> = every_kind().parts().into_iter().map(|(p, _)| p).collect();
        assert_eq!(paths, ["pos", "mask", "parts.0", "parts.1", "parts.2"]);
        // Flat spaces keep their own shape at the top.
        assert_eq!(Space::MultiBinary { shape: vec![2, 3] }.leaves(), [ArraySpec::new(DType::I8, &[2, 3])]);
        assert_eq!(Space::multi_discrete(&[3, 3]).leaves(), [ArraySpec::new(DType::I64, &[2])]);
    }

    #[test]
    fn json_round_trips_every_kind_with_infinite_bounds() {
        let s = every_kind();
        let j = s.to_json();
        assert_eq!(j["spaces"][0][1]["low"][0], "-inf");
        assert_eq!(j["spaces"][0][0], "pos");
        assert_eq!(Space::from_json(&j).unwrap(), s);
        let err = Space::from_json(&json!({"kind": "box", "dtype": "float32"})).unwrap_err();
        assert!(err.contains("shape"), "{err}");
        assert!(Space::from_json(&json!({"kind": "graph"})).unwrap_err().contains("graph"));
    }

    #[test]
    fn validate_names_the_component_and_the_problem() {
        assert_eq!(every_kind().validate(), Ok(()));
        let cases = [
            (Space::Box { dtype: DType::F32, shape: vec![3], low: vec![0.0; 2], high: vec![1.0; 3] }, "", "low has 2"),
            (Space::boxed(DType::F16, &[1], 0.0, 1.0), "", "float16"),
            (Space::boxed(DType::Bool, &[1], 0.0, 2.0), "", "[0, 2]"),
            (Space::boxed(DType::F32, &[1], f64::NAN, 1.0), "", "low NaN"),
            (Space::discrete(0), "", "at least 1, got 0"),
            (Space::MultiDiscrete { nvec: vec![2], start: vec![0], dtype: DType::F32 }, "", "integer"),
            (Space::multi_discrete(&[2, 0]), "", "nvec[1]"),
            (Space::MultiBinary { shape: vec![] }, "", "MultiBinary"),
            (Space::dict([("a", Space::discrete(2)), ("a", Space::discrete(2))]), "", "\"a\" appears twice"),
            (Space::dict([("a", Space::tuple([Space::discrete(2), Space::discrete(-1)]))]), "a.1", "got -1"),
            (Space::tuple([]), "", "at least one"),
        ];
        for (space, path, words) in cases {
            let err = space.validate().unwrap_err();
            assert_eq!(err.path, path, "{err}");
            assert!(err.to_string().contains(words), "{err} lacks {words:?}");
        }
    }

    #[test]
    #[should_panic(expected = "use Space::leaves")]
    fn array_spec_of_a_dict_panics() {
        every_kind().array_spec();
    }
}
