//! Typed infos: the common per-step infos of a block of envs (every env of a command has an info
//! with the same keys in the same order, each value a number, a string, `None`, a tuple of
//! those, a NumPy array of one dtype and shape, or from a worker process a list of numbers,
//! strings and `None`) sent as typed columns in one binary message instead of pickled dicts, and
//! turned back into Gymnasium's vectorised infos, or each env's own dict, in the main process
//! without a Python call per value.
//!
//! A worker's infos otherwise travel as a pickled list of `(env_id, info)` pairs, which the main
//! process unpickles into dicts and vectorises column by column (`ringenv._infos`): for 8 envs
//! with 3 scalar keys that was ~6 µs of the main process's time per step of ~180 µs on the
//! 2-core VM (issue 12's 40 µs grid row), and the pickling ~2 µs of each worker's. Here the
//! worker writes each value's bytes into its cell (`encode`), and the main process builds each
//! column as one new array filled from the cells (`typed_columns`), so the values are never
//! Python objects on the way.
//!
//! A value is *typed* when its type is exactly `int` (fitting `int64`), `float`, `bool`, or
//! NumPy's own scalar type of an integer, float or complex dtype of at most 8 bytes (`float16`
//! to `float64`, `complex64`, every integer; not `bool_`, whose Gymnasium column is an `object`
//! array, nor `longdouble`/`complex128`/`timedelta64`). Gymnasium's `VectorEnv._add_info` gives
//! such a key the column `numpy.zeros(num_envs, dtype=type(value))` (`int64`, `float64`, `bool`
//! or the scalar's dtype) and assigns each env's value: the bytes copied here, since each value
//! is of the column's own type.
//!
//! A value is also typed when it is an exact `str` (a text world's message), `None`, or an exact
//! `tuple` of at most [`MAX_ARITY`] values each a number, `str` or `None` (a grid position such
//! as gym-simplegrid's `agent_xy`): values that cannot change, so a new one equal to the env's is
//! all a caller can tell from it (the inline share's infos are otherwise the env's own objects,
//! as `SyncVectorEnv`'s; a `list`, which an env may keep and change, is typed only from a worker
//! process). Gymnasium's
//! column of such a key is an `object` array (`numpy.full(num_envs, None, dtype=object)`) holding
//! each env's value; here the main process builds each value anew from its cells, of the env's
//! own types (a string's UTF-8 bytes follow the cells). Before these were typed, one such key sent
//! a block's whole infos down the pickled path and Gymnasium's own `_add_info`, env by env:
//! gym-simplegrid (4 envs, ~2 µs per step) ran at 0.68x-0.82x of `SyncVectorEnv` against ~1.8x
//! with the tuple made two numbers (benches/RESULTS.md, `audit14`), and 8 envs of ~1 µs with a
//! string info at 0.74x. Anything else (a subclass such as a named tuple or `numpy.str_`, nested
//! tuples, a dict) keeps the pickled path, so results and errors are Gymnasium's whichever path a
//! step takes.
//!
//! Two more kinds of value are typed, values an env may keep and change after returning them
//! (a worker process's arrive as copies either way; the inline share's are the env's own objects,
//! as `SyncVectorEnv`'s):
//! - in a worker process and in the inline share, an exact `numpy.ndarray` of a bool, integer,
//!   float or complex dtype in native byte order, C-contiguous, of at most [`MAX_NDIM`]
//!   dimensions (an action mask, a position): every env's of the key of the same dtype and
//!   shape. Gymnasium's column of such a key is `numpy.zeros((num_envs, *shape), dtype)` with
//!   each env's array assigned to its row, which is its bytes; here the bytes are copied from the
//!   env's array into the message and from the message into the column's row, where pickling
//!   made a new array of each and Gymnasium's `_add_info` assigned it row by row. Gymnasium
//!   copies each array into its column, so a column of copies is its result in the share too;
//!   the share hands over its envs' own dicts beside the message, for `env_infos()`;
//! - in a worker process only, an exact `list` whose items are each a number, a `str` or `None`
//!   (a text world's admissible commands, a path of cell indices), of any length: its column is
//!   an `object` array of each env's list, made anew here as by unpickling (`SyncVectorEnv`'s
//!   column holds the env's own list, which the share's general path keeps).
//!
//! The message (native byte order; the worker and the main process are one machine):
//!
//! ```text
//! 0   4 bytes   MAGIC ("\0RTI"; a pickle starts with 0x80, so the two never meet)
//! 4   u32       first env id
//! 8   u32       count of envs (at least 1), ids first .. first + count
//! 12  u16       count of keys (at least 1)
//! 14  per key:  u8 kind (b'i' int, b'f' float, b'b' bool, b'n' NumPy, b's' str, b'z' None;
//!               b't' tuple; b'a' array; b'l' list), u8 NumPy type number (`dtype.num`, of a NumPy scalar
//!               or an array's dtype; 0 for the other scalar kinds; a tuple's length, 0 to
//!               MAX_ARITY), u16 length of the name, for a tuple its length x 2 bytes of its
//!               items' kinds (the first two bytes of a scalar key), for an array a u8 count of
//!               dimensions (0 to MAX_NDIM) and a u32 per dimension, the key's UTF-8 bytes
//! ..  cells:    count x width cells of 8 bytes, env by env (width: one cell per scalar or array
//!               key, one per item of a tuple key, in key order); a cell holds a number's bytes
//!               first, a string's, an array's or a list's offset and length in bytes (u32 each)
//!               in the data section, nothing for None
//! ..  data:     the strings' UTF-8 bytes, the arrays' bytes in C order, and the lists: 10 bytes
//!               per item, its kind (2 bytes, as a scalar key's) and its cell (none unless a key
//!               holds strings, arrays or lists)
//! ```
//!
//! Everything is checked before use (`Message::parse`): a malformed message, whoever wrote it,
//! raises `ValueError` naming what was wrong; it cannot crash or hang the main process.

