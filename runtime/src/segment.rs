//! A pool's shared memory segment: an anonymous memfd, sealed against resizing, mapped
//! `MAP_SHARED` by the main process and by every worker, which inherits its file descriptor.
//!
//! No name in `/dev/shm`: when every process holding the descriptor or the mapping is gone, the
//! kernel frees it, so a killed process leaks nothing. `F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL`
//! mean a worker can never be handed a segment that shrinks under it (a `SIGBUS`).
//!
//! ```
//! use ringenv_runtime::{ArraySpec, DType, Layout, Segment};
//! let layout = Layout::single(4, 2, 2, ArraySpec::new(DType::F32, &[4]),
//!                             ArraySpec::new(DType::I64, &[]), DType::F32).unwrap();
//! let segment = Segment::create(layout.clone()).unwrap();
//! // A worker attaches through a duplicate of the descriptor and validates the header.
//! let fd = segment.fd().try_clone_to_owned().unwrap();
//! let attached = Segment::attach(fd).unwrap();
//! assert_eq!(attached.layout(), &layout);
//! ```

use crate::info_arena::InfoArena;
use crate::layout::Layout;
use crate::memory::Memory;
use crate::metrics::{PoolMetrics, WorkerMetrics};
use crate::metrics::{PoolSnapshot, WorkerSnapshot};
use crate::ring::Ring;
use crate::slot::{SlotRef, SlotView};
use crate::wakeup::Wakeup;
use crate::{header, Command, Completion, HeaderError, SpinSettings, COMMAND_RING_CAPACITY};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

/// Why a segment could not be created or attached.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    /// A system call failed: names it.
    #[error("{0} failed: {1}")]
    Os(&'static str, #[source] std::io::Error),
    /// The header does not match this build.
    #[error("{0}")]
    Header(#[source] HeaderError),
}

fn os(call: &'static str) -> impl FnOnce(rustix::io::Errno) -> SegmentError {
    move |e| SegmentError::Os(call, e.into())
}

struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared bytes; concurrent access goes through atomics in it.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Memory for Mapping {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped in `map` with this length; no handle outlives the Arc holding it.
        let _ = unsafe { rustix::mm::munmap(self.ptr.cast(), self.len) };
    }
}

fn map(fd: BorrowedFd<'_>, len: usize, prot: ProtFlags) -> Result<Arc<Mapping>, SegmentError> {
    // SAFETY: a fresh shared mapping of `len` bytes of the memfd; nothing else is at that address.
    let ptr =
        unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, prot, MapFlags::SHARED, fd, 0) }.map_err(os("mmap"))?;
    Ok(Arc::new(Mapping { ptr: ptr.cast(), len }))
}

/// A mapped segment with its layout.
pub struct Segment {
    mem: Arc<Mapping>,
    fd: OwnedFd,
    layout: Layout,
    /// The pool's wait settings, as the header records them.
    spin_settings: SpinSettings,
}

impl Segment {
    /// Creates, sizes, seals and maps a new segment for `layout`, writes its header (with the
    /// default wait settings) and initialises its rings. The descriptor is close-on-exec; the
    /// supervisor hands it to each worker explicitly.
    ///
    /// # Errors
    /// [`SegmentError::Os`] naming the failed call (`memfd_create`, `ftruncate`, `fcntl`, `mmap`).
    pub fn create(layout: Layout) -> Result<Segment, SegmentError> {
        Self::create_with(layout, SpinSettings::default())
    }

    /// [`Segment::create`], recording the pool's wait settings in the header for its workers.
    ///
    /// # Errors
    /// As [`Segment::create`].
    pub fn create_with(layout: Layout, spin_settings: SpinSettings) -> Result<Segment, SegmentError> {
        let fd = rustix::fs::memfd_create("ringenv", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .map_err(os("memfd_create"))?;
        let fd = crate::supervisor::above_stdio(fd).map_err(|e| SegmentError::Os("fcntl(F_DUPFD_CLOEXEC)", e))?;
        rustix::fs::ftruncate(&fd, layout.total_size() as u64).map_err(os("ftruncate"))?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL)
            .map_err(os("fcntl(F_ADD_SEALS)"))?;
        let mem = map(fd.as_fd(), layout.total_size(), ProtFlags::READ | ProtFlags::WRITE)?;
        // SAFETY: the header region is the first page of the fresh mapping, unused by anything.
        let head = unsafe { std::slice::from_raw_parts_mut(mem.ptr, crate::layout::HEADER_REGION) };
        header::write_with(head, &layout, &spin_settings);
        let segment = Segment { mem, fd, layout, spin_settings };
        for w in 0..segment.layout.num_workers {
            // SAFETY: fresh zeroed regions of the layout, and no worker exists yet.
            unsafe { segment.init_worker_rings(w) };
        }
        Ok(segment)
    }

