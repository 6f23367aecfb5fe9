//! Typed infos between Python and the wire format of [`ringenv_runtime::infos`]: a Python
//! worker (or the inline share) encodes its envs' info dicts ([`encode`]), and the main process
//! turns a command's messages into Gymnasium's vectorised columns ([`typed_columns`]) or each
//! env's own dict ([`typed_dicts`]).

use numpy::npyffi::{get_type_object, NpyTypes, PY_ARRAY_API};
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use ringenv_runtime::infos::{self, Field, InfosError, Kind, Run, Value, Writer, CELL, MAX_ARITY, MAX_NDIM};

fn to_pyerr(e: InfosError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn malformed(what: String) -> PyErr {
    to_pyerr(InfosError(what))
}

/// `value` as a typed scalar, if it is one.
fn scalar_of<'a>(value: &'a Bound<'_, PyAny>) -> Option<Value<'a>> {
    if value.is_none() {
        return Some(Value::None);
    }
    if let Ok(s) = value.cast_exact::<PyString>() {
        // (a `str` that UTF-8 cannot encode, a lone surrogate, is left to the pickled path)
        return s.to_str().ok().map(Value::Str);
    }
    if value.is_exact_instance_of::<PyInt>() {
        return value.extract::<i64>().ok().map(Value::Int);
    }
    if value.is_exact_instance_of::<PyFloat>() {
        return value.extract::<f64>().ok().map(Value::Float);
    }
    if value.is_exact_instance_of::<PyBool>() {
        return value.is_truthy().ok().map(Value::Bool);
    }
    let descr = crate::obs_copy::own_scalar_dtype(value)?;
    let num = u8::try_from(descr.num()).ok().filter(|_| is_typed_dtype(&descr))?;
    let mut cell = [0u8; CELL];
    // SAFETY: NumPy copies the scalar's `itemsize` bytes (at most CELL, checked by
    // `is_typed_dtype`) to the cell with `memcpy`.
    unsafe { PY_ARRAY_API.PyArray_ScalarAsCtype(value.py(), value.as_ptr(), cell.as_mut_ptr().cast()) };
    Some(Value::Numpy(num, cell))
}

/// The field of `value` when it is typed.
fn field_of(value: &Bound<'_, PyAny>) -> Option<Field> {
    if let Some(v) = scalar_of(value) {
        return Some(Field::Scalar(v.kind()));
    }
    if value.is_exact_instance_of::<PyList>() {
        return Some(Field::List);
    }
    if let Some(array) = typed_array(value) {
        let num = u8::try_from(array.dtype().num()).ok()?;
        return Some(Field::Array { num, shape: array.shape().to_vec() });
    }
    let tuple = value.cast_exact::<PyTuple>().ok()?;
    let kinds = tuple.iter().map(|item| scalar_of(&item).map(|v| v.kind())).collect::<Option<Vec<_>>>()?;
    (kinds.len() <= MAX_ARITY).then_some(Field::Tuple(kinds))
}

/// Writes `value`'s cells when it is of `field`, else gives `None` (the caller drops the writer).
fn push(w: &mut Writer, field: &Field, value: &Bound<'_, PyAny>) -> Option<()> {
    let scalar = |w: &mut Writer, kind: Kind, value: &Bound<'_, PyAny>| {
        let v = scalar_of(value).filter(|v| v.kind() == kind)?;
        w.value(v)
    };
    match field {
        Field::Scalar(kind) => scalar(w, *kind, value),
        Field::Tuple(kinds) => {
            let tuple = value.cast_exact::<PyTuple>().ok().filter(|t| t.len() == kinds.len())?;
            tuple.iter().zip(kinds).try_for_each(|(item, kind)| scalar(w, *kind, &item))
        }
        Field::Array { num, shape } => {
            let array = typed_array(value)?;
            if array.dtype().num() != i32::from(*num) || array.shape() != shape.as_slice() {
                return None;
            }
            let nbytes = array.len() * array.dtype().itemsize();
            // SAFETY: a C-contiguous array (checked by `typed_array`) holds exactly `nbytes`
            // bytes at its data pointer, alive while `value` is.
            let bytes = unsafe { std::slice::from_raw_parts(crate::obs_copy::data(&array).cast::<u8>(), nbytes) };
            let cell = w.span(bytes)?;
            w.cell(cell);
            Some(())
        }
        Field::List => {
            let list = value.cast_exact::<PyList>().ok()?;
            // (its strings' bytes go to the data section first, then its items)
            let mut items = Vec::with_capacity(list.len() * infos::ITEM);
            for item in list.iter() {
                let v = scalar_of(&item)?;
                items.extend_from_slice(&v.kind().code());
                items.extend_from_slice(&w.cell_of(v)?);
            }
            let cell = w.span(&items)?;
            w.cell(cell);
            Some(())
        }
    }
}