use numpy::npyffi::{get_type_object, NpyTypes, PY_ARRAY_API};
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// The first bytes of a typed message (`ringenv.vector` tells the two kinds of message apart by
/// them).
pub const MAGIC: &[u8; 4] = b"\0RTI";
/// Bytes of one value's cell.
const CELL: usize = 8;
/// Bytes before the first key.
const HEADER: usize = 14;
/// The most items of a typed tuple (its length is one byte of the key's header).
pub const MAX_ARITY: usize = 255;
/// A tuple key's kind byte.
const TUPLE: u8 = b't';
/// An array key's kind byte.
const ARRAY: u8 = b'a';
/// A list key's kind byte.
const LIST: u8 = b'l';
/// Bytes of one item of a list in the data section: its kind and its cell.
const ITEM: usize = 2 + CELL;
/// The most dimensions of a typed array (NumPy 2's own limit is 64).
pub const MAX_NDIM: usize = 32;

/// The type of one value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Int,
    Float,
    Bool,
    /// A NumPy scalar type, by its dtype's type number.
    Numpy(u8),
    /// An exact `str`: its cell holds the offset and the length (`u32` each) of its UTF-8 bytes
    /// in the message's data.
    Str,
    /// `None` (its cell holds nothing).
    None,
}

impl Kind {
    fn code(self) -> [u8; 2] {
        match self {
            Kind::Int => [b'i', 0],
            Kind::Float => [b'f', 0],
            Kind::Bool => [b'b', 0],
            Kind::Numpy(num) => [b'n', num],
            Kind::Str => [b's', 0],
            Kind::None => [b'z', 0],
        }
    }

    fn of_code(code: [u8; 2]) -> Option<Kind> {
        match code {
            [b'i', 0] => Some(Kind::Int),
            [b'f', 0] => Some(Kind::Float),
            [b'b', 0] => Some(Kind::Bool),
            [b'n', num] => Some(Kind::Numpy(num)),
            [b's', 0] => Some(Kind::Str),
            [b'z', 0] => Some(Kind::None),
            _ => None,
        }
    }

    /// The kind of `value` when it is typed.
    fn of(value: &Bound<'_, PyAny>) -> Option<Kind> {
        if value.is_none() {
            return Some(Kind::None);
        }
        if value.is_exact_instance_of::<PyString>() {
            return Some(Kind::Str);
        }
        cell_of(value).map(|(kind, _)| kind)
    }

    /// A number's column dtype: Gymnasium's `numpy.zeros(n, dtype=type(value))`'s; `None` for a
    /// `str` or `None`, whose column is an `object` array.
    ///
    /// # Errors
    /// `ValueError` for a NumPy type number that is not a typed dtype.
    fn dtype<'py>(self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyArrayDescr>>> {
        Ok(Some(match self {
            Kind::Int => numpy::dtype::<i64>(py),
            Kind::Float => numpy::dtype::<f64>(py),
            Kind::Bool => numpy::dtype::<bool>(py),
            Kind::Numpy(num) => numpy_descr(py, num)
                .ok_or_else(|| malformed(format!("NumPy type number {num} is not a typed dtype")))?,
            Kind::Str | Kind::None => return Ok(None),
        }))
    }

    /// Appends the cell of `value` (and a `str`'s bytes to `data`) when it is of this kind, else
    /// gives `None`.
    fn push(self, value: &Bound<'_, PyAny>, cells: &mut Vec<u8>, data: &mut Vec<u8>) -> Option<()> {
        match self {
            Kind::Str => {
                // (a `str` that UTF-8 cannot encode, a lone surrogate, is left to the pickled path)
                let s = value.cast_exact::<PyString>().ok()?.to_str().ok()?;
                let offset = u32::try_from(data.len()).ok()?;
                let len = u32::try_from(s.len()).ok().filter(|len| offset.checked_add(*len).is_some())?;
                data.extend_from_slice(s.as_bytes());
                cells.extend_from_slice(&offset.to_ne_bytes());
                cells.extend_from_slice(&len.to_ne_bytes());
            }
            Kind::None => {
                if !value.is_none() {
                    return None;
                }
                cells.extend_from_slice(&[0; CELL]);
            }
            _ => {
                let (kind, cell) = cell_of(value)?;
                if kind != self {
                    return None;
                }
                cells.extend_from_slice(&cell);
            }
        }
        Some(())
    }
}

/// The type of one key's values: a typed value, or an exact `tuple` of typed values.
#[derive(Clone, PartialEq, Eq, Debug)]
enum Field {
    Scalar(Kind),
    /// A `tuple` of at most [`MAX_ARITY`] values of these kinds, in order.
    Tuple(Vec<Kind>),
    /// An exact `numpy.ndarray` of the dtype of this type number (native byte order) and this
    /// shape, C-contiguous: its cell holds the offset and the length (`u32` each) of its bytes in
    /// the message's data.
    Array {
        num: u8,
        shape: Vec<usize>,
    },
    /// An exact `list` of typed values of any kinds: its cell holds the offset and the length
    /// (`u32` each) of its items in the message's data, [`ITEM`] bytes each.
    List,
}

