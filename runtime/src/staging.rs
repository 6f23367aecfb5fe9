//! Pinned-memory staging of finished batches to a CUDA device (cargo feature `cuda`).
//!
//! [`CudaStaging::register`] page-locks the segment once (`cuMemHostRegister`), so each
//! [`CudaStaging::copy_to_device`] is an asynchronous DMA out of the slot on the caller's stream,
//! followed by the slot's event; [`CudaStaging::wait_slot`] waits for it before the slot is
//! reused. Where registering is refused, a page-locked mirror (`cuMemHostAlloc`) is filled with
//! `memcpy` instead. The driver is loaded at run time ([`StagingError::NoDriver`] without it), and
//! the device's *primary* context is used, so PyTorch's stream handles and pointers are valid.
//!
//! Concurrency: a `CudaStaging` is used by one thread at a time (`&mut self` for every call that
//! enqueues work); the driver objects it holds may move between threads.
//!
//! ```
//! use ringenv_runtime::{CudaStaging, StagingError};
//! match CudaStaging::new(0, 2) {
//!     Ok(staging) => assert_eq!(staging.slots(), 2),
//!     // A machine without the NVIDIA driver (as in CI): a typed error that says what to do.
//!     Err(StagingError::NoDriver) => assert!(!ringenv_runtime::cuda_driver_present()),
//!     Err(e) => println!("no CUDA device 0: {e}"),
//! }
//! ```

use cudarc::driver::sys;
use std::ffi::{c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

/// Why a staging operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StagingError {
    /// The NVIDIA driver library (`libcuda.so.1`) could not be loaded.
    #[error("libcuda.so.1 not found: install the NVIDIA driver or use device='cpu'")]
    NoDriver,
    /// The driver sees no device with this ordinal.
    #[error("no CUDA device {ordinal}: the driver sees {}", devices_seen(*.count))]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver sees (after `CUDA_VISIBLE_DEVICES`).
        count: usize,
    },
    /// A driver call returned an error.
    #[error("{call} failed: {name} ({code}): {description}")]
    Driver {
        /// The driver function, e.g. `"cuMemcpyHtoDAsync"`.
        call: &'static str,
        /// The `CUresult` code.
        code: u32,
        /// Its name, e.g. `"CUDA_ERROR_INVALID_VALUE"` (from `cuGetErrorName`).
        name: String,
        /// Its description (from `cuGetErrorString`).
        description: String,
    },
    /// A bad argument (slot out of range, host range outside the registered memory, ...),
    /// refused before any driver call.
    #[error("{0}")]
    InvalidArgument(String),
}

fn devices_seen(count: usize) -> String {
    match count {
        0 => "no CUDA device (check nvidia-smi and CUDA_VISIBLE_DEVICES)".into(),
        n => format!("{n} device(s), numbered 0 to {}", n - 1),
    }
}

/// Whether the NVIDIA driver library can be loaded (probed once per process).
pub fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to `dlopen` the driver library under its usual names.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

fn name_of(result: sys::CUresult) -> (String, String) {
    let text = |f: unsafe fn(sys::CUresult, *mut *const std::ffi::c_char) -> sys::CUresult| {
        let mut s: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: on success the driver points `s` at a static NUL-terminated string.
        if unsafe { f(result, &mut s) } == sys::CUresult::CUDA_SUCCESS && !s.is_null() {
            // SAFETY: as above.
            unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
        } else {
            "unknown CUDA error".to_owned()
        }
    };
    (text(sys::cuGetErrorName), text(sys::cuGetErrorString))
}

fn check(call: &'static str, result: sys::CUresult) -> Result<(), StagingError> {
    if result == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let (name, description) = name_of(result);
    Err(StagingError::Driver { call, code: result as u32, name, description })
}

/// Loads the driver and initialises it.
fn init() -> Result<(), StagingError> {
    if !driver_present() {
        return Err(StagingError::NoDriver);
    }
    // SAFETY: `cuInit(0)` may be called any number of times.
    check("cuInit", unsafe { sys::cuInit(0) })
}

/// The number of CUDA devices the driver sees (0 when `cuInit` reports `CUDA_ERROR_NO_DEVICE`).
///
/// # Errors
/// [`StagingError::NoDriver`] without the driver library; [`StagingError::Driver`] when `cuInit`
/// or `cuDeviceGetCount` fail otherwise.
pub fn device_count() -> Result<usize, StagingError> {
    match init() {
        Err(StagingError::Driver { code, .. }) if code == sys::CUresult::CUDA_ERROR_NO_DEVICE as u32 => return Ok(0),
        other => other?,
    }
    let mut count: c_int = 0;
    // SAFETY: `count` is a valid out-pointer; the driver is initialised.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut count) })?;
    Ok(count.max(0) as usize)
}