/// The typed message of `infos` (`(env_id, info)` pairs of one command, in env order), and
/// whether a key holds arrays or lists; `None` unless ids are consecutive, every info an exact
/// `dict` with the first one's `str` keys and fields, and the data under 4 GiB.
pub fn encode(infos: &[(usize, Bound<'_, PyDict>)]) -> Option<(Vec<u8>, bool)> {
    let (first_id, first) = infos.first()?;
    if infos.iter().enumerate().any(|(k, (id, info))| *id != first_id + k || !info.is_exact_instance_of::<PyDict>()) {
        return None;
    }
    let keys: Vec<(Bound<'_, PyAny>, Field)> =
        first.iter().map(|(key, value)| Some((key, field_of(&value)?))).collect::<Option<_>>()?;
    let names: Vec<(&str, Field)> = keys
        .iter()
        .map(|(key, field)| Some((key.cast_exact::<PyString>().ok()?.to_str().ok()?, field.clone())))
        .collect::<Option<_>>()?;
    let mut w = Writer::new();
    w.run(*first_id, infos.len(), &names)?;
    for (_, info) in infos {
        if info.len() != keys.len() {
            return None;
        }
        for ((key, value), (expected, field)) in info.iter().zip(&keys) {
            let same = key.is(expected) || (key.is_exact_instance_of::<PyString>() && key.eq(expected).ok()?);
            if !same {
                return None;
            }
            push(&mut w, field, &value)?;
        }
    }
    let mutable = keys.iter().any(|(_, field)| matches!(field, Field::Array { .. } | Field::List));
    Some((w.finish(), mutable))
}

/// `value` as an array when it is an exact `numpy.ndarray`, C-contiguous, of at most
/// [`MAX_NDIM`] dimensions (each below 2**32) and of a typed array dtype ([`array_descr`] of
/// its type number, byte order included: no structured, sub-array or non-native dtype).
fn typed_array<'py>(value: &Bound<'py, PyAny>) -> Option<Bound<'py, PyUntypedArray>> {
    let py = value.py();
    // SAFETY: NumPy's array type object, which lives as long as NumPy is loaded (this module's
    // callers import NumPy first); `Py_TYPE` of a live object.
    if unsafe { pyo3::ffi::Py_TYPE(value.as_ptr()) != get_type_object(py, NpyTypes::PyArray_Type) } {
        return None;
    }
    // SAFETY: the exact type checked above is NumPy's array type.
    let array = unsafe { value.cast_unchecked::<PyUntypedArray>() }.clone();
    let typed = array.is_c_contiguous()
        && array.ndim() <= MAX_NDIM
        && array.shape().iter().all(|d| u32::try_from(*d).is_ok())
        && u8::try_from(array.dtype().num())
            .ok()
            .and_then(|num| array_descr(py, num))
            .is_some_and(|descr| descr.is_equiv_to(&array.dtype()));
    typed.then_some(array)
}

/// NumPy's built-in dtype of type number `num` (native byte order), if there is one.
fn descr_of(py: Python<'_>, num: u8) -> Option<Bound<'_, PyArrayDescr>> {
    // SAFETY: NumPy returns a new reference to the built-in dtype of a type number, or NULL with
    // an exception set for an unknown number.
    let descr = unsafe { PY_ARRAY_API.PyArray_DescrFromType(py, i32::from(num)) };
    if descr.is_null() {
        drop(PyErr::take(py));
        return None;
    }
    // SAFETY: a new, non-null reference to a dtype object.
    let descr = unsafe { Bound::from_owned_ptr(py, descr.cast::<pyo3::ffi::PyObject>()) };
    let descr = descr.cast_into::<PyArrayDescr>().ok()?;
    (descr.num() == i32::from(num)).then_some(descr)
}

/// Whether `descr` is an integer, float or complex dtype of at most [`CELL`] bytes.
fn is_typed_dtype(descr: &Bound<'_, PyArrayDescr>) -> bool {
    matches!(descr.kind(), b'i' | b'u' | b'f' | b'c') && descr.itemsize() <= CELL
}

/// The dtype of NumPy type number `num` when its arrays are typed (bool, integer, float or
/// complex, native byte order), else `None`.
fn array_descr(py: Python<'_>, num: u8) -> Option<Bound<'_, PyArrayDescr>> {
    descr_of(py, num).filter(|d| matches!(d.kind(), b'b' | b'i' | b'u' | b'f' | b'c'))
}

/// A number key's column dtype: Gymnasium's `numpy.zeros(n, dtype=type(value))`'s; `None` for a
/// `str` or `None`, whose column is an `object` array.
///
/// # Errors
/// `ValueError` for a NumPy type number that is not a typed scalar dtype.
fn dtype_of(py: Python<'_>, kind: Kind) -> PyResult<Option<Bound<'_, PyArrayDescr>>> {
    Ok(Some(match kind {
        Kind::Int => numpy::dtype::<i64>(py),
        Kind::Float => numpy::dtype::<f64>(py),
        Kind::Bool => numpy::dtype::<bool>(py),
        Kind::Numpy(num) => descr_of(py, num)
            .filter(is_typed_dtype)
            .ok_or_else(|| malformed(format!("NumPy type number {num} is not a typed dtype")))?,
        Kind::Str | Kind::None => return Ok(None),
    }))
}

/// A new array of `descr` and `shape`, C-contiguous, and its data pointer.
///
/// # Errors
/// `MemoryError` when NumPy cannot allocate it; `ValueError` for a shape NumPy refuses.
fn new_array<'py>(
    py: Python<'py>,
    descr: &Bound<'py, PyArrayDescr>,
    shape: &[usize],
) -> PyResult<(Bound<'py, PyAny>, *mut u8)> {
    let mut dims: Vec<numpy::npyffi::npy_intp> = shape.iter().map(|d| *d as numpy::npyffi::npy_intp).collect();
    // SAFETY: NumPy's array type and a dtype reference given to NumPy (`into_dtype_ptr` hands
    // over one reference, which `PyArray_NewFromDescr` steals); NumPy allocates the data. The
    // result is a new reference or NULL with an exception set.
    let array = unsafe {
        let ptr = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            get_type_object(py, NpyTypes::PyArray_Type),
            descr.clone().into_dtype_ptr(),
            dims.len() as std::ffi::c_int,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut(),
        );
        Bound::from_owned_ptr_or_err(py, ptr)?
    };
    // SAFETY: `array` is the live array just made.
    let data = unsafe {
        (*numpy::npyffi::objects::_PyArray_GET_ITEM_DATA(array.as_ptr().cast::<numpy::npyffi::PyArrayObject>())).data
    };
    Ok((array, data.cast()))
}

/// Turns a run's values of one key back into Python objects.
struct Decoder<'py> {
    field: Field,
    /// The dtype of each NumPy kind among the field's scalars, by position.
    descrs: Vec<Option<Bound<'py, PyArrayDescr>>>,
    /// An array key's dtype and bytes per env.
    array: Option<(Bound<'py, PyArrayDescr>, usize)>,
}

impl<'py> Decoder<'py> {
    /// # Errors
    /// `ValueError` for a NumPy type number that is not a typed dtype, an array too large.
    fn new(py: Python<'py>, field: &Field) -> PyResult<Decoder<'py>> {
        let kinds: &[Kind] = match field {
            Field::Scalar(kind) => std::slice::from_ref(kind),
            Field::Tuple(kinds) => kinds,
            _ => &[],
        };
        let descrs = kinds
            .iter()
            .map(|k| if matches!(k, Kind::Numpy(_)) { dtype_of(py, *k) } else { Ok(None) })
            .collect::<PyResult<_>>()?;
        let array = match field {
            Field::Array { num, shape } => {
                let descr = array_descr(py, *num)
                    .ok_or_else(|| malformed(format!("NumPy type number {num} is not a typed array dtype")))?;
                let nbytes = shape
                    .iter()
                    .try_fold(descr.itemsize(), |n, d| n.checked_mul(*d))
                    .filter(|n| isize::try_from(*n).is_ok())
                    .ok_or_else(|| malformed(format!("an array of shape {shape:?} too large")))?;
                Some((descr, nbytes))
            }
            _ => None,
        };
        Ok(Decoder { field: field.clone(), descrs, array })
    }

    /// A scalar as the env's value: an `int`, `float`, `bool`, a new NumPy scalar (`descr`: its
    /// dtype, looked up when not given), a new `str`, or `None`.
    fn scalar(py: Python<'py>, v: Value<'_>, descr: Option<&Bound<'py, PyArrayDescr>>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match v {
            Value::Int(i) => i.into_pyobject(py)?.into_any(),
            Value::Float(f) => f.into_pyobject(py)?.into_any(),
            Value::Bool(b) => PyBool::new(py, b).to_owned().into_any(),
            Value::None => py.None().into_bound(py),
            Value::Str(s) => PyString::new(py, s).into_any(),
            Value::Numpy(num, cell) => {
                let looked_up;
                let descr = match descr {
                    Some(d) => d,
                    None => {
                        looked_up = dtype_of(py, Kind::Numpy(num))?.expect("a NumPy kind has a dtype");
                        &looked_up
                    }
                };
                // SAFETY: the cell holds `itemsize` (<= CELL) bytes of a value of `descr`, a
                // built-in number dtype, which NumPy copies into a new scalar (no base object
                // needed). The result is a new reference or NULL with an exception set.
                unsafe {
                    let ptr = PY_ARRAY_API.PyArray_Scalar(
                        py,
                        cell.as_ptr() as *mut std::ffi::c_void,
                        descr.as_dtype_ptr(),
                        std::ptr::null_mut(),
                    );
                    Bound::from_owned_ptr_or_err(py, ptr)?
                }
            }
        })
    }

    /// The bytes of env `i`'s array of key `k` of `run`.
    ///
    /// # Errors
    /// `ValueError` when they are not in the data section or not of the array's size.
    fn array_bytes<'a>(&self, run: &Run<'a>, i: usize, k: usize) -> PyResult<&'a [u8]> {
        let (Field::Array { shape, .. }, Some((_, nbytes))) = (&self.field, &self.array) else {
            unreachable!("the bytes of an array key only")
        };
        let bytes = run.span(run.cell(i, k, 0), "an array").map_err(to_pyerr)?;
        if bytes.len() != *nbytes {
            return Err(malformed(format!("an array of {} bytes for shape {shape:?} of {nbytes} bytes", bytes.len())));
        }
        Ok(bytes)
    }

    /// The value of key `k` of env `i` of `run`, a new object.
    ///
    /// # Errors
    /// `ValueError` for a malformed value; `MemoryError`.
    fn decode(&self, py: Python<'py>, run: &Run<'_>, i: usize, k: usize) -> PyResult<Bound<'py, PyAny>> {
        match &self.field {
            Field::Scalar(_) => Decoder::scalar(py, run.value(i, k, 0).map_err(to_pyerr)?, self.descrs[0].as_ref()),
            Field::Tuple(kinds) => {
                let items = (0..kinds.len())
                    .map(|j| Decoder::scalar(py, run.value(i, k, j).map_err(to_pyerr)?, self.descrs[j].as_ref()));
                Ok(PyTuple::new(py, items.collect::<PyResult<Vec<_>>>()?)?.into_any())
            }
            Field::List => {
                let values = run.list(run.cell(i, k, 0)).map_err(to_pyerr)?;
                let items = values.into_iter().map(|v| Decoder::scalar(py, v, None));
                Ok(PyList::new(py, items.collect::<PyResult<Vec<_>>>()?)?.into_any())
            }
            Field::Array { shape, .. } => {
                let bytes = self.array_bytes(run, i, k)?;
                let (descr, _) = self.array.as_ref().expect("an array key's layout");
                let (array, to) = new_array(py, descr, shape)?;
                // SAFETY: the new array's `nbytes` bytes, which `bytes` is (checked).
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), to, bytes.len()) };
                Ok(array)
            }
        }
    }
}