impl Field {
    /// The field of `value` when it is typed.
    fn of(value: &Bound<'_, PyAny>) -> Option<Field> {
        if let Some(kind) = Kind::of(value) {
            return Some(Field::Scalar(kind));
        }
        if value.is_exact_instance_of::<PyList>() {
            return Some(Field::List);
        }
        if let Some(array) = typed_array(value) {
            let num = u8::try_from(array.dtype().num()).ok()?;
            return Some(Field::Array { num, shape: array.shape().to_vec() });
        }
        let tuple = value.cast_exact::<PyTuple>().ok()?;
        let kinds = tuple.iter().map(|item| Kind::of(&item)).collect::<Option<Vec<_>>>()?;
        (kinds.len() <= MAX_ARITY).then_some(Field::Tuple(kinds))
    }

    /// Cells per env.
    fn width(&self) -> usize {
        match self {
            Field::Scalar(_) | Field::Array { .. } | Field::List => 1,
            Field::Tuple(kinds) => kinds.len(),
        }
    }

    /// The kinds of its values (one for a scalar field, none for an array).
    fn kinds(&self) -> &[Kind] {
        match self {
            Field::Scalar(kind) => std::slice::from_ref(kind),
            Field::Tuple(kinds) => kinds,
            Field::Array { .. } | Field::List => &[],
        }
    }

    /// Whether its values put bytes in the message's data section.
    fn uses_data(&self) -> bool {
        matches!(self, Field::Array { .. } | Field::List) || self.kinds().contains(&Kind::Str)
    }

    /// Appends `value`'s cells to `cells` (and its strings' bytes to `data`) when it is of this
    /// field, else gives `None` (`cells` and `data` may then hold some of them: the caller drops
    /// the message).
    fn push(&self, value: &Bound<'_, PyAny>, cells: &mut Vec<u8>, data: &mut Vec<u8>) -> Option<()> {
        match self {
            Field::Scalar(kind) => kind.push(value, cells, data),
            Field::Tuple(kinds) => {
                let tuple = value.cast_exact::<PyTuple>().ok()?;
                if tuple.len() != kinds.len() {
                    return None;
                }
                tuple.iter().zip(kinds).try_for_each(|(item, kind)| kind.push(&item, cells, data))
            }
            Field::Array { num, shape } => {
                let array = typed_array(value)?;
                if array.dtype().num() != i32::from(*num) || array.shape() != shape.as_slice() {
                    return None;
                }
                let nbytes = array.len() * array.dtype().itemsize();
                let offset = u32::try_from(data.len()).ok()?;
                let len = u32::try_from(nbytes).ok().filter(|len| offset.checked_add(*len).is_some())?;
                // SAFETY: a C-contiguous array (checked by `typed_array`) holds exactly `nbytes`
                // bytes at its data pointer, alive while `value` is.
                data.extend_from_slice(unsafe {
                    std::slice::from_raw_parts(crate::obs_copy::data(&array).cast(), nbytes)
                });
                cells.extend_from_slice(&offset.to_ne_bytes());
                cells.extend_from_slice(&len.to_ne_bytes());
                Some(())
            }
            Field::List => {
                let list = value.cast_exact::<PyList>().ok()?;
                // (its strings' bytes go to `data` first, then its items)
                let mut items = Vec::with_capacity(list.len() * ITEM);
                for item in list.iter() {
                    let kind = Kind::of(&item)?;
                    items.extend_from_slice(&kind.code());
                    kind.push(&item, &mut items, data)?;
                }
                let offset = u32::try_from(data.len()).ok()?;
                let len = u32::try_from(items.len()).ok().filter(|len| offset.checked_add(*len).is_some())?;
                data.extend_from_slice(&items);
                cells.extend_from_slice(&offset.to_ne_bytes());
                cells.extend_from_slice(&len.to_ne_bytes());
                Some(())
            }
        }
    }
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

/// The dtype of NumPy type number `num` when its arrays are typed (bool, integer, float or
/// complex, native byte order), else `None`.
fn array_descr(py: Python<'_>, num: u8) -> Option<Bound<'_, PyArrayDescr>> {
    let descr = descr_of(py, num)?;
    matches!(descr.kind(), b'b' | b'i' | b'u' | b'f' | b'c').then_some(descr)
}

/// Turns a cell of one kind back into the env's value.
struct Decoder<'py> {
    kind: Kind,
    /// The dtype of a NumPy kind (checked to be typed).
    descr: Option<Bound<'py, PyArrayDescr>>,
}

impl<'py> Decoder<'py> {
    /// # Errors
    /// `ValueError` for a NumPy type number that is not a typed dtype.
    fn new(py: Python<'py>, kind: Kind) -> PyResult<Decoder<'py>> {
        let descr = match kind {
            Kind::Numpy(_) => kind.dtype(py)?,
            _ => None,
        };
        Ok(Decoder { kind, descr })
    }

    /// The value of `cell` (CELL bytes; a string's bytes in `data`): an `int`, `float`, `bool`,
    /// a new NumPy scalar, a new `str`, or `None`.
    ///
    /// # Errors
    /// `ValueError` for a string outside `data` or not UTF-8.
    fn decode(&self, py: Python<'py>, cell: &[u8], data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        let cell: [u8; CELL] = cell.try_into().expect("a cell");
        Ok(match (self.kind, &self.descr) {
            (Kind::Int, _) => i64::from_ne_bytes(cell).into_pyobject(py)?.into_any(),
            (Kind::Float, _) => f64::from_ne_bytes(cell).into_pyobject(py)?.into_any(),
            (Kind::Bool, _) => PyBool::new(py, cell[0] != 0).to_owned().into_any(),
            (Kind::None, _) => py.None().into_bound(py),
            (Kind::Str, _) => {
                let bytes = span(&cell, data, "a string")?;
                let s = std::str::from_utf8(bytes).map_err(|_| malformed("a string that is not UTF-8".into()))?;
                PyString::new(py, s).into_any()
            }
            (Kind::Numpy(_), Some(descr)) => {
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
            (Kind::Numpy(_), None) => unreachable!("a NumPy kind has its dtype"),
        })
    }
}

/// The bytes of the data section that `cell` (an offset and a length, `u32` each) names.
///
/// # Errors
/// `ValueError` naming `what` when they are not all in `data`.
fn span<'a>(cell: &[u8], data: &'a [u8], what: &str) -> PyResult<&'a [u8]> {
    let offset = u32::from_ne_bytes(cell[..4].try_into().expect("4 bytes")) as usize;
    let len = u32::from_ne_bytes(cell[4..CELL].try_into().expect("4 bytes")) as usize;
    data.get(offset..offset + len).ok_or_else(|| {
        malformed(format!("{what} of {len} bytes at {offset} of a data section of {} bytes", data.len()))
    })
}

/// The list of `cell` (its items' offset and length in `data`): a new `list` of each item's
/// value (see [`Decoder::decode`]).
///
/// # Errors
/// `ValueError` for items outside `data` or not whole, an unknown kind, a string outside `data`
/// or not UTF-8, a NumPy type number that is not a typed dtype.
fn decode_list<'py>(py: Python<'py>, cell: &[u8], data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    let items = span(cell, data, "a list")?;
    if items.len() % ITEM != 0 {
        return Err(malformed(format!("a list of {} bytes, not whole items of {ITEM}", items.len())));
    }
    // (a decoder is made once per run of items of one kind: a NumPy kind's looks its dtype up)
    let mut decoder: Option<Decoder<'py>> = None;
    let mut values = Vec::with_capacity(items.len() / ITEM);
    for item in items.chunks_exact(ITEM) {
        let kind = Kind::of_code([item[0], item[1]])
            .ok_or_else(|| malformed(format!("unknown value kind {:?} in a list", &item[..2])))?;
        let d = match decoder.take() {
            Some(d) if d.kind == kind => d,
            _ => Decoder::new(py, kind)?,
        };
        values.push(d.decode(py, &item[2..], data)?);
        decoder = Some(d);
    }
    Ok(PyList::new(py, values)?.into_any())
}

