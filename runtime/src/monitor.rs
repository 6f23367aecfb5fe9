//! Reading a running pool's metrics from another process, without touching the run and without
//! any help from the pool: nothing runs in a pool for its monitors.
//!
//! A pool's segment is a memfd named `ringenv`: [`list_pools`] finds this user's segments by the
//! link text of `/proc/<pid>/fd` entries (`/memfd:ringenv (deleted)`), each once (by device and
//! inode), under the main process its header records.
//!
//! Nothing found there is trusted. [`Monitor::open`] opens the descriptor with `O_PATH` and
//! reopens it read-only only if it is a regular tmpfs file owned by this user, sealed against
//! resizing (so a mapping never `SIGBUS`es) and at most [`MAX_SEGMENT_BYTES`] long; then it maps
//! it read-only and validates the header. Only atomics are loaded, the worker count is at most
//! [`MAX_WORKERS`], error texts are cut to [`crate::metrics::LAST_ERROR_BYTES`] and every loop is
//! bounded: a hostile segment yields an error or odd numbers, never a hang or a panic.
//!
//! ```
//! use ringenv_runtime::{list_pools, ArraySpec, DType, Layout, Monitor, Segment};
//! use std::os::fd::AsRawFd;
//! let layout = Layout::single(2, 1, 2, ArraySpec::new(DType::F32, &[3]),
//!                             ArraySpec::new(DType::I64, &[]), DType::F32).unwrap();
//! let segment = Segment::create(layout).unwrap();
//! segment.pool_metrics().init(std::process::id()); // as a pool's main process does
//! let me = std::process::id();
//! let entry = list_pools().into_iter().find(|e| e.pid == me && e.fd == segment.fd().as_raw_fd()).unwrap();
//! let view = Monitor::open(&entry).unwrap().snapshot();
//! assert_eq!((view.num_envs, view.pool.main_pid), (2, me));
//! ```

use crate::metrics::{PoolSnapshot, WorkerSnapshot};
use crate::{ReadOnlySegment, Segment, SegmentError};
use rustix::fs::{FileType, Mode, OFlags, SealFlags};
use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;

/// The most workers a monitored segment may declare (a real pool has one per core or so).
pub const MAX_WORKERS: usize = 4096;

/// The largest segment a monitor accepts, in bytes (1 TiB): far above any real pool, and a bound
/// on what a hostile file can make a monitor map.
pub const MAX_SEGMENT_BYTES: u64 = 1 << 40;

/// What `/proc/<pid>/fd/<fd>` reads for a pool's segment: the memfd's name as `memfd_create`
/// gives it (`segment.rs`), marked deleted as every memfd is.
const SEGMENT_LINK: &[u8] = b"/memfd:ringenv (deleted)";

/// `statfs.f_type` of tmpfs, where memfds live (`TMPFS_MAGIC` in `<linux/magic.h>`).
const TMPFS_MAGIC: u64 = 0x0102_1994;

/// A pool's segment as a descriptor of one process: a candidate, until [`Monitor::open`] checks
/// it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PoolEntry {
    /// The process holding the descriptor: the pool's main process as its header records it, or
    /// the lowest pid holding the segment when the recorded process holds none.
    pub pid: u32,
    /// The segment's descriptor in that process.
    pub fd: i32,
}

/// A read-only view of a running pool.
pub struct Monitor {
    segment: ReadOnlySegment,
}

