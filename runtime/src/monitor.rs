//! Reading a running pool's metrics from another process, without touching the run: the segment
//! descriptor is received from the pool itself and checked ([`crate::advert::connect`]), mapped
//! read-only, its header validated, and only atomics are loaded from it.
//!
//! Nothing read from the segment is trusted beyond what the header validation and the bounds here
//! guarantee: the layout must fit the file (sealed, so it cannot shrink later), the worker count is
//! at most [`MAX_WORKERS`], the error texts are cut to [`crate::metrics::LAST_ERROR_BYTES`], and
//! every loop over shared state is bounded. A hostile or corrupt segment yields an error or odd
//! numbers, never a hang, a panic or an access out of the mapping.
//!
//! ```no_run
//! use ringenv_runtime::{list_pools, Monitor};
//! for entry in list_pools() {
//!     let Ok(m) = Monitor::open(&entry) else { continue }; // not a verified pool of this user
//!     let s = m.snapshot();
//!     println!("pool of pid {}: {} envs, {} commands", entry.pid, s.num_envs, s.pool.commands);
//! }
//! ```

use crate::advert::{AdvertError, PoolEntry};
use crate::metrics::{PoolSnapshot, WorkerSnapshot};
use crate::{ReadOnlySegment, Segment, SegmentError};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// The most workers a monitored segment may declare (a real pool has one per core or so).
pub const MAX_WORKERS: usize = 4096;

/// How long [`Monitor::open`] waits for the pool to hand over its segment.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

/// A read-only view of a running pool.
pub struct Monitor {
    segment: ReadOnlySegment,
}

/// Why a pool could not be monitored.
#[derive(Debug)]
pub enum MonitorError {
    /// The advertisement was refused (another user's, not the claimed process, not a sealed
    /// memfd, ...) or the pool is gone.
    Advert(AdvertError),
    /// The segment could not be mapped or its header does not match this build.
    Segment(SegmentError),
    /// The header declares more than [`MAX_WORKERS`] workers.
    TooManyWorkers {
        /// Workers the header declares.
        workers: usize,
    },
}

impl std::fmt::Display for MonitorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MonitorError::Advert(e) => write!(f, "advertisement refused: {e}"),
            MonitorError::Segment(e) => write!(f, "segment refused: {e}"),
            MonitorError::TooManyWorkers { workers } => {
                write!(f, "segment declares {workers} workers, more than the {MAX_WORKERS} a monitor reads")
            }
        }
    }
}

impl std::error::Error for MonitorError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MonitorError::Advert(e) => Some(e),
            MonitorError::Segment(e) => Some(e),
            MonitorError::TooManyWorkers { .. } => None,
        }
    }
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

impl Monitor {
    /// [`Monitor::open_with_timeout`] with [`DEFAULT_TIMEOUT`].
    ///
    /// # Errors
    /// As [`Monitor::open_with_timeout`].
    pub fn open(entry: &PoolEntry) -> Result<Monitor, MonitorError> {
        Self::open_with_timeout(entry, DEFAULT_TIMEOUT)
    }

    /// Receives the segment of the pool advertised as `entry` (waiting at most `timeout` for it),
    /// maps it read-only and validates its header.
    ///
    /// # Errors
    /// [`MonitorError::Advert`] when the advertisement is refused or the pool is gone,
    /// [`MonitorError::Segment`] when the segment cannot be mapped or was built by another ringenv
    /// version (the header error names the field), [`MonitorError::TooManyWorkers`].
    pub fn open_with_timeout(entry: &PoolEntry, timeout: Duration) -> Result<Monitor, MonitorError> {
        let fd = crate::advert::connect(entry, timeout).map_err(MonitorError::Advert)?;
        // The descriptor was checked to be a regular, sealed memory file of this user: reopening it
        // through this process's own descriptor table cannot block or reach another file.
        let path = std::path::PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advert::Advert;
    use crate::layout::HEADER_REGION;
    use crate::{header, ArraySpec, DType, Layout};
    use rustix::fs::{MemfdFlags, SealFlags};
    use std::os::fd::{AsFd, OwnedFd};

    const LONG: Duration = Duration::from_secs(30); // a safety net: every reply comes at once

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

    fn advertise(fd: OwnedFd) -> (Advert, PoolEntry) {
        let ad = Advert::serve(4242, fd).unwrap();
        let e = crate::advert::list().into_iter().find(|e| e.name == ad.name()).unwrap();
        (ad, e)
    }

    #[test]
    fn a_segment_of_garbage_past_a_valid_header_is_read_bounded() {
        let _forks = crate::process_id::fork_test_lock(); // a fork elsewhere would stop its thread
        let l = layout(6, 3);
        let (_ad, e) = advertise(forged(&l, 0xFF, l.total_size()));
        let view = Monitor::open_with_timeout(&e, LONG).unwrap().snapshot();
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
        let _forks = crate::process_id::fork_test_lock(); // a fork elsewhere would stop its thread
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
        let (_ad, e) = advertise(fd);
        let view = Monitor::open_with_timeout(&e, LONG).unwrap().snapshot();
        let text = &view.workers[0].metrics.last_error;
        assert_eq!(text.chars().count(), crate::metrics::LAST_ERROR_BYTES);
        assert!(text.chars().all(|c| c == char::REPLACEMENT_CHARACTER));
    }

    #[test]
    fn a_header_declaring_too_many_workers_or_a_larger_file_is_refused() {
        let _forks = crate::process_id::fork_test_lock(); // a fork elsewhere would stop its thread
                                                          // 5000 workers: valid as a layout, and a sparse file of its size costs nothing.
        let l = layout(5000, 5000);
        let (_ad, e) = advertise(forged(&l, 0, HEADER_REGION));
        match Monitor::open_with_timeout(&e, LONG) {
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
        let (_ad2, e2) = advertise(fd);
        assert!(matches!(Monitor::open_with_timeout(&e2, LONG), Err(MonitorError::Segment(_))));
    }

    #[test]
    fn random_bytes_never_panic_the_monitor() {
        let _forks = crate::process_id::fork_test_lock(); // a fork elsewhere would stop its thread
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
            let (_ad, e) = advertise(fd);
            match Monitor::open_with_timeout(&e, LONG) {
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
    fn a_real_segment_reads_through_its_advert() {
        let _forks = crate::process_id::fork_test_lock(); // a fork elsewhere would stop its thread
        let segment = Segment::create(layout(4, 2)).unwrap();
        segment.pool_metrics().init(std::process::id());
        segment.worker_metrics(1).record_command(2, 10, 5);
        let ad = Advert::publish(segment.fd().as_fd().as_raw_fd()).unwrap();
        let e = crate::advert::list().into_iter().find(|e| e.name == ad.name()).unwrap();
        let view = Monitor::open_with_timeout(&e, LONG).unwrap().snapshot();
        assert_eq!(view.pool.main_pid, std::process::id());
        assert_eq!(view.workers[1].metrics.env_steps, 2);
        assert_eq!(view.workers.iter().map(|w| w.env_ids.clone()).collect::<Vec<_>>(), vec![0..2, 2..4]);
    }
}