/// An array key's dtype, shape and bytes per env.
struct ArrayLayout<'py> {
    descr: Bound<'py, PyArrayDescr>,
    shape: Vec<usize>,
    nbytes: usize,
}

impl<'py> ArrayLayout<'py> {
    /// # Errors
    /// `ValueError` for a type number that is not a typed array dtype, or a shape of more than
    /// `isize::MAX` bytes.
    fn new(py: Python<'py>, num: u8, shape: &[usize]) -> PyResult<ArrayLayout<'py>> {
        let descr = array_descr(py, num)
            .ok_or_else(|| malformed(format!("NumPy type number {num} is not a typed array dtype")))?;
        let nbytes = shape
            .iter()
            .try_fold(descr.itemsize(), |n, d| n.checked_mul(*d))
            .filter(|n| isize::try_from(*n).is_ok())
            .ok_or_else(|| malformed(format!("an array of shape {shape:?} too large")))?;
        Ok(ArrayLayout { descr, shape: shape.to_vec(), nbytes })
    }

    /// The bytes of env `i`'s array of key `k` of `m`.
    ///
    /// # Errors
    /// `ValueError` when they are not in the data section or not `nbytes` long.
    fn bytes<'a>(&self, m: &Message<'a>, i: usize, k: usize) -> PyResult<&'a [u8]> {
        let bytes = span(m.cell(i, k, 0), m.data, "an array")?;
        if bytes.len() != self.nbytes {
            return Err(malformed(format!(
                "an array of {} bytes for shape {:?} of {} bytes",
                bytes.len(),
                self.shape,
                self.nbytes
            )));
        }
        Ok(bytes)
    }
}

/// Turns an env's cells of one key back into its value.
struct FieldDecoder<'py> {
    /// Whether the key holds tuples.
    tuple: bool,
    decoders: Vec<Decoder<'py>>,
    /// An array key's layout.
    array: Option<ArrayLayout<'py>>,
    /// Whether the key holds lists.
    list: bool,
}