/// Gymnasium's vectorised infos of the typed messages `payloads` (in env order; each a `bytes`, or
/// the inline share's `(None, [(env_id, info), ...], bytes)`, or either in the pool's `(worker,
/// payload)` pair) when together they hold exactly the envs `env_ids` (a list, or a recv's `int32`
/// array; `None`: every env) in that order, with the same keys and fields: for each key its column
/// (first dimension `len(env_ids)`) and its mask `"_" + key` (bool). `None` also where a payload
/// is not typed (a pickled message, or the share's `(observations, infos)` in a pair).
///
/// # Errors
/// `ValueError` for a malformed message, or a payload that is neither `bytes` nor such a tuple;
/// `MemoryError`.
#[pyfunction]
#[pyo3(signature = (payloads, env_ids, num_envs))]
pub fn typed_columns<'py>(
    py: Python<'py>,
    payloads: &Bound<'py, PyList>,
    env_ids: Option<&Bound<'py, PyAny>>,
    num_envs: usize,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let env_ids = match env_ids.map(|ids| ids.cast::<numpy::PyArray1<i32>>().map_err(|_| ids)) {
        None => None,
        Some(Ok(array)) => match array.to_vec()?.into_iter().map(usize::try_from).collect() {
            Ok(ids) => Some(ids),
            Err(_) => return Ok(None), // (a negative id: no env's)
        },
        Some(Err(ids)) => Some(ids.extract::<Vec<usize>>()?),
    };
    let Some(parts) = payloads.iter().map(|p| payload_parts(&p)).collect::<PyResult<Option<Vec<_>>>>()? else {
        return Ok(None);
    };
    // Each run with the share's pairs beside its payload and its first env's index among them.
    let mut runs: Vec<(Run<'_>, Option<&Bound<'py, PyList>>, usize)> = Vec::new();
    for (bytes, own) in &parts {
        let mut at = 0;
        for run in infos::parse(bytes.as_bytes(), num_envs).map_err(to_pyerr)? {
            let count = run.count;
            runs.push((run, own.as_ref(), at));
            at += count;
        }
    }
    columns(py, &runs, env_ids, num_envs)
}

