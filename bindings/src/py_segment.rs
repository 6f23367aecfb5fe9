//! `ringenv._native.Segment`, the owner of a pool's shared mapping on the Python side, and
//! [`HostBytes`], the way host memory from Python reaches Rust.
//!
//! The buffer protocol is in the stable ABI (`abi3-py310`) only from 3.11, so memory crosses
//! through NumPy: `Pool.segment()` returns `numpy.asarray(segment)`, whose arrays keep the
//! mapping alive after the pool closes; [`HostBytes::get`] takes `numpy.frombuffer(obj, uint8)`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use ringenv_runtime::Memory;
use std::sync::Arc;

/// The owner of a pool's shared mapping: `len(segment)` bytes, exported through NumPy's array
/// interface as a writable `uint8` array (`numpy.asarray(segment)`, what `Pool.segment()` returns).
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