impl<'py> FieldDecoder<'py> {
    /// # Errors
    /// `ValueError` for a NumPy type number that is not a typed dtype; as [`ArrayLayout::new`].
    fn new(py: Python<'py>, field: &Field) -> PyResult<FieldDecoder<'py>> {
        let decoders = field.kinds().iter().map(|kind| Decoder::new(py, *kind)).collect::<PyResult<_>>()?;
        let array = match field {
            Field::Array { num, shape } => Some(ArrayLayout::new(py, *num, shape)?),
            _ => None,
        };
        Ok(FieldDecoder { tuple: matches!(field, Field::Tuple(_)), decoders, array, list: *field == Field::List })
    }

    /// The value of key `k` of env `i` of `m` (an array: a new one, of its own bytes).
    ///
    /// # Errors
    /// As [`Decoder::decode`] and [`ArrayLayout::bytes`]; `MemoryError`.
    fn decode(&self, py: Python<'py>, m: &Message<'_>, i: usize, k: usize) -> PyResult<Bound<'py, PyAny>> {
        if let Some(layout) = &self.array {
            let bytes = layout.bytes(m, i, k)?;
            let (array, to) = new_array(py, &layout.descr, &layout.shape)?;
            // SAFETY: the new array's `nbytes` bytes, which `bytes` is (checked).
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), to, bytes.len()) };
            return Ok(array);
        }
        if self.list {
            return decode_list(py, m.cell(i, k, 0), m.data);
        }
        if !self.tuple {
            return self.decoders[0].decode(py, m.cell(i, k, 0), m.data);
        }
        let items = self.decoders.iter().enumerate().map(|(j, d)| d.decode(py, m.cell(i, k, j), m.data));
        Ok(PyTuple::new(py, items.collect::<PyResult<Vec<_>>>()?)?.into_any())
    }
}