/// Gymnasium's vectorised infos of `pairs` (`(env_id, info)` pairs, env ids `0..num_envs` in
/// order) when every value is typed and every info has the first one's keys in its order: the
/// columns [`typed_columns`] builds from the message [`encode`] makes of them, a list key's
/// entries the envs' own lists. `None` where the general path must decide.
///
/// # Errors
/// `MemoryError`.
#[pyfunction]
pub fn dict_columns<'py>(
    py: Python<'py>,
    pairs: &Bound<'py, PyList>,
    num_envs: usize,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Ok(infos) = pairs.extract::<Vec<(usize, Bound<'py, PyDict>)>>() else { return Ok(None) };
    let Some((message, _)) = encode(&infos) else { return Ok(None) };
    let runs = infos::parse(&message, num_envs).map_err(to_pyerr)?;
    columns(py, &runs.into_iter().map(|run| (run, Some(pairs), 0)).collect::<Vec<_>>(), None, num_envs)
}

/// The Python side of one key section ([`Run::schema`]), made once: each key's name, its mask's
/// name (`"_" + key`) and a number key's column dtype; no keys where the general path must decide
/// (a key twice, `final_obs`, a mask name that is also a key).
#[allow(clippy::type_complexity)]
struct Schema {
    bytes: Vec<u8>,
    keys: Option<Vec<(Py<PyString>, Py<PyString>, Option<Py<PyArrayDescr>>)>>,
}