    /// Maps the segment behind `fd` (inherited from the main process) and validates its header.
    ///
    /// # Errors
    /// [`SegmentError::Header`] when the header does not match this build (the error names the
    /// field and both values); [`SegmentError::Os`] when `fstat` or `mmap` fails.
    pub fn attach(fd: OwnedFd) -> Result<Segment, SegmentError> {
        Self::attach_with(fd, ProtFlags::READ | ProtFlags::WRITE)
    }

    /// Maps the segment behind `path` (for example `/proc/<pid>/fd/<fd>` of a pool's main
    /// process) read-only, for monitoring: the [`ReadOnlySegment`] it returns has no method that
    /// writes.
    ///
    /// # Errors
    /// As [`Segment::attach`], with [`SegmentError::Os`] naming `open` when the path cannot be
    /// opened (no such pool, or another user's).
    pub fn open_read_only(path: &std::path::Path) -> Result<ReadOnlySegment, SegmentError> {
        let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, rustix::fs::Mode::empty()).map_err(os("open"))?;
        ReadOnlySegment::from_fd(fd)
    }

    fn attach_with(fd: OwnedFd, prot: ProtFlags) -> Result<Segment, SegmentError> {
        let size = rustix::fs::fstat(&fd).map_err(os("fstat"))?.st_size as usize;
        if size < crate::layout::HEADER_REGION {
            return Err(SegmentError::Header(HeaderError::TooSmall {
                mapped: size,
                needed: crate::layout::HEADER_REGION,
            }));
        }
        let mem = map(fd.as_fd(), size, prot)?;
        // SAFETY: the mapping is at least one header region long (checked above).
        let head = unsafe { std::slice::from_raw_parts(mem.ptr, crate::layout::HEADER_REGION) };
        let layout = header::read(head, size).map_err(SegmentError::Header)?;
        let spin_settings = header::read_settings(head).map_err(SegmentError::Header)?;
        Ok(Segment { mem, fd, layout, spin_settings })
    }

    /// The segment's file descriptor (close-on-exec).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
    /// The layout this segment was built with.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// The pool's wait settings (the spin bound and how spinners probe), as the main process
    /// recorded them in the header.
    pub fn spin_settings(&self) -> SpinSettings {
        self.spin_settings
    }
    /// The mapping, for handles that must keep it alive.
    pub fn memory(&self) -> Arc<dyn Memory> {
        self.mem.clone()
    }
    fn wakeup_at(&self, offset: usize) -> &Wakeup {
        self.at(offset)
    }
    /// The main process's wake-up word (waited on for completions).
    pub fn completion_wakeup(&self) -> &Wakeup {
        self.wakeup_at(self.layout.completion_wakeup_offset())
    }
    /// Worker `worker`'s wake-up word (waited on for commands); `None` when `worker >=
    /// num_workers`.
    pub fn command_wakeup(&self, worker: usize) -> Option<&Wakeup> {
        (worker < self.layout.num_workers).then(|| self.wakeup_at(self.layout.command_offset(worker)))
    }
    /// The `T` the layout places at `offset`.
    ///
    /// # Panics
    /// When a `T` at `offset` would not lie inside the mapping or be aligned (a bug in the layout
    /// arithmetic, never a value read from the segment): checked in every build.
    fn at<T>(&self, offset: usize) -> &T {
        let fits = offset.checked_add(std::mem::size_of::<T>()).is_some_and(|end| end <= self.mem.len);
        assert!(
            fits && (self.mem.ptr as usize + offset).is_multiple_of(std::mem::align_of::<T>()),
            "{} at offset {offset} does not fit the {}-byte mapping",
            std::any::type_name::<T>(),
            self.mem.len
        );
        // SAFETY: in bounds and aligned (checked above); the layout places a `T` (all atomics,
        // valid for any bit pattern) there, inside the mapping, which lives as long as `self`.
        unsafe { &*(self.mem.ptr.add(offset) as *const T) }
    }
    /// The main process's metrics.
    pub fn pool_metrics(&self) -> &PoolMetrics {
        self.at(self.layout.pool_metrics_offset())
    }
    /// Worker `worker`'s metrics.
    ///
    /// # Panics
    /// When `worker >= num_workers`.
    pub fn worker_metrics(&self, worker: usize) -> &WorkerMetrics {
        assert!(worker < self.layout.num_workers, "worker {worker} out of range");
        self.at(self.layout.worker_metrics_offset(worker))
    }
    /// Worker `worker`'s completion ring (worker -> main).
    ///
    /// # Panics
    /// When `worker >= num_workers`.
    pub fn completion_ring(&self, worker: usize) -> Ring<Completion> {
        assert!(worker < self.layout.num_workers, "worker {worker} out of range");
        // SAFETY: initialised by `create` at the layout's offset with this capacity. `view` reads
        // nothing from the ring, so the `expect` depends on the validated layout alone.
        unsafe { Ring::view(self.memory(), self.layout.completion_ring_offset(worker), COMMAND_RING_CAPACITY) }
            .expect("completion ring fits the validated layout")
    }
    /// Worker `worker`'s command ring (main -> worker).
    ///
    /// # Panics
    /// When `worker >= num_workers`.
    pub fn command_ring(&self, worker: usize) -> Ring<Command> {
        assert!(worker < self.layout.num_workers, "worker {worker} out of range");
        // SAFETY: initialised by `create` at the layout's offset with this capacity. `view` reads
        // nothing from the ring, so the `expect` depends on the validated layout alone.
        unsafe { Ring::view(self.memory(), self.layout.command_ring_offset(worker), COMMAND_RING_CAPACITY) }
            .expect("command ring fits the validated layout")
    }

    /// Zeroes worker `worker`'s region (wake-up word and both rings) and initialises its rings
    /// afresh, as for a new worker. The pool does this before restarting a dead worker, whose rings
    /// may hold an unconsumed command or a half-pushed completion.
    ///
    /// # Safety
    /// No process may use the worker's rings or wake-up word during the call: the worker is dead
    /// (reaped) or not yet started, and the caller is the rings' only other user.
    pub unsafe fn init_worker_rings(&self, worker: usize) {
        assert!(worker < self.layout.num_workers, "worker {worker} out of range");
        let at = self.layout.command_offset(worker);
        // SAFETY: the region lies inside the mapping (layout arithmetic validated against its
        // length) and nobody else uses it (the caller's contract).
        unsafe { std::ptr::write_bytes(self.mem.ptr.add(at), 0, self.layout.command_stride()) };
        let memory: Arc<dyn Memory> = self.mem.clone();
        // SAFETY: zeroed just above, 128-byte aligned by the layout, unused (the caller's contract).
        unsafe {
            Ring::<Command>::init(memory.clone(), self.layout.command_ring_offset(worker), COMMAND_RING_CAPACITY);
            Ring::<Completion>::init(memory, self.layout.completion_ring_offset(worker), COMMAND_RING_CAPACITY);
        }
    }
    /// Worker `worker`'s info arena ([`crate::InfoArena`]). Only the worker writes it, while it
    /// runs a command; only the main process reads it, after that command's completion.
    ///
    /// # Panics
    /// When `worker >= num_workers`.
    pub fn info_arena(&mut self, worker: usize) -> InfoArena<'_> {
        assert!(worker < self.layout.num_workers, "worker {worker} out of range");
        let (at, len) = (self.layout.info_arena_offset(worker), self.layout.info_arena_bytes());
        debug_assert!(at + len <= self.mem.len);
        // SAFETY: the arena lies inside the mapping (layout arithmetic validated against its
        // length), which lives as long as the view borrows `self`; the protocol in info_arena.rs
        // keeps the worker and the main process from touching it at the same time.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.mem.ptr.add(at), len) };
        InfoArena::new(bytes, worker)
    }
    /// A read-only view of data slot `slot`.
    ///
    /// # Panics
    /// When `slot >= depth`.
    pub fn slot(&self, slot: usize) -> SlotRef<'_> {
        assert!(slot < self.layout.depth, "slot {slot} out of range (depth {})", self.layout.depth);
        // SAFETY: the slot lies inside the mapping (the layout's total size was checked against
        // the mapping length), which lives as long as the view borrows `self`; writable views
        // need `&mut self`, so none exists while this one does.
        unsafe { SlotRef::new(self.mem.ptr.add(self.layout.slot_offset(slot)), &self.layout) }
    }

    /// A writable view of data slot `slot`. It borrows the segment exclusively, so two views can
    /// never hand out aliasing `&mut [u8]` (`slot.rs` has a `compile_fail` example).
    ///
    /// # Panics
    /// When `slot >= depth`.
    pub fn slot_mut(&mut self, slot: usize) -> SlotView<'_> {
        assert!(slot < self.layout.depth, "slot {slot} out of range (depth {})", self.layout.depth);
        // SAFETY: as in `slot`, and `&mut self` excludes every other view for the view's life.
        unsafe { SlotView::new(self.mem.ptr.add(self.layout.slot_offset(slot)), &self.layout) }
    }
}