/// Why a pool could not be monitored.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    /// `/proc/<pid>/fd/<fd>` could not be opened: no such process or descriptor (`NotFound`), or
    /// the process is not this user's (`PermissionDenied`).
    #[error("cannot open descriptor {fd} of process {pid}: {source}")]
    Unreachable {
        /// The process.
        pid: u32,
        /// Its descriptor.
        fd: i32,
        /// What `open` answered.
        source: std::io::Error,
    },
    /// The descriptor is not a regular file: names what it is.
    #[error("the descriptor is a {kind}, not a memfd")]
    NotRegular {
        /// `"FIFO"`, `"socket"`, `"character device"`, `"directory"`, ...
        kind: &'static str,
    },
    /// The file belongs to another user.
    #[error("the descriptor's file belongs to user {uid}, not to this user ({ours})")]
    NotOwned {
        /// The file's owner.
        uid: u32,
        /// This process's effective user id.
        ours: u32,
    },
    /// The file is not in memory (tmpfs), so not a memfd.
    #[error("the descriptor's file is on file system type {fs_type:#x}, not a memfd (tmpfs)")]
    NotMemfd {
        /// The file system's `statfs.f_type`.
        fs_type: u64,
    },
    /// The file is not sealed against shrinking and growing.
    #[error("the descriptor's file is not sealed against resizing (seals {seals:#x})")]
    NotSealed {
        /// The seals found (`F_GET_SEALS`).
        seals: u32,
    },
    /// The file is larger than [`MAX_SEGMENT_BYTES`].
    #[error("the segment is {bytes} bytes, more than the {MAX_SEGMENT_BYTES} a monitor maps")]
    TooLarge {
        /// Its size in bytes.
        bytes: u64,
    },
    /// A system call failed: names it.
    #[error("{0} failed: {1}")]
    Os(&'static str, #[source] std::io::Error),
    /// The segment could not be mapped or its header does not match this build.
    #[error("segment refused: {0}")]
    Segment(#[source] SegmentError),
    /// The header declares more than [`MAX_WORKERS`] workers.
    #[error("segment declares {workers} workers, more than the {MAX_WORKERS} a monitor reads")]
    TooManyWorkers {
        /// Workers the header declares.
        workers: usize,
    },
}

/// A worker's counters and its futex sleeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerView {
    /// The worker's counters.
    pub metrics: WorkerSnapshot,
    /// The env ids (indices) it steps, a contiguous block.
    pub env_ids: std::ops::Range<usize>,
    /// Times it slept on its futex waiting for a command.
    pub sleeps: u32,
    /// Waits for a command that had a spin phase (0 for ever under `SpinPolicy::NEVER`).
    pub spins: u32,
}

/// A snapshot of a pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolView {
    /// Envs in the pool.
    pub num_envs: usize,
    /// The main process's counters.
    pub pool: PoolSnapshot,
    /// Times the main process slept on its futex waiting for completions.
    pub main_sleeps: u32,
    /// Waits of the main process for completions that had a spin phase.
    pub main_spins: u32,
    /// One entry per worker (at most [`MAX_WORKERS`]).
    pub workers: Vec<WorkerView>,
}

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn os(call: &'static str) -> impl FnOnce(rustix::io::Errno) -> MonitorError {
    move |e| MonitorError::Os(call, e.into())
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "file of unknown type",
    }
}

/// Accepts `fd` (an `O_PATH` descriptor or an open one) as a file that may be a segment of user
/// `ours`: a regular tmpfs file (a memfd) owned by that user, at most [`MAX_SEGMENT_BYTES`] long.
/// With `sealed`, also that it is sealed against shrinking and growing (`F_GET_SEALS` needs an
/// open descriptor). Reads nothing from the file.
fn check_file(fd: BorrowedFd<'_>, ours: u32, sealed: bool) -> Result<(), MonitorError> {
    let st = rustix::fs::fstat(fd).map_err(os("fstat"))?;
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind != FileType::RegularFile {
        return Err(MonitorError::NotRegular { kind: kind_name(kind) });
    }
    if st.st_uid != ours {
        return Err(MonitorError::NotOwned { uid: st.st_uid, ours });
    }
    let fs_type = rustix::fs::fstatfs(fd).map_err(os("fstatfs"))?.f_type as u64;
    if fs_type != TMPFS_MAGIC {
        return Err(MonitorError::NotMemfd { fs_type });
    }
    let bytes = u64::try_from(st.st_size).unwrap_or(u64::MAX);
    if bytes > MAX_SEGMENT_BYTES {
        return Err(MonitorError::TooLarge { bytes });
    }
    if sealed {
        // A file that does not support sealing answers EINVAL: no seals.
        let seals = rustix::fs::fcntl_get_seals(fd).unwrap_or(SealFlags::empty());
        if !seals.contains(SealFlags::GROW | SealFlags::SHRINK) {
            return Err(MonitorError::NotSealed { seals: seals.bits() });
        }
    }
    Ok(())
}