/// The schemas met most recently, the newest last (at most [`SCHEMAS_KEPT`]).
static SCHEMAS: std::sync::Mutex<Vec<std::sync::Arc<Schema>>> = std::sync::Mutex::new(Vec::new());
const SCHEMAS_KEPT: usize = 16;

/// The [`Schema`] of `run`'s keys.
///
/// # Errors
/// `ValueError` for a NumPy type number that is not a typed dtype.
fn schema(py: Python<'_>, run: &Run<'_>) -> PyResult<std::sync::Arc<Schema>> {
    let kept = || SCHEMAS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(schema) = kept().iter().rev().find(|s| s.bytes == run.schema) {
        return Ok(schema.clone());
    }
    let names: std::collections::HashSet<&str> = run.keys.iter().map(|(name, _)| *name).collect();
    let clash = |name: &str| name == "final_obs" || name.strip_prefix('_').is_some_and(|key| names.contains(key));
    let keys = if names.len() != run.keys.len() || names.iter().any(|name| clash(name)) {
        None
    } else {
        let key = |(name, field): &(&str, Field)| {
            Ok((
                PyString::intern(py, name).unbind(),
                PyString::intern(py, &format!("_{name}")).unbind(),
                field_dtype(py, field)?.map(Bound::unbind),
            ))
        };
        Some(run.keys.iter().map(key).collect::<PyResult<_>>()?)
    };
    let schema = std::sync::Arc::new(Schema { bytes: run.schema.to_vec(), keys });
    let mut kept = kept();
    if kept.len() == SCHEMAS_KEPT {
        kept.remove(0);
    }
    kept.push(schema.clone());
    Ok(schema)
}