/// A segment mapped read-only (`PROT_READ`), for monitoring another process's pool
/// ([`Segment::open_read_only`]): every accessor loads and copies, none writes (a write would be
/// a `SIGSEGV`), and worker-indexed ones return `None` out of range.
///
/// ```
/// use ringenv_runtime::{ArraySpec, DType, Layout, Segment};
/// let layout = Layout::single(4, 2, 2, ArraySpec::new(DType::F32, &[4]),
///                             ArraySpec::new(DType::I64, &[]), DType::F32).unwrap();
/// let segment = Segment::create(layout.clone()).unwrap();
/// segment.pool_metrics().init(42);
/// let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&segment.fd()));
/// let view = Segment::open_read_only(path.as_ref()).unwrap();
/// assert_eq!(view.layout(), &layout);
/// assert_eq!(view.pool_metrics().main_pid, 42);
/// assert!(view.worker_metrics(1).is_some() && view.worker_metrics(2).is_none());
/// assert_eq!(view.command_sleeps(0), Some(0));
/// ```
///
/// It has no writing method, so a write cannot even be written:
/// ```compile_fail,E0599
/// # use ringenv_runtime::{ArraySpec, DType, Layout, Segment};
/// # let layout = Layout::single(4, 2, 2, ArraySpec::new(DType::F32, &[4]),
/// #                             ArraySpec::new(DType::I64, &[]), DType::F32).unwrap();
/// # let segment = Segment::create(layout).unwrap();
/// # let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&segment.fd()));
/// let mut view = Segment::open_read_only(path.as_ref()).unwrap();
/// view.slot_mut(0); // no such method on a read-only segment
/// ```
pub struct ReadOnlySegment {
    /// Mapped `PROT_READ`: only its loading accessors are called.
    segment: Segment,
}