/// The dtype of NumPy type number `num` when its scalars are typed (integer, float or complex,
/// at most [`CELL`] bytes), else `None`.
fn numpy_descr(py: Python<'_>, num: u8) -> Option<Bound<'_, PyArrayDescr>> {
    descr_of(py, num).filter(is_typed_dtype)
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

/// The kind of `value` and its cell, when it is typed (see the module's documentation).
fn cell_of(value: &Bound<'_, PyAny>) -> Option<(Kind, [u8; CELL])> {
    let mut cell = [0u8; CELL];
    if value.is_exact_instance_of::<PyInt>() {
        cell = value.extract::<i64>().ok()?.to_ne_bytes();
        return Some((Kind::Int, cell));
    }
    if value.is_exact_instance_of::<PyFloat>() {
        cell = value.extract::<f64>().ok()?.to_ne_bytes();
        return Some((Kind::Float, cell));
    }
    if value.is_exact_instance_of::<PyBool>() {
        cell[0] = u8::from(value.is_truthy().ok()?);
        return Some((Kind::Bool, cell));
    }
    let descr = crate::obs_copy::own_scalar_dtype(value)?;
    let num = u8::try_from(descr.num()).ok().filter(|_| is_typed_dtype(&descr))?;
    // SAFETY: NumPy copies the scalar's `itemsize` bytes (at most CELL, checked by
    // `is_typed_dtype`) to the cell with `memcpy`.
    unsafe { PY_ARRAY_API.PyArray_ScalarAsCtype(value.py(), value.as_ptr(), cell.as_mut_ptr().cast()) };
    Some((Kind::Numpy(num), cell))
}

/// The typed message of `infos` (`(env_id, info)` pairs of one command, in env order), or `None`
/// when they are not all typed: ids not consecutive, an info that is not exactly a `dict`, keys
/// that are not `str` or not the first info's in its order, a value not typed or not of the first
/// info's kind for its key (for a tuple: its length and each item's kind; for an array: its dtype
/// and shape), strings, arrays and lists of more than 4 GiB in all. With the message, whether a
/// key holds arrays or lists (values the env may change, whose copies the message holds: the
/// inline share hands its envs' own dicts over beside it, see [`typed_columns`]).
pub fn encode(infos: &[(usize, Bound<'_, PyDict>)]) -> Option<(Vec<u8>, bool)> {
    let (first_id, first) = infos.first()?;
    if infos.iter().enumerate().any(|(k, (id, info))| *id != first_id + k || !info.is_exact_instance_of::<PyDict>()) {
        return None;
    }
    let keys: Vec<(Bound<'_, PyAny>, Field)> =
        first.iter().map(|(key, value)| Some((key, Field::of(&value)?))).collect::<Option<_>>()?;
    if keys.is_empty() || keys.len() > usize::from(u16::MAX) {
        return None;
    }
    let width: usize = keys.iter().map(|(_, field)| field.width()).sum();
    let mut message = Vec::with_capacity(HEADER + keys.len() * 16 + infos.len() * width * CELL);
    message.extend_from_slice(MAGIC);
    message.extend_from_slice(&u32::try_from(*first_id).ok()?.to_ne_bytes());
    message.extend_from_slice(&u32::try_from(infos.len()).ok()?.to_ne_bytes());
    message.extend_from_slice(&(keys.len() as u16).to_ne_bytes());
    for (key, field) in &keys {
        let name = key.cast_exact::<PyString>().ok()?.to_str().ok()?;
        match field {
            Field::Scalar(kind) => message.extend_from_slice(&kind.code()),
            Field::Tuple(kinds) => message.extend_from_slice(&[TUPLE, kinds.len() as u8]),
            Field::Array { num, .. } => message.extend_from_slice(&[ARRAY, *num]),
            Field::List => message.extend_from_slice(&[LIST, 0]),
        }
        message.extend_from_slice(&u16::try_from(name.len()).ok()?.to_ne_bytes());
        match field {
            Field::Scalar(_) | Field::List => {}
            Field::Tuple(kinds) => kinds.iter().for_each(|kind| message.extend_from_slice(&kind.code())),
            Field::Array { shape, .. } => {
                message.push(shape.len() as u8);
                shape.iter().for_each(|d| message.extend_from_slice(&(*d as u32).to_ne_bytes()));
            }
        }
        message.extend_from_slice(name.as_bytes());
    }
    let mut data = Vec::new();
    for (_, info) in infos {
        if info.len() != keys.len() {
            return None;
        }
        for ((key, value), (expected, field)) in info.iter().zip(&keys) {
            let same = key.is(expected) || (key.is_exact_instance_of::<PyString>() && key.eq(expected).ok()?);
            if !same {
                return None;
            }
            field.push(&value, &mut message, &mut data)?;
        }
    }
    message.extend_from_slice(&data);
    let mutable = keys.iter().any(|(_, field)| matches!(field, Field::Array { .. } | Field::List));
    Some((message, mutable))
}

/// Whether `payload` is a typed message (by its first bytes; [`Message::parse`] checks the rest).
pub fn is_typed(payload: &[u8]) -> bool {
    payload.starts_with(MAGIC)
}

fn malformed(what: String) -> PyErr {
    PyValueError::new_err(format!("malformed typed infos message from a worker: {what}"))
}

/// A typed message, checked.
struct Message<'a> {
    first: usize,
    count: usize,
    /// The bytes of the keys' section, for comparing two messages' keys.
    schema: &'a [u8],
    keys: Vec<(&'a str, Field)>,
    /// Each key's first cell in an env's row.
    offsets: Vec<usize>,
    /// Cells of an env's row.
    width: usize,
    cells: &'a [u8],
    /// The strings' UTF-8 bytes, after the cells (empty when no key holds a string).
    data: &'a [u8],
}

impl<'a> Message<'a> {
    /// Parses and checks `bytes` for a vector env of `num_envs` envs.
    fn parse(bytes: &'a [u8], num_envs: usize) -> PyResult<Message<'a>> {
        let u32_at = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        if bytes.len() < HEADER || !is_typed(bytes) {
            return Err(malformed(format!("{} bytes, not starting with the typed header", bytes.len())));
        }
        let (first, count) = (u32_at(4), u32_at(8));
        let nkeys = usize::from(u16::from_ne_bytes([bytes[12], bytes[13]]));
        if count == 0 || nkeys == 0 || first.checked_add(count).is_none_or(|end| end > num_envs) {
            return Err(malformed(format!(
                "envs {first}..{} with {nkeys} keys in a vector env of {num_envs} envs",
                first.saturating_add(count)
            )));
        }
        let mut at = HEADER;
        let mut keys = Vec::with_capacity(nkeys);
        let (mut offsets, mut width) = (Vec::with_capacity(nkeys), 0);
        let kind_at = |at: usize| {
            let code = bytes.get(at..at + 2).ok_or_else(|| malformed(format!("truncated key at byte {at}")))?;
            Kind::of_code([code[0], code[1]])
                .ok_or_else(|| malformed(format!("unknown value kind {code:?} at byte {at}")))
        };
        for _ in 0..nkeys {
            let head = bytes.get(at..at + 4).ok_or_else(|| malformed(format!("truncated key at byte {at}")))?;
            let len = usize::from(u16::from_ne_bytes([head[2], head[3]]));
            let (field, elements) = match head[0] {
                TUPLE => {
                    let arity = usize::from(head[1]);
                    let kinds = (0..arity).map(|j| kind_at(at + 4 + 2 * j)).collect::<PyResult<_>>()?;
                    (Field::Tuple(kinds), 2 * arity)
                }
                ARRAY => {
                    let ndim = usize::from(
                        *bytes.get(at + 4).ok_or_else(|| malformed(format!("truncated key at byte {at}")))?,
                    );
                    let dims = bytes
                        .get(at + 5..at + 5 + 4 * ndim)
                        .filter(|_| ndim <= MAX_NDIM)
                        .ok_or_else(|| malformed(format!("an array key of {ndim} dimensions at byte {at}")))?;
                    let shape =
                        dims.chunks_exact(4).map(|d| u32::from_ne_bytes(d.try_into().expect("4 bytes")) as usize);
                    (Field::Array { num: head[1], shape: shape.collect() }, 1 + 4 * ndim)
                }
                LIST if head[1] == 0 => (Field::List, 0),
                _ => (Field::Scalar(kind_at(at)?), 0),
            };
            let start = at + 4 + elements;
            let name = bytes.get(start..start + len).ok_or_else(|| malformed(format!("truncated key at byte {at}")))?;
            let name =
                std::str::from_utf8(name).map_err(|_| malformed(format!("a key that is not UTF-8 at byte {at}")))?;
            offsets.push(width);
            width += field.width();
            keys.push((name, field));
            at = start + len;
        }
        let rest = bytes.len() - at;
        let has_data = keys.iter().any(|(_, field)| field.uses_data());
        let size = count.checked_mul(width).and_then(|n| n.checked_mul(CELL));
        if size.is_none_or(|size| if has_data { rest < size } else { rest != size }) {
            return Err(malformed(format!("{rest} bytes of values for {count} envs x {width} cells of {nkeys} keys")));
        }
        let (cells, data) = bytes[at..].split_at(size.unwrap_or_default());
        Ok(Message { first, count, schema: &bytes[HEADER..at], keys, offsets, width, cells, data })
    }

    /// Cell `j` (0 for a scalar key; the item for a tuple key) of env `i` (of this message's,
    /// from 0) and key `k`.
    fn cell(&self, i: usize, k: usize, j: usize) -> &'a [u8] {
        let at = (i * self.width + self.offsets[k] + j) * CELL;
        &self.cells[at..at + CELL]
    }
}

/// A new array of `descr` and shape `(n,)`, C-contiguous, and its data pointer.
///
/// # Errors
/// `MemoryError` when NumPy cannot allocate it.
pub fn new_column<'py>(
    py: Python<'py>,
    descr: &Bound<'py, PyArrayDescr>,
    n: usize,
) -> PyResult<(Bound<'py, PyAny>, *mut u8)> {
    new_array(py, descr, &[n])
}

/// A new array of `descr` and `shape` (at most 64 dimensions), C-contiguous, and its data
/// pointer.
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
    // over one reference, which `PyArray_NewFromDescr` steals); one dimension of `n`; NumPy
    // allocates the data. The result is a new reference or NULL with an exception set.
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

/// Gymnasium's vectorised infos of the typed messages `payloads` (in env order; each a `bytes`,
/// or the inline share's `(None, [(env_id, info), ...], bytes)`: its envs' own dicts beside the
/// message) when together they hold exactly the envs `env_ids` (`None`: every env,
/// `0..num_envs`) in that order, with the same keys and kinds: for each key, in order, its column
/// (shape `(len(env_ids),)`: of a scalar key the dtype of `numpy.zeros(n, dtype=type(value))`, of
/// a `str`, `None`, tuple or list key `object`, each entry a new value of the env's types, except
/// that a list key's entry for an env of the share is that env's own list, as `SyncVectorEnv`'s
/// column holds it; of an array key shape `(len(env_ids), *shape)` and the arrays' dtype, row by
/// row their bytes) and its mask `"_" + key` (all True, bool). `None` where the general path must
/// decide: other envs, other keys, a key named `final_obs` or whose mask name is also a key.
///
/// # Errors
/// `ValueError` for a malformed message, or a payload that is neither `bytes` nor such a tuple;
/// `MemoryError`.
#[pyfunction]
#[pyo3(signature = (payloads, env_ids, num_envs))]
pub fn typed_columns<'py>(
    py: Python<'py>,
    payloads: &Bound<'py, PyList>,
    env_ids: Option<Vec<usize>>,
    num_envs: usize,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let (bytes, owns): (Vec<Bound<'py, PyBytes>>, Vec<Option<Bound<'py, PyList>>>) =
        payloads.iter().map(|p| payload_parts(&p)).collect::<PyResult<Vec<_>>>()?.into_iter().unzip();
    let messages: Vec<Message<'_>> =
        bytes.iter().map(|b| Message::parse(b.as_bytes(), num_envs)).collect::<PyResult<_>>()?;
    let Some(head) = messages.first() else { return Ok(None) };
    if messages.iter().any(|m| m.schema != head.schema) {
        return Ok(None);
    }
    let n: usize = messages.iter().map(|m| m.count).sum();
    let mut ids = messages.iter().flat_map(|m| m.first..m.first + m.count);
    let matches = match &env_ids {
        None => n == num_envs && ids.by_ref().eq(0..num_envs),
        Some(expected) => n == expected.len() && ids.by_ref().eq(expected.iter().copied()),
    };
    if !matches {
        return Ok(None);
    }
    let names: std::collections::HashSet<&str> = head.keys.iter().map(|(name, _)| *name).collect();
    let clash = |name: &str| name == "final_obs" || name.strip_prefix('_').is_some_and(|key| names.contains(key));
    if names.len() != head.keys.len() || names.iter().any(|name| clash(name)) {
        return Ok(None);
    }
    let every = vec![true; n];
    let out = PyDict::new(py);
    for (k, (name, field)) in head.keys.iter().enumerate() {
        let column = match field {
            Field::Scalar(kind) => match kind.dtype(py)? {
                Some(descr) => number_column(py, &messages, k, *kind, &descr, n)?,
                None => object_column(py, &messages, k, field, n, None)?,
            },
            Field::Tuple(_) => object_column(py, &messages, k, field, n, None)?,
            Field::List => object_column(py, &messages, k, field, n, Some((&owns, name)))?,
            Field::Array { num, shape } => array_column(py, &messages, k, &ArrayLayout::new(py, *num, shape)?, n)?,
        };
        out.set_item(*name, column)?;
        out.set_item(format!("_{name}"), numpy::PyArray1::<bool>::from_slice(py, &every))?;
    }
    Ok(Some(out))
}

/// A payload of [`typed_columns`]: its message, and the inline share's `(env_id, info)` pairs
/// when they came beside it.
///
/// # Errors
/// `ValueError` for anything else.
#[allow(clippy::type_complexity)]
fn payload_parts<'py>(payload: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyBytes>, Option<Bound<'py, PyList>>)> {
    if let Ok(message) = payload.cast::<PyBytes>() {
        return Ok((message.clone(), None));
    }
    let share = || {
        let parts = payload.cast::<PyTuple>().ok().filter(|t| t.len() == 3)?;
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
    Ok((message, Some(own)))
}

/// The inline share's own list of key `name` for its env `i` of message `m` (`own`: the
/// share's `(env_id, info)` pairs beside `m`), which `SyncVectorEnv`'s column holds (the env may
/// change that list later, and the column with it); `None` where the pair or the value is not as
/// the message says (only another thread could have changed the dict since).
fn own_list<'py>(own: &Bound<'py, PyList>, m: &Message<'_>, i: usize, name: &str) -> Option<Bound<'py, PyAny>> {
    let (id, info) = own.get_item(i).ok()?.extract::<(usize, Bound<'py, PyDict>)>().ok()?;
    let value = info.get_item(name).ok()??;
    (id == m.first + i && value.is_exact_instance_of::<PyList>()).then_some(value)
}

/// The column of number key `k` of `kind` (of dtype `descr`) over `messages` (`n` envs in all).
fn number_column<'py>(
    py: Python<'py>,
    messages: &[Message<'_>],
    k: usize,
    kind: Kind,
    descr: &Bound<'py, PyArrayDescr>,
    n: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let itemsize = descr.itemsize();
    let (column, data) = new_column(py, descr, n)?;
    let mut row = 0;
    for m in messages {
        for i in 0..m.count {
            let cell = m.cell(i, k, 0);
            // SAFETY: `data` is the new column's `n * itemsize` bytes (itemsize <= CELL) and
            // `row < n`; a bool's byte is made 0 or 1, as NumPy's bool holds.
            unsafe {
                if kind == Kind::Bool {
                    *data.add(row) = u8::from(cell[0] != 0);
                } else {
                    std::ptr::copy_nonoverlapping(cell.as_ptr(), data.add(row * itemsize), itemsize);
                }
            }
            row += 1;
        }
    }
    Ok(column)
}

/// The column of array key `k` of `layout` over `messages` (`n` envs in all): a new array of
/// shape `(n, *shape)`, row `row` that env's array's bytes.
///
/// # Errors
/// As [`ArrayLayout::bytes`]; `MemoryError`.
fn array_column<'py>(
    py: Python<'py>,
    messages: &[Message<'_>],
    k: usize,
    layout: &ArrayLayout<'py>,
    n: usize,
) -> PyResult<Bound<'py, PyAny>> {
    // Every row's bytes are checked before the column is made, so a malformed shape cannot
    // allocate more than the messages hold.
    let rows =
        messages.iter().flat_map(|m| (0..m.count).map(move |i| layout.bytes(m, i, k))).collect::<PyResult<Vec<_>>>()?;
    let shape: Vec<usize> = std::iter::once(n).chain(layout.shape.iter().copied()).collect();
    let (column, to) = new_array(py, &layout.descr, &shape)?;
    for (row, bytes) in rows.iter().enumerate() {
        // SAFETY: the new column's `n * nbytes` bytes; `row < n` (the messages' `n` envs) and
        // `bytes` is `nbytes` long.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), to.add(row * layout.nbytes), layout.nbytes) };
    }
    Ok(column)
}

/// The column of key `k` (a `str`, `None`, tuple or list key) over `messages` (`n` envs in all):
/// a new `object` array of shape `(n,)`, entry `row` that env's value, a new object; for a list
/// key (`lists`: the inline share's pairs beside each message, and the key's name) an env of the
/// share's own list ([`own_list`]).
///
/// # Errors
/// `ValueError` for a string outside the data or not UTF-8, a NumPy type number that is not a
/// typed dtype; `MemoryError`.
fn object_column<'py>(
    py: Python<'py>,
    messages: &[Message<'_>],
    k: usize,
    field: &Field,
    n: usize,
    lists: Option<(&[Option<Bound<'py, PyList>>], &str)>,
) -> PyResult<Bound<'py, PyAny>> {
    let decoder = FieldDecoder::new(py, field)?;
    let (column, data) = new_column(py, &PyArrayDescr::object(py), n)?;
    let entries = data.cast::<*mut pyo3::ffi::PyObject>();
    let mut row = 0;
    for (j, m) in messages.iter().enumerate() {
        let own = lists.and_then(|(owns, name)| Some((owns.get(j)?.as_ref()?, name)));
        for i in 0..m.count {
            let value = match own.and_then(|(own, name)| own_list(own, m, i, name)) {
                Some(value) => value,
                None => decoder.decode(py, m, i, k)?,
            };
            // SAFETY: `entries` is the new object column's `n` pointers and `row < n`; the column
            // takes the value's reference and drops whatever entry NumPy had put there (NULL for
            // a new object array; `Py_XDECREF` is a no-op on it).
            unsafe {
                let old = std::ptr::replace(entries.add(row), value.into_ptr());
                pyo3::ffi::Py_XDECREF(old);
            }
            row += 1;
        }
    }
    Ok(column)
}

/// Each env's own info dict from the typed message `payload`: a list of `(env_id, info)` pairs in
/// env order, each info with the message's keys in order and values of the env's own types
/// (`int`, `float`, `bool`, a NumPy scalar type, `str`, `None`, or a `tuple` of those; a new
/// `numpy.ndarray` of the env's array's dtype, shape and bytes, a new `list` of such scalars).
///
/// # Errors
/// `ValueError` for a malformed message.
#[pyfunction]
pub fn typed_dicts<'py>(
    py: Python<'py>,
    payload: &Bound<'py, PyBytes>,
    num_envs: usize,
) -> PyResult<Bound<'py, PyList>> {
    let m = Message::parse(payload.as_bytes(), num_envs)?;
    let keys: Vec<(Bound<'py, PyString>, FieldDecoder<'py>)> = m
        .keys
        .iter()
        .map(|(name, field)| Ok((PyString::intern(py, name), FieldDecoder::new(py, field)?)))
        .collect::<PyResult<_>>()?;
    let out = PyList::empty(py);
    for i in 0..m.count {
        let info = PyDict::new(py);
        for (k, (name, decoder)) in keys.iter().enumerate() {
            info.set_item(name, decoder.decode(py, &m, i, k)?)?;
        }
        out.append(PyTuple::new(py, [(m.first + i).into_pyobject(py)?.into_any(), info.into_any()])?)?;
    }
    Ok(out)
}