/// Makes a context current on this thread until dropped (`cuCtxPushCurrent` / `cuCtxPopCurrent`).
struct Current;

impl Current {
    fn push(ctx: sys::CUcontext) -> Result<Current, StagingError> {
        // SAFETY: `ctx` is a retained primary context, alive while the `CudaStaging` is.
        check("cuCtxPushCurrent", unsafe { sys::cuCtxPushCurrent_v2(ctx) })?;
        Ok(Current)
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: pops the context pushed in `push` on this thread.
        let _ = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
    }
}

/// How the registered host range was made page-locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinMode {
    /// The memory itself is page-locked (`cuMemHostRegister`, or it already was): copies read
    /// the slots directly.
    Registered,
    /// The driver refused to register it: copies go through a page-locked mirror
    /// (`cuMemHostAlloc`) after a `memcpy`. See [`CudaStaging::fallback_reason`].
    StagingBuffer,
}

/// Page-locked host memory owned by a staging.
enum Pinned {
    None,
    /// `[base, base + len)` is registered; `owned` when this staging registered it (and so
    /// unregisters it on drop), false when it already was.
    Registered {
        base: usize,
        len: usize,
        owned: bool,
    },
    /// `[base, base + len)` is mirrored at `mirror` (page-locked, `len` bytes, freed on drop).
    Mirrored {
        base: usize,
        len: usize,
        mirror: *mut u8,
    },
}

/// One host→device copy: `bytes` bytes from host address `host` to device address `device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostToDevice {
    /// Source address, inside the registered host range.
    pub host: usize,
    /// Destination device pointer (`CUdeviceptr`, e.g. `tensor.data_ptr()` of a CUDA tensor).
    pub device: u64,
    /// Length in bytes.
    pub bytes: usize,
}

/// Asynchronous host→device copies of a pool's slots on the caller's stream, one event per slot.
pub struct CudaStaging {
    ordinal: usize,
    device: sys::CUdevice,
    /// The device's primary context, retained in `new` and released on drop.
    ctx: sys::CUcontext,
    /// One event per slot, recorded after that slot's copies.
    events: Vec<sys::CUevent>,
    /// Whether each slot's event was ever recorded (an unrecorded event has nothing to wait for).
    recorded: Vec<bool>,
    pinned: Pinned,
    fallback: Option<StagingError>,
}

// SAFETY: the context, events and page-locked memory are process-wide driver objects usable from
// any thread (each call makes the context current on the calling thread first); the raw pointers
// are owned by this value alone.
unsafe impl Send for CudaStaging {}
// SAFETY: `&self` methods only query or wait on events, which the driver allows concurrently;
// everything that enqueues work or changes state takes `&mut self`.
unsafe impl Sync for CudaStaging {}