impl Monitor {
    /// Opens the segment behind descriptor `entry.fd` of process `entry.pid`, checks it, maps it
    /// read-only and validates its header. Never blocks: the descriptor is first opened as a path
    /// only (`O_PATH`) and reopened for reading once it is known to be a regular memory file.
    ///
    /// # Errors
    /// [`MonitorError::Unreachable`] when the process or descriptor is gone or not this user's;
    /// [`MonitorError::NotRegular`], [`MonitorError::NotOwned`], [`MonitorError::NotMemfd`],
    /// [`MonitorError::NotSealed`], [`MonitorError::TooLarge`] for a file that is not a segment;
    /// [`MonitorError::Segment`] when the header does not match this build (the error names the
    /// field); [`MonitorError::TooManyWorkers`]; [`MonitorError::Os`] naming a failed call.
    pub fn open(entry: &PoolEntry) -> Result<Monitor, MonitorError> {
        let ours = euid();
        let (pid, fd) = (entry.pid, entry.fd);
        let unreachable = |e: rustix::io::Errno| MonitorError::Unreachable { pid, fd, source: e.into() };
        let path = rustix::fs::open(format!("/proc/{pid}/fd/{fd}"), OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
            .map_err(unreachable)?;
        check_file(path.as_fd(), ours, false)?;
        // A regular file of this user: reopening it through this process's descriptor cannot block
        // or reach another file.
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        let file = rustix::fs::open(format!("/proc/self/fd/{}", path.as_raw_fd()), flags, Mode::empty())
            .map_err(os("open"))?;
        check_file(file.as_fd(), ours, true)?;
        let path = std::path::PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        let segment = Segment::open_read_only(&path).map_err(MonitorError::Segment)?;
        let workers = segment.layout().num_workers;
        if workers > MAX_WORKERS {
            return Err(MonitorError::TooManyWorkers { workers });
        }
        Ok(Monitor { segment })
    }

    /// The counters now. Bounded: reads `2 + 2 * workers` small records, each with a bounded
    /// number of retries.
    pub fn snapshot(&self) -> PoolView {
        let l = self.segment.layout();
        let workers = (0..l.num_workers.min(MAX_WORKERS))
            .map(|w| {
                let r = l.worker_envs(w);
                WorkerView {
                    metrics: self.segment.worker_metrics(w).unwrap_or_default(),
                    env_ids: r,
                    sleeps: self.segment.command_sleeps(w).unwrap_or(0),
                    spins: self.segment.command_spins(w).unwrap_or(0),
                }
            })
            .collect();
        PoolView {
            num_envs: l.num_envs,
            pool: self.segment.pool_metrics(),
            main_sleeps: self.segment.completion_sleeps(),
            main_spins: self.segment.completion_spins(),
            workers,
        }
    }
}

/// The pools of this user's processes (in this pid namespace), one entry per segment: the
/// descriptor of the main process its header records, or of the lowest pid holding it when that
/// process holds none (the main process died, or the header is corrupt; [`Monitor::open`] tells).
/// A closed pool (its header records main pid 0) is left out, and so is a segment whose recorded
/// main process runs but no longer holds it (a copy a fork child inherited from a pool since
/// closed). Entries are claims: check one with [`Monitor::open`].
pub fn list_pools() -> Vec<PoolEntry> {
    let ours = euid();
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    // Each segment's holders, by the memfd's device and inode.
    let mut held: BTreeMap<(u64, u64), Vec<PoolEntry>> = BTreeMap::new();
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if !p.metadata().is_ok_and(|m| m.uid() == ours) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else { continue };
        for f in fds.flatten() {
            let Some(fd) = f.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
            if !std::fs::read_link(f.path()).is_ok_and(|t| t.as_os_str().as_bytes() == SEGMENT_LINK) {
                continue;
            }
            // `stat` follows the link to the memfd's inode without opening it.
            let Ok(st) = std::fs::metadata(f.path()) else { continue };
            held.entry((st.dev(), st.ino())).or_default().push(PoolEntry { pid, fd });
        }
    }
    let mut pools = Vec::new();
    for mut holders in held.into_values() {
        holders.sort();
        // Any holder's descriptor will do; one may have closed it since the listing.
        let main = holders.iter().find_map(|h| Monitor::open(h).ok()).map(|m| m.segment.pool_metrics().main_pid);
        match main.and_then(|m| holders.iter().find(|h| h.pid == m)) {
            _ if main == Some(0) => {} // closed (`PoolMetrics::mark_closed`)
            Some(h) => pools.push(h.clone()),
            None if main.is_some_and(|m| is_ours_running(m, ours)) => {} // a closed pool's copy
            None => pools.push(holders.swap_remove(0)),
        }
    }
    pools.sort();
    pools
}

