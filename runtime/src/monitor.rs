//! Reading a running pool's metrics from another process, without touching the run: the segment
//! is mapped read-only through `/proc/<pid>/fd/<fd>` of the pool's main process (found with
//! [`crate::advert::list`]) and only atomics are loaded from it.
//!
//! ```no_run
//! use ringenv_runtime::{advert, monitor::Monitor};
//! for entry in advert::list() {
//!     let m = Monitor::open(&entry).unwrap();
//!     let s = m.snapshot();
//!     println!("pool of pid {}: {} envs, {} commands", entry.pid, s.num_envs, s.pool.commands);
//! }
//! ```

use crate::advert::PoolEntry;
use crate::metrics::{PoolSnapshot, WorkerSnapshot};
use crate::{Segment, SegmentError};

/// A read-only view of a running pool.
pub struct Monitor {
    segment: Segment,
}

/// A worker's counters and its futex sleeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerView {
    /// The worker's counters.
    pub metrics: WorkerSnapshot,
    /// Env ids `[start, end)` it steps.
    pub env_ids: (usize, usize),
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
    /// One entry per worker.
    pub workers: Vec<WorkerView>,
}

impl Monitor {
    /// Maps the pool of `entry` read-only and validates its header.
    ///
    /// # Errors
    /// [`SegmentError`] when the pool is gone, belongs to another user, or was built by another
    /// ringenv version (the header error names the field).
    pub fn open(entry: &PoolEntry) -> Result<Monitor, SegmentError> {
        Segment::open_read_only(&entry.segment_path()).map(|segment| Monitor { segment })
    }

    /// The counters now.
    pub fn snapshot(&self) -> PoolView {
        let l = self.segment.layout();
        let workers = (0..l.num_workers)
            .map(|w| {
                let r = l.worker_envs(w);
                WorkerView {
                    metrics: self.segment.worker_metrics(w).snapshot(),
                    env_ids: (r.start, r.end),
                    sleeps: self.segment.command_wakeup(w).sleeps(),
                    spins: self.segment.command_wakeup(w).spins(),
                }
            })
            .collect();
        PoolView {
            num_envs: l.num_envs,
            pool: self.segment.pool_metrics().snapshot(),
            main_sleeps: self.segment.completion_wakeup().sleeps(),
            main_spins: self.segment.completion_wakeup().spins(),
            workers,
        }
    }
}