impl CudaStaging {
    /// Opens device `ordinal` for `slots` slots (the pool's depth): loads the driver, retains
    /// the device's primary context (the one PyTorch uses) and creates one event per slot.
    ///
    /// # Errors
    /// [`StagingError::InvalidArgument`] for `slots == 0`; [`StagingError::NoDriver`] without
    /// `libcuda.so.1`; [`StagingError::NoDevice`] naming the count when `ordinal` is out of
    /// range; [`StagingError::Driver`] when a driver call fails.
    pub fn new(ordinal: usize, slots: usize) -> Result<CudaStaging, StagingError> {
        if slots == 0 {
            return Err(StagingError::InvalidArgument("a staging needs at least one slot, got 0".into()));
        }
        let count = device_count()?;
        if ordinal >= count {
            return Err(StagingError::NoDevice { ordinal, count });
        }
        let mut device: sys::CUdevice = 0;
        // SAFETY: valid out-pointer, ordinal checked against the count.
        check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut device, ordinal as c_int) })?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-pointer and device; released in `Drop`.
        check("cuDevicePrimaryCtxRetain", unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, device) })?;
        // From here `Drop` releases what was acquired, whatever fails next.
        let mut staging = CudaStaging {
            ordinal,
            device,
            ctx,
            events: Vec::with_capacity(slots),
            recorded: vec![false; slots],
            pinned: Pinned::None,
            fallback: None,
        };
        let _current = Current::push(ctx)?;
        for _ in 0..slots {
            let mut event: sys::CUevent = std::ptr::null_mut();
            // Timing off: the cheapest event to record and query.
            let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint;
            // SAFETY: valid out-pointer, the context is current.
            check("cuEventCreate", unsafe { sys::cuEventCreate(&mut event, flags) })?;
            staging.events.push(event);
        }
        Ok(staging)
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The number of slots (events).
    pub fn slots(&self) -> usize {
        self.events.len()
    }

    /// How the registered range is page-locked; `None` before [`CudaStaging::register`].
    pub fn pin_mode(&self) -> Option<PinMode> {
        match self.pinned {
            Pinned::None => None,
            Pinned::Registered { .. } => Some(PinMode::Registered),
            Pinned::Mirrored { .. } => Some(PinMode::StagingBuffer),
        }
    }

    /// Why `cuMemHostRegister` was refused, when [`PinMode::StagingBuffer`] is in use.
    pub fn fallback_reason(&self) -> Option<&StagingError> {
        self.fallback.as_ref()
    }

    /// The registered host range `(address, bytes)`, if any.
    pub fn host_range(&self) -> Option<(usize, usize)> {
        match self.pinned {
            Pinned::None => None,
            Pinned::Registered { base, len, .. } | Pinned::Mirrored { base, len, .. } => Some((base, len)),
        }
    }

    /// Page-locks `[ptr, ptr + len)` (portable to every context) for later copies: registers it
    /// with `cuMemHostRegister`, or, if the driver refuses (some kernels refuse shared file
    /// mappings), allocates a page-locked mirror of `len` bytes with `cuMemHostAlloc`. Memory
    /// already registered by someone else is used as it is.
    ///
    /// # Safety
    /// `[ptr, ptr + len)` must stay mapped, readable and writable until this staging is dropped.
    ///
    /// # Errors
    /// [`StagingError::InvalidArgument`] for a null or empty range or a second registration;
    /// [`StagingError::Driver`] naming `cuMemHostAlloc` when neither way works (the error of
    /// `cuMemHostRegister` is kept in [`CudaStaging::fallback_reason`]).
    pub unsafe fn register(&mut self, ptr: *mut u8, len: usize) -> Result<PinMode, StagingError> {
        if ptr.is_null() || len == 0 {
            return Err(StagingError::InvalidArgument(format!("cannot register {len} bytes at {ptr:p}")));
        }
        if !matches!(self.pinned, Pinned::None) {
            return Err(StagingError::InvalidArgument("this staging already registered its host memory".into()));
        }
        let base = ptr as usize;
        let _current = Current::push(self.ctx)?;
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE;
        // SAFETY: the caller keeps the range mapped until drop, where it is unregistered.
        let result = unsafe { sys::cuMemHostRegister_v2(ptr.cast(), len, flags) };
        if result == sys::CUresult::CUDA_SUCCESS || result == sys::CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED {
            let owned = result == sys::CUresult::CUDA_SUCCESS;
            self.pinned = Pinned::Registered { base, len, owned };
            return Ok(PinMode::Registered);
        }
        self.fallback = check("cuMemHostRegister", result).err();
        let mut mirror: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; freed in `Drop`.
        check("cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(&mut mirror, len, sys::CU_MEMHOSTALLOC_PORTABLE) })?;
        self.pinned = Pinned::Mirrored { base, len, mirror: mirror.cast() };
        Ok(PinMode::StagingBuffer)
    }

    fn check_slot(&self, slot: usize) -> Result<(), StagingError> {
        if slot >= self.events.len() {
            return Err(StagingError::InvalidArgument(format!(
                "slot {slot} out of range: this staging has {} slots",
                self.events.len()
            )));
        }
        Ok(())
    }

    /// Enqueues `copies` on `stream` (a raw `CUstream`: `torch.cuda.current_stream().cuda_stream`;
    /// 0 is the legacy default stream), then records slot `slot`'s event on it. Returns without
    /// waiting for the GPU: the copies run after whatever the stream already holds, and work
    /// enqueued later on the stream sees their result.
    ///
    /// With [`PinMode::StagingBuffer`], the arrays are first copied into the mirror (after the
    /// slot's previous copy finished, so the mirror is never rewritten while it is read). This
    /// relies on different slots reading disjoint host ranges, as a pool's slots do.
    ///
    /// # Safety
    /// Every `device` range must be device memory of this device's primary context that nothing
    /// else reads or writes until the copy finished (on `stream`), and `stream` must be a live
    /// stream of that context (or 0).
    ///
    /// # Errors
    /// [`StagingError::InvalidArgument`], before anything is enqueued, for a slot out of range,
    /// no registered memory, or a host range not inside it; [`StagingError::Driver`] naming the
    /// call that failed.
    pub unsafe fn copy_to_device(
        &mut self,
        slot: usize,
        copies: &[HostToDevice],
        stream: u64,
    ) -> Result<(), StagingError> {
        self.check_slot(slot)?;
        let (base, len) = self
            .host_range()
            .ok_or_else(|| StagingError::InvalidArgument("register host memory before copying from it".into()))?;
        for (i, c) in copies.iter().enumerate() {
            let inside = c.host >= base && c.host.checked_add(c.bytes).is_some_and(|end| end <= base + len);
            if !inside {
                return Err(StagingError::InvalidArgument(format!(
                    "copy {i}: host range {:#x}..+{} is not inside the registered memory {base:#x}..+{len}",
                    c.host, c.bytes
                )));
            }
        }
        let stream = stream as usize as sys::CUstream;
        let _current = Current::push(self.ctx)?;
        let mirror = match self.pinned {
            Pinned::Mirrored { mirror, .. } => {
                // The mirror's bytes for this slot may still be read by its previous copy.
                self.synchronize(slot)?;
                for c in copies {
                    // SAFETY: both ranges were checked to lie inside `[base, base + len)`, which
                    // the mirror shadows byte for byte; they do not overlap (distinct allocations).
                    unsafe { std::ptr::copy_nonoverlapping(c.host as *const u8, mirror.add(c.host - base), c.bytes) };
                }
                Some(mirror)
            }
            _ => None,
        };
        let mut enqueued = Ok(());
        for c in copies.iter().filter(|c| c.bytes > 0) {
            let source = match mirror {
                // SAFETY: inside the mirror, as checked above.
                Some(m) => unsafe { m.add(c.host - base) as *const c_void },
                None => c.host as *const c_void,
            };
            // SAFETY: the source is page-locked and stays valid (registered range or mirror); the
            // caller vouches for the destination and the stream.
            enqueued =
                check("cuMemcpyHtoDAsync", unsafe { sys::cuMemcpyHtoDAsync_v2(c.device, source, c.bytes, stream) });
            if enqueued.is_err() {
                break;
            }
        }
        // Recorded even after a failed copy, so that `wait_slot` still covers those enqueued before it.
        // SYNC POINT: the event completes after the copies above; `wait_slot` / `is_done` observe it.
        // SAFETY: our event, a stream of the current context (caller's guarantee).
        let recorded = check("cuEventRecord", unsafe { sys::cuEventRecord(self.events[slot], stream) });
        if recorded.is_ok() {
            self.recorded[slot] = true;
        }
        enqueued.and(recorded)
    }

    fn synchronize(&self, slot: usize) -> Result<(), StagingError> {
        if self.recorded[slot] {
            // SAFETY: our event, recorded at least once.
            check("cuEventSynchronize", unsafe { sys::cuEventSynchronize(self.events[slot]) })?;
        }
        Ok(())
    }

    /// Blocks until the copies last enqueued for `slot` finished, so the workers may rewrite the
    /// slot. Returns at once when they already did, when the slot was never copied, or with
    /// [`PinMode::StagingBuffer`] (the slot was read by `memcpy` before `copy_to_device`
    /// returned).
    ///
    /// # Errors
    /// [`StagingError::InvalidArgument`] for a slot out of range; [`StagingError::Driver`] when
    /// the copy failed on the device.
    pub fn wait_slot(&self, slot: usize) -> Result<(), StagingError> {
        self.check_slot(slot)?;
        if matches!(self.pinned, Pinned::Mirrored { .. }) || !self.recorded[slot] {
            return Ok(());
        }
        let _current = Current::push(self.ctx)?;
        // SYNC POINT: pairs with the `cuEventRecord` in `copy_to_device`.
        self.synchronize(slot)
    }

    /// Whether the copies last enqueued for `slot` finished (`cuEventQuery`; true for a slot
    /// never copied). Does not block.
    ///
    /// # Errors
    /// As [`CudaStaging::wait_slot`].
    pub fn is_done(&self, slot: usize) -> Result<bool, StagingError> {
        self.check_slot(slot)?;
        if !self.recorded[slot] {
            return Ok(true);
        }
        let _current = Current::push(self.ctx)?;
        // SAFETY: our event, recorded at least once.
        let result = unsafe { sys::cuEventQuery(self.events[slot]) };
        if result == sys::CUresult::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        check("cuEventQuery", result)?;
        Ok(true)
    }

    /// Copies `bytes` bytes from device address `device` to host address `host` on `stream`
    /// (`cuMemcpyDtoHAsync`), then waits for that stream only (`cuStreamSynchronize`): the
    /// actions a policy computed on the GPU, on their way to the workers. The copy runs after
    /// the work already on `stream` (the policy that produced the actions).
    ///
    /// # Safety
    /// `[device, device + bytes)` must be device memory of this context, `[host, host + bytes)`
    /// writable host memory nobody else touches during the call, and `stream` a live stream of
    /// this context (or 0).
    ///
    /// # Errors
    /// [`StagingError::Driver`] naming the call that failed.
    pub unsafe fn copy_to_host(&self, device: u64, host: usize, bytes: usize, stream: u64) -> Result<(), StagingError> {
        if bytes == 0 {
            return Ok(());
        }
        let stream = stream as usize as sys::CUstream;
        let _current = Current::push(self.ctx)?;
        // SAFETY: the caller vouches for both ranges and the stream.
        check("cuMemcpyDtoHAsync", unsafe { sys::cuMemcpyDtoHAsync_v2(host as *mut c_void, device, bytes, stream) })?;
        // SAFETY: as above.
        check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(stream) })
    }
}

