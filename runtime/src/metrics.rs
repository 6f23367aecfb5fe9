//! The metrics region of a segment: counters each worker and the main process keep about
//! themselves, readable by any process that maps the segment (`ringenv top`), never on the data
//! path's critical section.
//!
//! Every field is an atomic written by one process (its owner) with `Relaxed` stores and read
//! with `Relaxed` loads: a monitor sees each counter's recent value, never a torn one. The last
//! error text is guarded by a sequence counter (a seqlock: odd while the owner writes), so a
//! reader either gets a consistent text or retries. Futex sleep counts live in the wake-up words
//! ([`crate::Wakeup::sleeps`]).
//!
//! ```
//! use ringenv_runtime::WorkerMetrics;
//! let m = WorkerMetrics::default();
//! m.record_command(4, 1_000, 250);
//! m.set_last_error("ValueError: boom");
//! let s = m.snapshot();
//! assert_eq!((s.commands, s.env_steps, s.busy_ns, s.wait_ns), (1, 4, 1_000, 250));
//! assert_eq!(s.last_error, "ValueError: boom");
//! ```

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Bytes of error text kept per worker (longer texts are cut at a character boundary).
pub const LAST_ERROR_BYTES: usize = 248;

/// Counters of one worker, in shared memory. Written by the worker (and `restarts` by the main
/// process), read by anyone.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct WorkerMetrics {
    /// Process id of the worker (0 before it connects).
    pid: AtomicU32,
    /// Times the pool restarted this worker.
    restarts: AtomicU32,
    /// Commands completed.
    commands: AtomicU64,
    /// Env steps and resets completed (each command counts the worker's envs).
    env_steps: AtomicU64,
    /// Nanoseconds spent running commands.
    busy_ns: AtomicU64,
    /// Nanoseconds spent waiting for commands (spinning or asleep).
    wait_ns: AtomicU64,
    /// Seqlock over `error`: odd while being written.
    error_seq: AtomicU32,
    /// Length in bytes of the text in `error`.
    error_len: AtomicU32,
    /// The last error's text, UTF-8, packed little-endian into words.
    error: [AtomicU64; LAST_ERROR_BYTES / 8],
}

/// A copy of a worker's counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerSnapshot {
    /// Process id (0 before the worker connected).
    pub pid: u32,
    /// Times the pool restarted this worker.
    pub restarts: u32,
    /// Commands completed.
    pub commands: u64,
    /// Env steps and resets completed.
    pub env_steps: u64,
    /// Nanoseconds spent running commands.
    pub busy_ns: u64,
    /// Nanoseconds spent waiting for commands.
    pub wait_ns: u64,
    /// The last error reported by the worker (empty if none).
    pub last_error: String,
}

impl WorkerMetrics {
    /// Bytes this struct occupies in the segment.
    pub const MEM_SIZE: usize = std::mem::size_of::<WorkerMetrics>();

    /// Records the worker's process id (at connect).
    pub fn set_pid(&self, pid: u32) {
        self.pid.store(pid, Ordering::Relaxed);
    }

