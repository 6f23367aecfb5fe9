//! The common per-step case of vectorising infos (`ringenv._infos._uniform`) in one native pass:
//! every env's info has the same keys, and each key's values are numbers of one exact type.
//!
//! The result is what Gymnasium's `VectorEnv._add_info`, called env by env, builds for such
//! infos: for each key, in the first env's order, the column `numpy.array(values, dtype=T)` (`T`
//! the values' type: `int`, `float`, `bool` or a NumPy number type) followed by its mask `"_" +
//! key`, a new all-True bool array. Columns of `int`, `float` and `bool` values are filled here
//! (`int64`, `float64`, `bool`: NumPy's dtypes of those types), and columns of a NumPy number type
//! with each scalar's own bytes (`PyArray_ScalarAsCtype`, what NumPy's conversion of a scalar of
//! the array's own dtype copies); anything these cannot hold exactly (an `int` beyond `int64`, a
//! `longdouble`, whose padding bytes NumPy leaves undefined) goes through the same `numpy.array`
//! call as the Python path, so values, dtypes and errors are the same. Only the calls go: 3.1 µs
//! for 8 envs x 3 scalar keys with a `numpy.array` call per column and a copy per mask, ~1 µs
//! here (`timeit` on the 2-core VM). Anything else (values of mixed types, arrays, a `final_obs`
//! key, a key whose mask name is also a key, a key that is not a `str`, an info that is not a
//! `dict`) gives `None`, and the Python path decides.

use numpy::npyffi::PY_ARRAY_API;
use numpy::{PyArray1, PyArrayDescrMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyType};

/// The vectorised infos of `infos` (a list of one info dict per env, in env order, every env of
/// the vector env or of a `recv` batch) when every info has the same keys and each key's values
/// are of one exact type: `int`, `float`, `bool`, or a subclass of `number` (`numpy.number`)
/// other than `timedelta` (`numpy.timedelta64`, whose unitless column Gymnasium cannot fill).
/// Each column is an array of shape `(len(infos),)` holding what `array(values, T)` (`array`:
/// `numpy.array`) holds, each mask a new bool array of `len(infos)` Trues. `None` where the
/// Python path must decide.
///
/// # Errors
/// Whatever `numpy.array` raises for the values (an `int` beyond int64: `OverflowError`), as the
/// Python path would.
#[pyfunction]
pub fn uniform_infos<'py>(
    py: Python<'py>,
    infos: &Bound<'py, PyList>,
    array: &Bound<'py, PyAny>,
    number: &Bound<'py, PyType>,
    timedelta: &Bound<'py, PyType>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let mut dicts = Vec::with_capacity(infos.len());
    for info in infos.iter() {
        match info.cast_into_exact::<PyDict>() {
            Ok(d) => dicts.push(d),
            Err(_) => return Ok(None),
        }
    }
    let Some(first) = dicts.first() else { return Ok(None) };
    let size = first.len();
    if dicts.iter().any(|d| d.len() != size) {
        return Ok(None);
    }
    let (int, float, boolean) = (py.get_type::<PyInt>(), py.get_type::<PyFloat>(), py.get_type::<PyBool>());
    let every = vec![true; dicts.len()];
    let out = PyDict::new(py);
    let mut values = Vec::with_capacity(dicts.len());
    for (key, value) in first.iter() {
        // (a key that UTF-8 cannot encode, a lone surrogate, is left to the Python path)
        let Some(name) = key.cast_exact::<PyString>().ok().and_then(|k| k.to_str().ok()) else { return Ok(None) };
        let mask = PyString::new(py, &format!("_{name}"));
        if name == "final_obs" || first.contains(&mask)? {
            return Ok(None);
        }
        let t = value.get_type();
        let kind = if t.is(&int) {
            Kind::Int
        } else if t.is(&float) {
            Kind::Float
        } else if t.is(&boolean) {
            Kind::Bool
        } else if t.is_subclass(number)? && !t.is(timedelta) {
            Kind::Numpy
        } else {
            return Ok(None);
        };
        values.clear();
        for d in &dicts {
            match d.get_item(&key)? {
                Some(v) if v.get_type().is(&t) => values.push(v),
                _ => return Ok(None),
            }
        }
        let column = match column(py, kind, &values)? {
            Some(column) => column,
            None => array.call1((PyList::new(py, &values)?, &t))?,
        };
        out.set_item(&key, column)?;
        out.set_item(mask, PyArray1::<bool>::from_slice(py, &every))?;
    }
    Ok(Some(out))
}

/// The type of a column's values (all of one exact type).
#[derive(Clone, Copy)]
enum Kind {
    Int,
    Float,
    Bool,
    /// A NumPy number type (a subclass of `numpy.number`).
    Numpy,
}

/// The column of `values` (at least one, all of one exact type of `kind`) filled here, or `None`
/// where `numpy.array` must build it: an `int` beyond `int64`, a NumPy type whose scalars are not
/// NumPy's own of a plain number dtype of at most 8 bytes (16 for complex: not `longdouble`).
fn column<'py>(py: Python<'py>, kind: Kind, values: &[Bound<'py, PyAny>]) -> PyResult<Option<Bound<'py, PyAny>>> {
    Ok(Some(match kind {
        Kind::Int => {
            let Ok(v) = values.iter().map(|v| v.extract::<i64>()).collect::<PyResult<Vec<_>>>() else {
                return Ok(None);
            };
            PyArray1::from_slice(py, &v).into_any()
        }
        Kind::Float => {
            let v = values.iter().map(|v| v.extract::<f64>()).collect::<PyResult<Vec<_>>>()?;
            PyArray1::from_slice(py, &v).into_any()
        }
        Kind::Bool => {
            let v = values.iter().map(|v| v.is_truthy()).collect::<PyResult<Vec<_>>>()?;
            PyArray1::from_slice(py, &v).into_any()
        }
        Kind::Numpy => return numpy_column(py, values),
    }))
}

/// The column of NumPy scalars `values` (all of one exact subclass of `numpy.number`): an array
/// of their dtype holding each one's bytes, or `None` (see [`column`]).
fn numpy_column<'py>(py: Python<'py>, values: &[Bound<'py, PyAny>]) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Some(descr) = crate::obs_copy::own_scalar_dtype(&values[0]) else { return Ok(None) };
    let plain = match descr.kind() {
        b'b' | b'i' | b'u' | b'f' => descr.itemsize() <= 8,
        b'c' => descr.itemsize() <= 16,
        _ => false,
    };
    if !plain {
        return Ok(None);
    }
    let itemsize = descr.itemsize();
    let (array, data) = crate::typed_infos::new_column(py, &descr, values.len())?;
    for (i, v) in values.iter().enumerate() {
        // SAFETY: every value is a scalar of the same exact type as `values[0]` (the caller checked),
        // so of the array's dtype; NumPy copies its `itemsize` bytes to element `i` of the array.
        unsafe { PY_ARRAY_API.PyArray_ScalarAsCtype(py, v.as_ptr(), data.add(i * itemsize).cast()) };
    }
    Ok(Some(array))
}