/// Whether `pid` is a process of user `ours`.
fn is_ours_running(pid: u32, ours: u32) -> bool {
    pid != 0 && std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == ours)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::HEADER_REGION;
    use crate::{header, ArraySpec, DType, Layout};
    use rustix::fs::MemfdFlags;
    use std::os::fd::{AsRawFd, OwnedFd};

    fn layout(num_envs: usize, workers: usize) -> Layout {
        Layout::new(
            num_envs,
            workers,
            2,
            vec![ArraySpec::new(DType::F32, &[4])],
            vec![ArraySpec::new(DType::I64, &[])],
            DType::F32,
        )
        .unwrap()
    }

    /// A sealed memfd of `layout`'s size holding its header, then `fill` up to `fill_to` bytes.
    fn forged(layout: &Layout, fill: u8, fill_to: usize) -> OwnedFd {
        let fd = rustix::fs::memfd_create("forged", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&fd, layout.total_size() as u64).unwrap();
        let mut head = vec![fill; fill_to.clamp(HEADER_REGION, layout.total_size())];
        header::write(&mut head[..HEADER_REGION], layout);
        let mut at = 0;
        while at < head.len() {
            at += rustix::io::pwrite(&fd, &head[at..], at as u64).unwrap();
        }
        rustix::fs::fcntl_add_seals(&fd, SealFlags::GROW | SealFlags::SHRINK).unwrap();
        fd
    }

    /// `fd`, held by this process, as an entry.
    fn entry(fd: &OwnedFd) -> PoolEntry {
        PoolEntry { pid: std::process::id(), fd: fd.as_raw_fd() }
    }

    #[test]
    fn a_segment_of_garbage_past_a_valid_header_is_read_bounded() {
        let l = layout(6, 3);
        let fd = forged(&l, 0xFF, l.total_size());
        let view = Monitor::open(&entry(&fd)).unwrap().snapshot();
        assert_eq!((view.num_envs, view.workers.len()), (6, 3));
        assert_eq!(view.pool.commands, u64::MAX);
        for w in &view.workers {
            assert_eq!((w.metrics.pid, w.metrics.commands, w.sleeps), (u32::MAX, u64::MAX, u32::MAX));
            // The error sequence is odd for ever: the reader gives up after its bounded retries.
            assert!(w.metrics.last_error.is_empty());
        }
    }

    #[test]
    fn an_error_text_with_a_huge_length_and_invalid_utf8_is_cut() {
        let l = layout(2, 1);
        let fd = forged(&l, 0, HEADER_REGION);
        // Even sequence, a length of u32::MAX, 0xFF bytes (invalid UTF-8) as the text.
        let metrics_at = l.worker_metrics_offset(0);
        let mut m = vec![0u8; crate::metrics::WorkerMetrics::MEM_SIZE];
        let (seq_at, len_at, text_at) = (40, 44, 48); // #[repr(C)] offsets of error_seq, error_len, error
        m[seq_at..seq_at + 4].copy_from_slice(&2u32.to_ne_bytes());
        m[len_at..len_at + 4].copy_from_slice(&u32::MAX.to_ne_bytes());
        m[text_at..text_at + crate::metrics::LAST_ERROR_BYTES].fill(0xFF);
        rustix::io::pwrite(&fd, &m, metrics_at as u64).unwrap();
        let view = Monitor::open(&entry(&fd)).unwrap().snapshot();
        let text = &view.workers[0].metrics.last_error;
        assert_eq!(text.chars().count(), crate::metrics::LAST_ERROR_BYTES);
        assert!(text.chars().all(|c| c == char::REPLACEMENT_CHARACTER));
    }

    #[test]
    fn a_header_declaring_too_many_workers_or_a_larger_file_is_refused() {
        // 5000 workers: valid as a layout, and a sparse file of its size costs nothing.
        let l = layout(5000, 5000);
        let fd = forged(&l, 0, HEADER_REGION);
        match Monitor::open(&entry(&fd)) {
            Err(MonitorError::TooManyWorkers { workers: 5000 }) => {}
            Err(other) => panic!("expected TooManyWorkers, got {other}"),
            Ok(_) => panic!("expected TooManyWorkers"),
        }
        // A header recording a size beyond the file's.
        let small = layout(2, 1);
        let fd = rustix::fs::memfd_create("forged", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&fd, HEADER_REGION as u64).unwrap();
        let mut head = vec![0u8; HEADER_REGION];
        header::write(&mut head, &small);
        rustix::io::pwrite(&fd, &head, 0).unwrap();
        rustix::fs::fcntl_add_seals(&fd, SealFlags::GROW | SealFlags::SHRINK).unwrap();
        assert!(matches!(Monitor::open(&entry(&fd)), Err(MonitorError::Segment(_))));
    }

    #[test]
    fn random_bytes_never_panic_the_monitor() {
        // A tiny deterministic generator (xorshift): 64 segments of random bytes, some with a
        // valid header in front.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let l = layout(4, 2);
        for round in 0..64 {
            let fd = rustix::fs::memfd_create("fuzz", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
            rustix::fs::ftruncate(&fd, l.total_size() as u64).unwrap();
            let mut bytes: Vec<u8> = (0..l.total_size()).map(|_| next() as u8).collect();
            if round % 2 == 0 {
                header::write(&mut bytes[..HEADER_REGION], &l);
            }
            rustix::io::pwrite(&fd, &bytes, 0).unwrap();
            rustix::fs::fcntl_add_seals(&fd, SealFlags::GROW | SealFlags::SHRINK).unwrap();
            match Monitor::open(&entry(&fd)) {
                Ok(m) => {
                    let view = m.snapshot();
                    assert!(view.workers.len() <= MAX_WORKERS);
                    assert!(view
                        .workers
                        .iter()
                        .all(|w| w.metrics.last_error.len() <= 3 * crate::metrics::LAST_ERROR_BYTES));
                }
                Err(e) => assert!(round % 2 == 1, "a valid header was refused: {e}"),
            }
        }
    }

    #[test]
    fn a_real_segment_is_listed_once_under_its_main_process() {
        let me = std::process::id();
        let ours = |s: &Segment| list_pools().into_iter().filter(|e| e.pid == me && e.fd == s.fd().as_raw_fd()).count();
        let segment = Segment::create(layout(4, 2)).unwrap();
        segment.pool_metrics().init(me);
        segment.worker_metrics(1).record_command(2, 10, 5);
        assert_eq!(ours(&segment), 1);
        let view = Monitor::open(&entry(&segment.fd().try_clone_to_owned().unwrap())).unwrap().snapshot();
        assert_eq!(view.pool.main_pid, me);
        assert_eq!(view.workers[1].metrics.env_steps, 2);
        assert_eq!(view.workers.iter().map(|w| w.env_ids.clone()).collect::<Vec<_>>(), vec![0..2, 2..4]);
        // A second descriptor of the same segment in this process: still one entry.
        let _copy = segment.fd().try_clone_to_owned().unwrap();
        let listed = list_pools().into_iter().filter(|e| e.pid == me).filter(|e| {
            Monitor::open(e).is_ok_and(|m| m.snapshot().workers.get(1).is_some_and(|w| w.metrics.env_steps == 2))
        });
        assert_eq!(listed.count(), 1);
    }

    #[test]
    fn a_closed_pool_or_a_copy_whose_main_process_runs_without_it_is_left_out_and_a_dead_one_kept() {
        let me = std::process::id();
        let segment = Segment::create(layout(2, 1)).unwrap();
        let fd = segment.fd().as_raw_fd();
        let listed = || list_pools().into_iter().any(|e| e.pid == me && e.fd == fd);
        // The parent (the test runner's) is running and holds no copy: a closed pool's leftover.
        segment.pool_metrics().init(rustix::process::getppid().map_or(1, |p| p.as_raw_nonzero().get() as u32));
        assert!(!listed());
        // No such process (pids are below 2^22): the main process died, or the header is corrupt.
        segment.pool_metrics().init(u32::MAX);
        assert!(listed());
        // Closed.
        segment.pool_metrics().mark_closed();
        assert!(!listed());
    }

    #[test]
    fn anything_but_a_sealed_memfd_is_refused_without_blocking() {
        let dir = std::env::temp_dir().join(format!("ringenv-monitor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, FileType::Fifo, Mode::RUSR | Mode::WUSR, 0).unwrap();
        // The read end without a writer: opening it by path again would block.
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let cases: Vec<(OwnedFd, &str)> = vec![
            (rustix::fs::open(&fifo, flags, Mode::empty()).unwrap(), "FIFO"),
            (rustix::fs::open("/dev/null", flags, Mode::empty()).unwrap(), "character device"),
            (rustix::fs::open(&dir, flags | OFlags::DIRECTORY, Mode::empty()).unwrap(), "directory"),
            (rustix::fs::memfd_create("ringenv", MemfdFlags::CLOEXEC).unwrap(), "not sealed"),
        ];
        for (fd, what) in &cases {
            match Monitor::open(&entry(fd)) {
                Err(e) => assert!(e.to_string().contains(what), "{what}: {e}"),
                Ok(_) => panic!("{what} was accepted"),
            }
        }
        let gone = PoolEntry { pid: std::process::id(), fd: i32::MAX };
        assert!(matches!(Monitor::open(&gone), Err(MonitorError::Unreachable { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
