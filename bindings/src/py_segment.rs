//! `ringenv._native.Segment`: a pool's shared mapping exposed through the buffer protocol, so
//! NumPy arrays made with `numpy.frombuffer(segment, ...)` keep the mapping alive for as long
//! as they exist, even after the pool is closed.

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use ringenv_runtime::Memory;
use std::os::raw::c_int;
use std::sync::Arc;

/// A writable bytes-like view of a whole segment (`len(memoryview(segment))` bytes).
#[pyclass(name = "Segment", module = "ringenv._native", frozen)]
pub struct PySegment {
    mem: Arc<dyn Memory>,
}

impl PySegment {
    pub fn new(mem: Arc<dyn Memory>) -> PySegment {
        PySegment { mem }
    }
}

#[pymethods]
impl PySegment {
    fn __len__(&self) -> usize {
        self.mem.len()
    }

    /// # Safety
    /// Called by CPython with a valid `view` to fill.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let (ptr, len) = (slf.get().mem.as_ptr(), slf.get().mem.len());
        // SAFETY: `view` is CPython's buffer to fill; the memory stays mapped while `slf`
        // (referenced by the view's `obj`) lives.
        let rc = unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), ptr.cast(), len as ffi::Py_ssize_t, 0, flags) };
        if rc != 0 {
            return Err(PyErr::take(slf.py()).unwrap_or_else(|| PyBufferError::new_err("cannot export the segment")));
        }
        Ok(())
    }
}
