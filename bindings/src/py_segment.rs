//! `ringenv._native.Segment`, the owner of a pool's shared mapping on the Python side, and
//! [`HostBytes`], the way host memory from Python reaches Rust.
//!
//! The module is built once for every CPython from 3.10 on, against the stable ABI of 3.10
//! (PyO3's `abi3-py310`). The buffer protocol (`Py_buffer`, `PyObject_GetBuffer`,
//! `bf_getbuffer`) is part of that ABI only from 3.11, so memory crosses through NumPy instead,
//! which is built against each interpreter's full API:
//! - out: a `Segment` exports the mapping through NumPy's array interface, and `Pool.segment()`
//!   returns `numpy.asarray(segment)`, a writable `uint8` array of shape `(len(segment),)` over
//!   the mapping (no copy) whose `.base` is the `Segment`. Every array made from it
//!   (`numpy.frombuffer(array, dtype, count, offset)`, slices, reshapes) keeps that array, hence
//!   the `Segment`, hence the mapping alive, even after the pool is closed: the mapping is
//!   unmapped when the last such array dies.
//! - in: [`HostBytes::get`] takes `numpy.frombuffer(obj, numpy.uint8)` of any object with a
//!   C-contiguous buffer (the segment's array, a NumPy array, an `mmap`), and holds that array,
//!   and with it the object's buffer export, for as long as Rust uses the memory.
//!
//! ```python
//! seg = pool.segment()                      # numpy.ndarray, dtype uint8, shape (segment_size,)
//! reward = np.frombuffer(seg, np.float64, num_envs, pool.offset(0, "reward"))
//! pool.close()                              # `reward` stays valid: it holds the mapping
//! ```

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use ringenv_runtime::Memory;
use std::sync::Arc;

/// The owner of a pool's shared mapping: `len(segment)` bytes, exported through NumPy's array
/// interface as a writable `uint8` array (`numpy.asarray(segment)`, what `Pool.segment()`
/// returns). The mapping lives while this object does.
#[pyclass(name = "Segment", module = "ringenv._native", frozen)]
pub struct PySegment {
    mem: Arc<dyn Memory>,
}

impl PySegment {
    /// The whole of `mem` as a writable `uint8` NumPy array of shape `(mem.len(),)` (no copy),
    /// whose `.base` is a new `Segment` holding `mem`.
    pub fn array(py: Python<'_>, mem: Arc<dyn Memory>) -> PyResult<Bound<'_, PyAny>> {
        let segment = Bound::new(py, PySegment { mem })?;
        let array = py.import("numpy")?.call_method1("asarray", (segment,))?;
        Ok(array)
    }
}

#[pymethods]
impl PySegment {
    fn __len__(&self) -> usize {
        self.mem.len()
    }

    /// NumPy's array interface (version 3): the mapping as a writable `uint8` array of shape
    /// `(len(self),)`. The array NumPy builds from it keeps this object as its `.base`.
    #[getter(__array_interface__)]
    fn array_interface<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let interface = PyDict::new(py);
        interface.set_item("version", 3)?;
        interface.set_item("shape", (self.mem.len(),))?;
        interface.set_item("typestr", "|u1")?;
        // `(address, read_only)`: the mapping is read-write in the process that owns the pool.
        interface.set_item("data", (self.mem.as_ptr() as usize, false))?;
        Ok(interface)
    }
}

/// The memory of a Python object with a C-contiguous buffer, borrowed for as long as this value
/// lives: it holds `numpy.frombuffer(obj, numpy.uint8)`, which holds the object and its buffer
/// export (an `mmap` cannot be closed or resized meanwhile).
pub struct HostBytes {
    _array: Py<PyAny>,
    /// The first byte's address.
    pub ptr: usize,
    /// Length in bytes.
    pub len: usize,
    /// Whether the buffer may be written.
    pub writable: bool,
}

impl HostBytes {
    /// Borrows `obj`'s bytes. Raises `ValueError` naming `what` when `obj` exports no
    /// C-contiguous buffer (a strided NumPy view, an object without the buffer protocol).
    pub fn get(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<HostBytes> {
        let py = obj.py();
        let numpy = py.import("numpy")?;
        let array = numpy.call_method1("frombuffer", (obj, numpy.getattr("uint8")?)).map_err(|e| {
            PyValueError::new_err(format!("{what} must be a writable, C-contiguous buffer: {}", e.value(py)))
        })?;
        let (ptr, read_only): (usize, bool) = array.getattr("__array_interface__")?.get_item("data")?.extract()?;
        let len = array.len()?;
        Ok(HostBytes { _array: array.unbind(), ptr, len, writable: !read_only })
    }
}