/// The columns of `runs` (see [`typed_columns`]).
#[allow(clippy::type_complexity)]
fn columns<'py>(
    py: Python<'py>,
    runs: &[(Run<'_>, Option<&Bound<'py, PyList>>, usize)],
    env_ids: Option<Vec<usize>>,
    num_envs: usize,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some((head, _, _)) = runs.first() else { return Ok(None) };
    if runs.iter().any(|(r, _, _)| !r.same_keys(head)) {
        return Ok(None);
    }
    let n: usize = runs.iter().map(|(r, _, _)| r.count).sum();
    let mut ids = runs.iter().flat_map(|(r, _, _)| r.first..r.first + r.count);
    let matches = match &env_ids {
        None => n == num_envs && ids.by_ref().eq(0..num_envs),
        Some(expected) => n == expected.len() && ids.by_ref().eq(expected.iter().copied()),
    };
    if !matches {
        return Ok(None);
    }
    let schema = schema(py, head)?;
    let Some(keys) = &schema.keys else { return Ok(None) };
    let every = numpy::dtype::<bool>(py);
    let out = PyDict::new(py);
    for (k, ((name, field), (key, mask, descr))) in head.keys.iter().zip(keys).enumerate() {
        let column = match (field, descr) {
            (Field::Scalar(kind), Some(descr)) => {
                let descr = descr.bind(py);
                let itemsize = descr.itemsize();
                let (column, data) = new_array(py, descr, &[n])?;
                for (row, (run, i)) in rows(runs).enumerate() {
                    let cell = run.cell(i, k, 0);
                    // SAFETY: `data` is the new column's `n * itemsize` bytes (itemsize <= CELL)
                    // and `row < n`; a bool's byte is made 0 or 1, as NumPy's bool holds.
                    unsafe {
                        if *kind == Kind::Bool {
                            *data.add(row) = u8::from(cell[0] != 0);
                        } else {
                            std::ptr::copy_nonoverlapping(cell.as_ptr(), data.add(row * itemsize), itemsize);
                        }
                    }
                }
                column
            }
            (Field::Array { shape, .. }, _) => {
                let decoder = Decoder::new(py, field)?;
                // Every row's bytes are checked before the column is made, so a malformed shape
                // cannot allocate more than the messages hold.
                let bytes = rows(runs).map(|(run, i)| decoder.array_bytes(run, i, k)).collect::<PyResult<Vec<_>>>()?;
                let (descr, nbytes) = decoder.array.as_ref().expect("an array key's layout");
                let shape: Vec<usize> = std::iter::once(n).chain(shape.iter().copied()).collect();
                let (column, to) = new_array(py, descr, &shape)?;
                for (row, bytes) in bytes.iter().enumerate() {
                    // SAFETY: the new column's `n * nbytes` bytes; `row < n` and `bytes` is
                    // `nbytes` long (checked).
                    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), to.add(row * nbytes), *nbytes) };
                }
                column
            }
            _ => {
                let decoder = Decoder::new(py, field)?;
                let (column, data) = new_array(py, &PyArrayDescr::object(py), &[n])?;
                let entries = data.cast::<*mut pyo3::ffi::PyObject>();
                let mut row = 0;
                for (run, own, at) in runs {
                    for i in 0..run.count {
                        let kept = match own {
                            Some(own) if *field == Field::List => own_list(own, at + i, run.first + i, name),
                            _ => None,
                        };
                        let value = match kept {
                            Some(value) => value,
                            None => decoder.decode(py, run, i, k)?,
                        };
                        // SAFETY: `entries` is the new object column's `n` pointers and `row < n`;
                        // the column takes the value's reference and drops whatever entry NumPy
                        // had put there (NULL for a new object array; `Py_XDECREF` of NULL is a
                        // no-op).
                        unsafe { pyo3::ffi::Py_XDECREF(std::ptr::replace(entries.add(row), value.into_ptr())) };
                        row += 1;
                    }
                }
                column
            }
        };
        out.set_item(key.bind(py), column)?;
        let (present, data) = new_array(py, &every, &[n])?;
        // SAFETY: the new mask's `n` bytes, each made True (1).
        unsafe { std::ptr::write_bytes(data, 1, n) };
        out.set_item(mask.bind(py), present)?;
    }
    Ok(Some(out))
}

