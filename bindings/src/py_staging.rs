//! `ringenv._native.CudaStaging`: the runtime's pinned-memory GPU staging for Python
//! (`ringenv._staging.GpuStaging` drives it with PyTorch's tensors and streams).

use crate::errors::to_pyerr;
use crate::py_segment::HostBytes;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use ringenv_runtime::{CudaStaging, HostToDevice, PinMode, StagingError};

/// Host→device copies of a pool's slots on the caller's CUDA stream, one event per slot.
#[pyclass(name = "CudaStaging", module = "ringenv._native")]
pub struct PyCudaStaging {
    // Field order is drop order: the staging unregisters the memory before the buffer that keeps
    // the segment mapped is released.
    staging: CudaStaging,
    _segment: HostBytes,
}

#[pymethods]
impl PyCudaStaging {
    /// Opens CUDA device `ordinal` with `slots` events and page-locks the whole of `segment` (a
    /// writable, contiguous buffer: the pool's segment array).
    #[new]
    #[pyo3(signature = (ordinal, segment, slots=2))]
    fn new(py: Python<'_>, ordinal: usize, segment: &Bound<'_, PyAny>, slots: usize) -> PyResult<PyCudaStaging> {
        let buffer = HostBytes::get(segment, "segment")?;
        if !buffer.writable || buffer.len == 0 {
            return Err(PyValueError::new_err(
                "segment must be a non-empty, writable, contiguous buffer (the pool's segment array)",
            ));
        }
        let (ptr, len) = (buffer.ptr, buffer.len);
        let staging = py
            .detach(|| -> Result<CudaStaging, StagingError> {
                let mut staging = CudaStaging::new(ordinal, slots)?;
                // SAFETY: `[ptr, ptr + len)` is the buffer held in `_segment`, released only
                // after `staging` is dropped (field order).
                unsafe { staging.register(ptr as *mut u8, len) }?;
                Ok(staging)
            })
            .map_err(|e| to_pyerr(py, e))?;
        Ok(PyCudaStaging { staging, _segment: buffer })
    }

    /// The device ordinal.
    #[getter]
    fn ordinal(&self) -> usize {
        self.staging.ordinal()
    }

    /// The number of slots.
    #[getter]
    fn slots(&self) -> usize {
        self.staging.slots()
    }

    /// `"registered"` (copies read the segment itself) or `"staging_buffer"` (through a pinned
    /// mirror, after a memcpy).
    #[getter]
    fn pin_mode(&self) -> &'static str {
        match self.staging.pin_mode() {
            Some(PinMode::Registered) => "registered",
            _ => "staging_buffer",
        }
    }

    /// Why the driver refused to register the segment, when `pin_mode` is `"staging_buffer"`.
    #[getter]
    fn fallback_reason(&self) -> Option<String> {
        self.staging.fallback_reason().map(|e| e.to_string())
    }

    /// `(address, bytes)` of the page-locked host range (the segment).
    #[getter]
    fn host_range(&self) -> (usize, usize) {
        self.staging.host_range().unwrap_or((0, 0))
    }

    /// Enqueues `copies`, each `(host_address, device_pointer, bytes)`, on the raw CUDA stream
    /// `stream`, then records slot `slot`'s event there. Does not wait for the GPU.
    fn copy_to_device(
        &mut self,
        py: Python<'_>,
        slot: usize,
        copies: Vec<(usize, u64, usize)>,
        stream: u64,
    ) -> PyResult<()> {
        let copies: Vec<HostToDevice> =
            copies.into_iter().map(|(host, device, bytes)| HostToDevice { host, device, bytes }).collect();
        let staging = &mut self.staging;
        // SAFETY: host ranges are checked against the segment by the runtime; the device
        // pointers and stream come from `ringenv._staging.GpuStaging`, which passes only its own
        // output tensors (allocated on this device) and this device's current torch stream.
        py.detach(|| unsafe { staging.copy_to_device(slot, &copies, stream) }).map_err(|e| to_pyerr(py, e))
    }

    /// Blocks (without the GIL) until slot `slot`'s last copy finished.
    fn wait_slot(&self, py: Python<'_>, slot: usize) -> PyResult<()> {
        let staging = &self.staging;
        py.detach(|| staging.wait_slot(slot)).map_err(|e| to_pyerr(py, e))
    }

    /// Whether slot `slot`'s last copy finished (True for a slot never copied). Does not block.
    fn is_done(&self, py: Python<'_>, slot: usize) -> PyResult<bool> {
        self.staging.is_done(slot).map_err(|e| to_pyerr(py, e))
    }

    /// Copies `len(dest)` bytes from device pointer `device_ptr` into `dest` (a writable,
    /// contiguous buffer) on stream `stream`, and waits for that stream (without the GIL).
    fn copy_to_host(&self, py: Python<'_>, device_ptr: u64, dest: &Bound<'_, PyAny>, stream: u64) -> PyResult<()> {
        let buffer = HostBytes::get(dest, "dest")?;
        if !buffer.writable {
            return Err(PyValueError::new_err("dest must be a writable, C-contiguous buffer"));
        }
        let (host, bytes) = (buffer.ptr, buffer.len);
        let staging = &self.staging;
        // SAFETY: `[host, host + bytes)` is `dest`'s memory, kept alive by `buffer` for the call;
        // the device pointer (a CUDA tensor's `data_ptr()`, at least `bytes` long) and the stream
        // come from `ringenv._staging.GpuStaging`, which checks the tensor's device and size.
        py.detach(|| unsafe { staging.copy_to_host(device_ptr, host, bytes, stream) }).map_err(|e| to_pyerr(py, e))
    }
}

/// The number of CUDA devices the driver sees. Raises `ringenv.errors.CudaUnavailableError`
/// when the driver library cannot be loaded.
#[pyfunction]
pub fn cuda_device_count(py: Python<'_>) -> PyResult<usize> {
    py.detach(ringenv_runtime::cuda_device_count).map_err(|e| to_pyerr(py, e))
}