    /// Counts one restart (written by the main process).
    pub fn add_restart(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a completed command that stepped or reset `envs` envs, ran `busy_ns` and was
    /// waited for `wait_ns`. Only the owning worker calls it, so plain add-and-store suffices.
    pub fn record_command(&self, envs: u64, busy_ns: u64, wait_ns: u64) {
        let add = |c: &AtomicU64, v: u64| c.store(c.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
        add(&self.commands, 1);
        add(&self.env_steps, envs);
        add(&self.busy_ns, busy_ns);
        add(&self.wait_ns, wait_ns);
    }

    /// Replaces the last error text (cut to [`LAST_ERROR_BYTES`]).
    pub fn set_last_error(&self, text: &str) {
        let mut end = text.len().min(LAST_ERROR_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let mut bytes = [0u8; LAST_ERROR_BYTES];
        bytes[..end].copy_from_slice(&text.as_bytes()[..end]);
        let seq = self.error_seq.load(Ordering::Relaxed);
        self.error_seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        // SYNC POINT: the odd sequence is visible before the new words (pairs with the Acquire
        // fence in `snapshot`).
        std::sync::atomic::fence(Ordering::Release);
        for (word, chunk) in self.error.iter().zip(bytes.chunks_exact(8)) {
            word.store(u64::from_le_bytes(chunk.try_into().expect("8 bytes")), Ordering::Relaxed);
        }
        self.error_len.store(end as u32, Ordering::Relaxed);
        // SYNC POINT: the words are visible before the even sequence (pairs with the Acquire
        // load in `snapshot`).
        self.error_seq.store(seq.wrapping_add(2), Ordering::Release);
    }

    /// A copy of the counters (retries the error text while its owner rewrites it).
    pub fn snapshot(&self) -> WorkerSnapshot {
        let mut last_error = String::new();
        for _ in 0..100 {
            // SYNC POINT: pairs with the Release store of the even sequence in `set_last_error`.
            let before = self.error_seq.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            let len = (self.error_len.load(Ordering::Relaxed) as usize).min(LAST_ERROR_BYTES);
            let mut bytes = Vec::with_capacity(LAST_ERROR_BYTES);
            for w in &self.error {
                bytes.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
            }
            // SYNC POINT: pairs with the Release fence in `set_last_error`.
            std::sync::atomic::fence(Ordering::Acquire);
            if self.error_seq.load(Ordering::Relaxed) == before {
                bytes.truncate(len);
                last_error = String::from_utf8_lossy(&bytes).into_owned();
                break;
            }
        }
        WorkerSnapshot {
            pid: self.pid.load(Ordering::Relaxed),
            restarts: self.restarts.load(Ordering::Relaxed),
            commands: self.commands.load(Ordering::Relaxed),
            env_steps: self.env_steps.load(Ordering::Relaxed),
            busy_ns: self.busy_ns.load(Ordering::Relaxed),
            wait_ns: self.wait_ns.load(Ordering::Relaxed),
            last_error,
        }
    }
}

/// Counters of the main process, in shared memory.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct PoolMetrics {
    /// Process id of the main process.
    main_pid: AtomicU32,
    /// Commands the pool completed.
    commands: AtomicU64,
    /// Nanoseconds the main process spent waiting for completions.
    wait_ns: AtomicU64,
    /// When the pool was created, nanoseconds since the Unix epoch.
    created_unix_ns: AtomicU64,
}

/// A copy of the main process's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolSnapshot {
    /// Process id of the main process.
    pub main_pid: u32,
    /// Commands the pool completed.
    pub commands: u64,
    /// Nanoseconds the main process spent waiting for completions.
    pub wait_ns: u64,
    /// When the pool was created, nanoseconds since the Unix epoch.
    pub created_unix_ns: u64,
}

impl PoolMetrics {
    /// Bytes this struct occupies in the segment.
    pub const MEM_SIZE: usize = std::mem::size_of::<PoolMetrics>();

    /// Records the main process and the creation time.
    pub fn init(&self, main_pid: u32) {
        self.main_pid.store(main_pid, Ordering::Relaxed);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        self.created_unix_ns.store(now.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Records a completed command that was waited for `wait_ns` (main process only).
    pub fn record_command(&self, wait_ns: u64) {
        self.commands.store(self.commands.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        self.wait_ns.store(self.wait_ns.load(Ordering::Relaxed).wrapping_add(wait_ns), Ordering::Relaxed);
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> PoolSnapshot {
        PoolSnapshot {
            main_pid: self.main_pid.load(Ordering::Relaxed),
            commands: self.commands.load(Ordering::Relaxed),
            wait_ns: self.wait_ns.load(Ordering::Relaxed),
            created_unix_ns: self.created_unix_ns.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_and_multibyte_errors_are_cut_on_a_character_boundary() {
        let m = WorkerMetrics::default();
        let text = "é".repeat(200); // 400 bytes
        m.set_last_error(&text);
        let got = m.snapshot().last_error;
        assert!(got.len() <= LAST_ERROR_BYTES && got.len() >= LAST_ERROR_BYTES - 1);
        assert!(got.chars().all(|c| c == 'é'));
        m.set_last_error("short");
        assert_eq!(m.snapshot().last_error, "short");
    }

    #[test]
    fn a_reader_never_sees_a_torn_error_text() {
        let m = WorkerMetrics::default();
        let (a, b) = ("a".repeat(200), "b".repeat(100));
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..20_000 {
                    m.set_last_error(if i % 2 == 0 { &a } else { &b });
                }
            });
            for _ in 0..20_000 {
                let e = m.snapshot().last_error;
                assert!(e.is_empty() || e == a || e == b, "torn text of {} bytes", e.len());
            }
        });
    }

    #[test]
    fn counters_add_up() {
        let m = WorkerMetrics::default();
        for _ in 0..3 {
            m.record_command(2, 10, 5);
        }
        m.add_restart();
        m.set_pid(42);
        let s = m.snapshot();
        assert_eq!((s.pid, s.restarts, s.commands, s.env_steps, s.busy_ns, s.wait_ns), (42, 1, 3, 6, 30, 15));
        let p = PoolMetrics::default();
        p.init(7);
        p.record_command(100);
        let ps = p.snapshot();
        assert_eq!((ps.main_pid, ps.commands, ps.wait_ns), (7, 1, 100));
        assert!(ps.created_unix_ns > 1_600_000_000_000_000_000);
    }
}