/// A number key's column dtype (`None` for the other fields).
fn field_dtype<'py>(py: Python<'py>, field: &Field) -> PyResult<Option<Bound<'py, PyArrayDescr>>> {
    match field {
        Field::Scalar(kind) => dtype_of(py, *kind),
        _ => Ok(None),
    }
}

/// Every `(run, env index in the run)` of `runs`, in order.
fn rows<'r, 'a, T, U>(runs: &'r [(Run<'a>, T, U)]) -> impl Iterator<Item = (&'r Run<'a>, usize)> {
    runs.iter().flat_map(|(run, _, _)| (0..run.count).map(move |i| (run, i)))
}

/// An item of [`typed_columns`]' payloads (a payload, or a `(worker, payload)` pair): its message,
/// and the inline share's `(env_id, info)` pairs when they came beside it; `None` when it is not
/// typed (bytes without the typed header; in a pair, a tuple that is not the share's).
///
/// # Errors
/// `ValueError` for anything else.
#[allow(clippy::type_complexity)]
fn payload_parts<'py>(item: &Bound<'py, PyAny>) -> PyResult<Option<(Bound<'py, PyBytes>, Option<Bound<'py, PyList>>)>> {
    let is_pair = |t: &Bound<'py, PyTuple>| t.len() == 2 && t.get_item(0).is_ok_and(|w| w.is_instance_of::<PyInt>());
    let pair = item.cast::<PyTuple>().ok().filter(|t| is_pair(t));
    let payload = match pair {
        Some(pair) => pair.get_item(1)?,
        None => item.clone(),
    };
    if let Ok(message) = payload.cast::<PyBytes>() {
        return Ok(infos::is_typed(message.as_bytes()).then(|| (message.clone(), None)));
    }
    let tuple = payload.cast::<PyTuple>().ok();
    if pair.is_some() && tuple.is_some_and(|t| t.len() != 3) {
        return Ok(None); // the share's (observations, infos)
    }
    let share = || {
        let parts = tuple.filter(|t| t.len() == 3)?;
        Some((
            parts.get_item(2).ok()?.cast_into::<PyBytes>().ok()?,
            parts.get_item(1).ok()?.cast_into::<PyList>().ok()?,
        ))
    };
    let (message, own) = share().ok_or_else(|| {
        PyValueError::new_err(
            "a typed infos payload must be bytes or the inline share's (None, [(env_id, info), ...], bytes)",
        )
    })?;
    Ok(Some((message, Some(own))))
}

/// The inline share's own list of key `name` of env `env_id` (pair `index` of `own`), which
/// `SyncVectorEnv`'s column holds; `None` where the dict no longer matches the message.
fn own_list<'py>(own: &Bound<'py, PyList>, index: usize, env_id: usize, name: &str) -> Option<Bound<'py, PyAny>> {
    let (id, info) = own.get_item(index).ok()?.extract::<(usize, Bound<'py, PyDict>)>().ok()?;
    let value = info.get_item(name).ok()??;
    (id == env_id && value.is_exact_instance_of::<PyList>()).then_some(value)
}

/// Each env's own info dict from the typed message `payload`: a list of `(env_id, info)` pairs in
/// env order, with values of the env's own types (arrays and lists new copies).
///
/// # Errors
/// `ValueError` for a malformed message.
#[pyfunction]
pub fn typed_dicts<'py>(
    py: Python<'py>,
    payload: &Bound<'py, PyBytes>,
    num_envs: usize,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for run in infos::parse(payload.as_bytes(), num_envs).map_err(to_pyerr)? {
        let keys: Vec<(Bound<'py, PyString>, Decoder<'py>)> = run
            .keys
            .iter()
            .map(|(name, field)| Ok((PyString::intern(py, name), Decoder::new(py, field)?)))
            .collect::<PyResult<_>>()?;
        for i in 0..run.count {
            let info = PyDict::new(py);
            for (k, (name, decoder)) in keys.iter().enumerate() {
                info.set_item(name, decoder.decode(py, &run, i, k)?)?;
            }
            out.append(PyTuple::new(py, [(run.first + i).into_pyobject(py)?.into_any(), info.into_any()])?)?;
        }
    }
    Ok(out)
}