impl ReadOnlySegment {
    fn from_fd(fd: OwnedFd) -> Result<ReadOnlySegment, SegmentError> {
        Segment::attach_with(fd, ProtFlags::READ).map(|segment| ReadOnlySegment { segment })
    }
    /// The layout recorded in the header.
    pub fn layout(&self) -> &Layout {
        self.segment.layout()
    }
    /// The pool's wait settings recorded in the header.
    pub fn spin_settings(&self) -> SpinSettings {
        self.segment.spin_settings()
    }
    /// The main process's counters now.
    pub fn pool_metrics(&self) -> PoolSnapshot {
        self.segment.pool_metrics().snapshot()
    }
    /// Worker `worker`'s counters now; `None` when `worker >= num_workers`.
    pub fn worker_metrics(&self, worker: usize) -> Option<WorkerSnapshot> {
        (worker < self.layout().num_workers).then(|| self.segment.worker_metrics(worker).snapshot())
    }
    /// How many times the main process slept waiting for completions (wraps at 2^32).
    pub fn completion_sleeps(&self) -> u32 {
        self.segment.completion_wakeup().sleeps()
    }
    /// How many times worker `worker` slept waiting for commands; `None` out of range.
    pub fn command_sleeps(&self, worker: usize) -> Option<u32> {
        self.segment.command_wakeup(worker).map(Wakeup::sleeps)
    }
    /// How many of the main process's waits for completions had a spin phase (wraps at 2^32).
    pub fn completion_spins(&self) -> u32 {
        self.segment.completion_wakeup().spins()
    }
    /// How many of worker `worker`'s waits for commands had a spin phase; `None` out of range.
    pub fn command_spins(&self, worker: usize) -> Option<u32> {
        self.segment.command_wakeup(worker).map(Wakeup::spins)
    }
    /// A read-only view of data slot `slot`; `None` when `slot >= depth`.
    pub fn slot(&self, slot: usize) -> Option<SlotRef<'_>> {
        (slot < self.layout().depth).then(|| self.segment.slot(slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ArraySpec, DType};

    #[test]
    fn segment_is_sealed_against_resize() {
        let layout =
            Layout::single(2, 1, 2, ArraySpec::new(DType::F32, &[2]), ArraySpec::new(DType::I64, &[]), DType::F32)
                .unwrap();
        let s = Segment::create(layout.clone()).unwrap();
        assert!(rustix::fs::ftruncate(s.fd(), 0).is_err());
        assert!(rustix::fs::ftruncate(s.fd(), (layout.total_size() * 2) as u64).is_err());
    }

    #[test]
    fn an_attached_segment_reads_the_wait_settings_of_its_creator() {
        use crate::{Probe, SpinPolicy};
        let layout =
            Layout::single(2, 1, 2, ArraySpec::new(DType::F32, &[2]), ArraySpec::new(DType::I64, &[]), DType::F32)
                .unwrap();
        let settings = SpinSettings { policy: SpinPolicy::NEVER, probe: Probe::Yield };
        let s = Segment::create_with(layout, settings).unwrap();
        let attached = Segment::attach(s.fd().try_clone_to_owned().unwrap()).unwrap();
        assert_eq!(attached.spin_settings(), settings);
        assert_ne!(settings, SpinSettings::default());
    }

    #[test]
    fn command_wakeup_is_bounds_checked_in_every_build() {
        let layout =
            Layout::single(4, 2, 2, ArraySpec::new(DType::F32, &[2]), ArraySpec::new(DType::I64, &[]), DType::F32)
                .unwrap();
        let s = Segment::create(layout).unwrap();
        assert!(s.command_wakeup(1).is_some());
        assert!(s.command_wakeup(2).is_none());
        assert!(s.command_wakeup(usize::MAX).is_none());
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn a_region_outside_the_mapping_panics_instead_of_reading_past_it() {
        let layout =
            Layout::single(4, 2, 2, ArraySpec::new(DType::F32, &[2]), ArraySpec::new(DType::I64, &[]), DType::F32)
                .unwrap();
        let s = Segment::create(layout).unwrap();
        let _: &Wakeup = s.at(s.mem.len - 8);
    }

    #[test]
    fn a_read_only_segment_reads_what_the_pool_writes() {
        let layout =
            Layout::single(4, 2, 2, ArraySpec::new(DType::F32, &[2]), ArraySpec::new(DType::I64, &[]), DType::F32)
                .unwrap();
        let mut s = Segment::create(layout).unwrap();
        s.worker_metrics(1).add_restart();
        s.slot_mut(1).set_seed(3, Some(99));
        let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&s.fd()));
        let ro = Segment::open_read_only(path.as_ref()).unwrap();
        assert_eq!(ro.worker_metrics(1).unwrap().restarts, 1);
        assert_eq!(ro.worker_metrics(2), None);
        assert_eq!(ro.slot(1).unwrap().seed(3), Some(99));
        assert!(ro.slot(2).is_none());
        assert_eq!(ro.command_sleeps(2), None);
    }

    #[test]
    fn attach_refuses_a_foreign_file() {
        let fd = rustix::fs::memfd_create("other", MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 8192).unwrap();
        match Segment::attach(fd) {
            Err(SegmentError::Header(HeaderError::Magic { .. })) => {}
            other => panic!("expected a magic error, got {:?}", other.err()),
        }
    }
}
