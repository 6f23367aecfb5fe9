//! Copying a Python env's observation into its rows of the shared segment without a Python call
//! per leaf: a NumPy array of its row's dtype and shape, in C order, with one `memcpy`; a NumPy
//! scalar of its row's dtype, or a Python `int`, `float` or `bool`, for a row of shape `()` as
//! NumPy's assignment stores it; anything else through the Python writer of `ringenv._obs_writer`,
//! so results and errors stay Gymnasium's.

use numpy::npyffi::{get_type_object, NpyTypes, PY_ARRAY_API};
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyTuple, PyType};

/// The Python scalar a row of shape `()` takes as it is: `int` for `int64`, `float` for
/// `float64`, `bool` for `bool`, the types whose `numpy.asarray` has the row's dtype, so the
/// value is stored as NumPy's assignment (`row[()] = value`) stores it.
#[derive(Clone, Copy)]
enum Scalar {
    Int,
    Float,
    Bool,
}

/// One leaf's row in the segment: where it is, how many bytes, and the dtype and shape a value
/// must have to be copied as it is.
pub struct Row {
    /// The NumPy view the row was read from: it keeps the segment mapped while the row is used.
    view: Py<PyAny>,
    address: usize,
    nbytes: usize,
    dtype: Py<PyArrayDescr>,
    shape: Vec<usize>,
    scalar: Option<Scalar>,
    /// A row of shape `()` of a bool, integer, float or complex dtype of no padding (not
    /// `longdouble`), which a NumPy scalar of its dtype is copied into ([`Row::put_numpy_scalar`]).
    numpy_scalar: bool,
}

impl Row {
    /// The row that `view` (a writable, C-contiguous NumPy array over the segment, kept by the
    /// `Row`) covers.
    ///
    /// # Errors
    /// `TypeError` for a `view` that is not a NumPy array; `ValueError` for one that is not
    /// C-contiguous or not writable (the layout never builds such a row).
    pub fn of(view: &Bound<'_, PyAny>) -> PyResult<Self> {
        let array = view.cast::<PyUntypedArray>()?;
        if !array.is_c_contiguous() || !view.getattr("flags")?.getattr("writeable")?.is_truthy()? {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "an observation row must be C-contiguous and writable",
            ));
        }
        let (py, dtype) = (view.py(), array.dtype());
        let scalar = if array.ndim() != 0 {
            None
        } else if dtype.is_equiv_to(&numpy::dtype::<i64>(py)) {
            Some(Scalar::Int)
        } else if dtype.is_equiv_to(&numpy::dtype::<f64>(py)) {
            Some(Scalar::Float)
        } else if dtype.is_equiv_to(&numpy::dtype::<bool>(py)) {
            Some(Scalar::Bool)
        } else {
            None
        };
        // `longdouble` and `clongdouble` (more than 8 bytes a number) hold padding, which a
        // NumPy scalar's copy would carry over where NumPy's conversion writes zeros.
        let numpy_scalar = array.ndim() == 0
            && match dtype.kind() {
                b'b' | b'i' | b'u' | b'f' => dtype.itemsize() <= 8,
                b'c' => dtype.itemsize() <= 16,
                _ => false,
            };
        Ok(Row {
            view: view.clone().unbind(),
            address: data(array) as usize,
            nbytes: array.len() * dtype.itemsize(),
            dtype: dtype.unbind(),
            shape: array.shape().to_vec(),
            scalar,
            numpy_scalar,
        })
    }

    /// The row as the NumPy view it was read from (shape and dtype of the leaf).
    pub fn view<'py>(&self, py: Python<'py>) -> &Bound<'py, PyAny> {
        self.view.bind(py)
    }

    /// Copies `value` into the row and returns `true` when it is a NumPy array (`ndarray`
    /// itself, not a subclass) of the row's dtype and shape in C order, or, for a row of shape
    /// `()`, a NumPy scalar of the row's dtype (NumPy's own scalar type, not a subclass) or the
    /// Python scalar it takes as it is (an `int` that fits `int64`, a `float`, a `bool`: see
    /// [`Scalar`]); otherwise writes nothing and returns `false`.
    pub fn copy_from(&self, value: &Bound<'_, PyAny>, ndarray: &Bound<'_, PyType>) -> bool {
        if !value.get_type().is(ndarray) {
            return (self.numpy_scalar && self.put_numpy_scalar(value))
                || self.scalar.is_some_and(|kind| self.put_scalar(kind, value));
        }
        // SAFETY: the exact type checked above is NumPy's array type.
        let array = unsafe { value.cast_unchecked::<PyUntypedArray>() };
        if array.shape() != self.shape.as_slice()
            || !array.is_c_contiguous()
            || !array.dtype().is_equiv_to(self.dtype.bind(value.py()))
        {
            return false;
        }
        // SAFETY: a C-contiguous array of this dtype and shape holds exactly `nbytes` bytes at
        // its data pointer; the row is `nbytes` writable bytes of the mapped segment, kept
        // mapped by `view`. `copy` allows the two to overlap (an env returning a view of its
        // own row).
        unsafe { std::ptr::copy(data(array) as *const u8, self.address as *mut u8, self.nbytes) };
        true
    }

    /// Copies `value` into the row (of shape `()`, a bool, integer, float or complex dtype) if
    /// it is a NumPy scalar whose type is the scalar type of a dtype equivalent to the row's:
    /// its bytes as they are, which is what `np.copyto(row, value)` writes for it.
    fn put_numpy_scalar(&self, value: &Bound<'_, PyAny>) -> bool {
        let py = value.py();
        // (checked by `Row::of` for the row's dtype, and equivalence makes it the scalar's too:
        // a dtype whose scalar holds its value inline with no padding)
        let Some(descr) = own_scalar_dtype(value) else { return false };
        if !descr.is_equiv_to(self.dtype.bind(py)) {
            return false;
        }
        // SAFETY: NumPy copies the scalar's `itemsize` bytes (those of the row's dtype, checked
        // equivalent) to the address with `memcpy` (no alignment needed); the row is those bytes
        // of the mapped segment, kept mapped by `view`.
        unsafe { PY_ARRAY_API.PyArray_ScalarAsCtype(py, value.as_ptr(), self.address as *mut std::ffi::c_void) };
        true
    }

    /// Stores `value` if it is exactly the Python type of `kind` (an `int` beyond `int64` is
    /// not: NumPy raises `OverflowError` for it on the writer's path).
    fn put_scalar(&self, kind: Scalar, value: &Bound<'_, PyAny>) -> bool {
        let address = self.address as *mut u8;
        // SAFETY (each write): the row is the 8 or 1 bytes of one int64, float64 or bool element
        // of the mapped segment (`Row::of` checked the dtype), kept mapped by `view`.
        match kind {
            Scalar::Int if value.is_exact_instance_of::<PyInt>() => match value.extract::<i64>() {
                Ok(v) => unsafe { std::ptr::write_unaligned(address.cast::<i64>(), v) },
                Err(_) => return false,
            },
            Scalar::Float if value.is_exact_instance_of::<PyFloat>() => match value.extract::<f64>() {
                Ok(v) => unsafe { std::ptr::write_unaligned(address.cast::<f64>(), v) },
                Err(_) => return false,
            },
            Scalar::Bool if value.is_exact_instance_of::<PyBool>() => unsafe {
                std::ptr::write(address, u8::from(value.is_truthy().unwrap_or(false)))
            },
            _ => return false,
        }
        true
    }
}