impl Drop for CudaStaging {
    fn drop(&mut self) {
        if let Ok(_current) = Current::push(self.ctx) {
            for (event, recorded) in self.events.iter().zip(&self.recorded) {
                // SAFETY: our events; a copy still reading host memory finishes before that
                // memory is unregistered or freed below. Errors (a driver shutting down) are moot.
                unsafe {
                    if *recorded {
                        let _ = sys::cuEventSynchronize(*event);
                    }
                    let _ = sys::cuEventDestroy_v2(*event);
                }
            }
            match self.pinned {
                // SAFETY: registered by `register`, no copy in flight.
                Pinned::Registered { base, owned: true, .. } => unsafe {
                    let _ = sys::cuMemHostUnregister(base as *mut c_void);
                },
                // SAFETY: allocated by `register`, no copy in flight.
                Pinned::Mirrored { mirror, .. } => unsafe {
                    let _ = sys::cuMemFreeHost(mirror.cast());
                },
                _ => {}
            }
        }
        // SAFETY: retained in `new`, released once.
        let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_what_to_do() {
        let e = StagingError::NoDriver.to_string();
        assert!(e.contains("libcuda.so.1 not found") && e.contains("device='cpu'"), "{e}");
        let e = StagingError::NoDevice { ordinal: 3, count: 2 }.to_string();
        assert!(e.contains("no CUDA device 3") && e.contains("2 device(s)"), "{e}");
        let e = StagingError::NoDevice { ordinal: 0, count: 0 }.to_string();
        assert!(e.contains("sees no CUDA device"), "{e}");
        let e = StagingError::Driver {
            call: "cuMemcpyHtoDAsync",
            code: 1,
            name: "CUDA_ERROR_INVALID_VALUE".into(),
            description: "invalid argument".into(),
        };
        assert_eq!(e.to_string(), "cuMemcpyHtoDAsync failed: CUDA_ERROR_INVALID_VALUE (1): invalid argument");
    }

    #[test]
    fn zero_slots_is_refused_before_the_driver_is_touched() {
        match CudaStaging::new(0, 0) {
            Err(StagingError::InvalidArgument(m)) => assert!(m.contains("at least one slot"), "{m}"),
            Err(e) => panic!("expected InvalidArgument, got {e}"),
            Ok(_) => panic!("expected InvalidArgument, got a staging"),
        }
    }

    #[test]
    fn without_a_driver_asking_for_a_device_is_a_typed_error() {
        if driver_present() {
            // A driver is installed: the answer is a staging or a device-count error, never NoDriver.
            match CudaStaging::new(0, 2) {
                Ok(s) => assert_eq!((s.ordinal(), s.slots(), s.pin_mode()), (0, 2, None)),
                Err(StagingError::NoDevice { ordinal: 0, count: 0 }) => {}
                Err(e) => panic!("driver present but CudaStaging::new(0, 2) failed: {e}"),
            }
            let count = device_count().expect("device count with a driver");
            match CudaStaging::new(count, 1) {
                Err(StagingError::NoDevice { ordinal, count: c }) => assert_eq!((ordinal, c), (count, count)),
                Err(e) => panic!("expected NoDevice, got {e}"),
                Ok(_) => panic!("expected NoDevice for ordinal {count}"),
            }
        } else {
            assert_eq!(device_count(), Err(StagingError::NoDriver));
            assert!(matches!(CudaStaging::new(0, 2), Err(StagingError::NoDriver)));
        }
    }
}