/// The dtype of `value` when it is a NumPy scalar of NumPy's own scalar type of that dtype (not
/// a subclass, which may hold other data), else `None`.
pub fn own_scalar_dtype<'py>(value: &Bound<'py, PyAny>) -> Option<Bound<'py, PyArrayDescr>> {
    let py = value.py();
    // SAFETY: NumPy's API table holds the type object of `numpy.generic`, which lives as long as
    // NumPy is loaded (callers only get here with NumPy imported: rows and columns are arrays).
    let generic = unsafe { get_type_object(py, NpyTypes::PyGenericArrType_Type) };
    // SAFETY: both are live type objects.
    if unsafe { pyo3::ffi::PyType_IsSubtype(pyo3::ffi::Py_TYPE(value.as_ptr()), generic) } == 0 {
        return None;
    }
    // SAFETY: `value` is a NumPy scalar (checked above), for which NumPy returns a new reference
    // to its dtype, or NULL with an exception set.
    let descr = unsafe { PY_ARRAY_API.PyArray_DescrFromScalar(py, value.as_ptr()) };
    if descr.is_null() {
        drop(PyErr::take(py));
        return None;
    }
    // SAFETY: a new, non-null reference to a dtype object.
    let descr = unsafe { Bound::from_owned_ptr(py, descr.cast::<pyo3::ffi::PyObject>()) };
    let descr = descr.cast_into::<PyArrayDescr>().ok()?;
    descr.typeobj().is(value.get_type()).then_some(descr)
}

/// The data pointer of `array`.
pub(crate) fn data(array: &Bound<'_, PyUntypedArray>) -> *mut std::ffi::c_char {
    // SAFETY: `as_array_ptr` is the live array object `array` holds; its fields are NumPy's.
    unsafe { (*numpy::npyffi::objects::_PyArray_GET_ITEM_DATA(array.as_array_ptr())).data }
}

/// The walk of a Dict or Tuple observation (`ringenv._obs_writer.plan`'s tree).
pub enum Walk {
    /// A Dict's keys (any hashable Gymnasium allows, not only `str`) and their subtrees.
    Dict(Vec<(Py<PyAny>, Walk)>),
    Tuple(Vec<Walk>),
    Leaf(usize),
}

impl Walk {
    /// Parses `plan`'s tree: `("dict", [(key, tree), ...])`, `("tuple", [tree, ...])` or
    /// `("leaf", index)`.
    pub fn parse(tree: &Bound<'_, PyAny>) -> PyResult<Self> {
        let (kind, body): (String, Bound<'_, PyAny>) = tree.extract()?;
        match kind.as_str() {
            "dict" => {
                let children: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = body.extract()?;
                Ok(Walk::Dict(
                    children.into_iter().map(|(k, t)| Ok((k.unbind(), Walk::parse(&t)?))).collect::<PyResult<_>>()?,
                ))
            }
            "tuple" => {
                let items: Vec<Bound<'_, PyAny>> = body.extract()?;
                Ok(Walk::Tuple(items.iter().map(Walk::parse).collect::<PyResult<_>>()?))
            }
            "leaf" => Ok(Walk::Leaf(body.extract()?)),
            other => Err(pyo3::exceptions::PyValueError::new_err(format!("unknown observation tree node {other:?}"))),
        }
    }
}

/// One env's leaves in one slot: each leaf's row (`None`: no flat layout) and writer, in the
/// walk's numbering; and the writer of the whole observation.
pub struct Leaves {
    pub whole: Py<PyAny>,
    pub leaves: Vec<(Option<Row>, Py<PyAny>)>,
}

/// One env's `(write, tree, leaves)` as `ringenv._worker._build` returns it.
type Target<'py> = (Py<PyAny>, Bound<'py, PyAny>, Vec<(Bound<'py, PyAny>, Py<PyAny>)>);

impl Leaves {
    /// One env's leaves from its `(write, tree, leaves)` (`ringenv._obs_writer.plan`'s leaves).
    ///
    /// # Errors
    /// What [`Row::of`] raises for a row; `TypeError` for a target of another form.
    pub fn of(target: &Bound<'_, PyAny>) -> PyResult<Self> {
        let (whole, _tree, leaves): Target<'_> = target.extract()?;
        let leaves = leaves
            .into_iter()
            .map(|(row, write)| Ok((if row.is_none() { None } else { Some(Row::of(&row)?) }, write)))
            .collect::<PyResult<_>>()?;
        Ok(Leaves { whole, leaves })
    }

    /// Writes `obs` along `walk`: each leaf by [`Row::copy_from`] or its writer.
    ///
    /// # Errors
    /// What a writer raises.
    pub fn write(&self, walk: &Walk, obs: &Bound<'_, PyAny>, ndarray: &Bound<'_, PyType>) -> PyResult<()> {
        let py = obs.py();
        let mut values = Vec::with_capacity(self.leaves.len());
        if !gather(walk, obs, &mut values)? {
            return self.whole.bind(py).call1((obs,)).map(drop);
        }
        for ((row, write), value) in self.leaves.iter().zip(&values) {
            if !row.as_ref().is_some_and(|r| r.copy_from(value, ndarray)) {
                write.bind(py).call1((value,))?;
            }
        }
        Ok(())
    }
}

/// Pushes the leaves of `value` onto `values` in the walk's order (its leaf numbering), reading
/// but writing nothing; `Ok(false)` at a node the walk does not take (see [`Leaves::write`]).
fn gather<'py>(walk: &Walk, value: &Bound<'py, PyAny>, values: &mut Vec<Bound<'py, PyAny>>) -> PyResult<bool> {
    let py = value.py();
    match walk {
        Walk::Dict(children) => {
            let Ok(dict) = value.cast_exact::<PyDict>() else { return Ok(false) };
            for (key, child) in children {
                let Some(item) = dict.get_item(key.bind(py))? else { return Ok(false) };
                if !gather(child, &item, values)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Walk::Tuple(items) => {
            let Ok(tuple) = value.cast_exact::<PyTuple>() else { return Ok(false) };
            if tuple.len() != items.len() {
                return Ok(false);
            }
            for (i, child) in items.iter().enumerate() {
                if !gather(child, &tuple.get_item(i)?, values)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Walk::Leaf(i) => {
            debug_assert_eq!(*i, values.len(), "plan numbers leaves in walk order");
            values.push(value.clone());
            Ok(true)
        }
    }
}
