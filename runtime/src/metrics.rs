//! The metrics region of a segment: counters each worker and the main process keep about
//! themselves, readable by any process that maps the segment (`ringenv top`), never on the data
//! path's critical section.
//!
//! Every field is an atomic written by its owner with `Relaxed` stores. The last error text is
//! guarded by a seqlock, so a reader gets a consistent text or retries; a text longer than
//! [`LAST_ERROR_BYTES`] keeps its beginning and end with `…` between.
//!
//! **Last words.** A worker about to die writes its error with
//! [`WorkerMetrics::set_last_words`]; the pool takes it with [`WorkerMetrics::take_last_words`]
//! when it reaps the worker, so [`crate::WorkerFailure::last_error`] says why it died.
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

/// Bytes of error text kept per worker (a longer text keeps its beginning and end, cut at
/// character boundaries, with `…` in between).
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
    /// 1 when the last error is the worker's last words (it was about to exit), else 0. Last, so
    /// the offsets of the fields above are those of earlier versions.
    last_words: AtomicU32,
    /// 1 once the worker has taken its `Close` command and is closing its envs, else 0 (after
    /// `last_words` for the same reason; within the struct's alignment, so its size is unchanged).
    closing: AtomicU32,
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

    /// Marks the worker as closing its envs: it has taken its `Close` command (written by the
    /// worker, before it closes them).
    pub fn set_closing(&self) {
        self.closing.store(1, Ordering::Release);
    }

    /// Whether the worker has taken its `Close` command and is closing its envs (any other value
    /// than the one [`WorkerMetrics::set_closing`] writes reads as not closing).
    pub fn is_closing(&self) -> bool {
        // SYNC POINT: pairs with the Release store in `set_closing`.
        self.closing.load(Ordering::Acquire) == 1
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

    /// Replaces the last error text (a text longer than [`LAST_ERROR_BYTES`] keeps its beginning
    /// and its end, with `…` in between); it is no longer last words.
    ///
    /// Lock-free and allocation-free: a panic hook may call it.
    pub fn set_last_error(&self, text: &str) {
        self.last_words.store(0, Ordering::Relaxed);
        let mut bytes = [0u8; LAST_ERROR_BYTES];
        let end = cut_middle(text, &mut bytes);
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

    /// Records `text` as the worker's last words: its last error, marked as the reason it is
    /// about to exit (for [`WorkerMetrics::take_last_words`]). Lock-free and allocation-free: a
    /// panic hook may call it.
    pub fn set_last_words(&self, text: &str) {
        self.set_last_error(text);
        // SYNC POINT: the text is visible before the mark (pairs with the Acquire swap in
        // `take_last_words`).
        self.last_words.store(1, Ordering::Release);
    }

    /// The worker's last words, if it wrote any since the last take (called by the pool once the
    /// worker is dead; the mark is cleared, the text stays as its last error). Bounded whatever
    /// the segment holds: the text is read as [`WorkerMetrics::snapshot`] reads it (length capped,
    /// invalid UTF-8 replaced, retries bounded; an empty text is `None`).
    pub fn take_last_words(&self) -> Option<String> {
        // SYNC POINT: pairs with the Release store in `set_last_words`.
        if self.last_words.swap(0, Ordering::Acquire) != 1 {
            return None;
        }
        Some(self.snapshot().last_error).filter(|t| !t.is_empty())
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

/// Writes `text` into `out`, whole when it fits; otherwise its beginning, `…` and its end, each
/// part cut at a character boundary, so that both what went wrong (first) and where (a panic's
/// location, last) survive. Returns the bytes written. Allocation-free.
fn cut_middle(text: &str, out: &mut [u8]) -> usize {
    const ELLIPSIS: &str = "…";
    if text.len() <= out.len() {
        out[..text.len()].copy_from_slice(text.as_bytes());
        return text.len();
    }
    if out.len() < ELLIPSIS.len() {
        return 0;
    }
    let room = out.len() - ELLIPSIS.len();
    let mut head = room / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - (room - room / 2);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    let mut at = 0;
    for part in [&text.as_bytes()[..head], ELLIPSIS.as_bytes(), &text.as_bytes()[tail..]] {
        out[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    at
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

    /// Records that the pool closed (main pid 0): a monitor no longer lists it, though a process may
    /// still hold the segment.
    pub fn mark_closed(&self) {
        self.main_pid.store(0, Ordering::Relaxed);
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
    fn long_and_multibyte_errors_are_cut_in_the_middle_on_character_boundaries() {
        let m = WorkerMetrics::default();
        let text = format!("{}{}", "é".repeat(200), " (panicked at src/lib.rs:12:5)"); // 430 bytes
        m.set_last_error(&text);
        let got = m.snapshot().last_error;
        assert!(got.len() <= LAST_ERROR_BYTES && got.len() >= LAST_ERROR_BYTES - 2, "{}", got.len());
        assert!(got.starts_with("éé") && got.ends_with(" (panicked at src/lib.rs:12:5)"), "{got}");
        assert_eq!(got.matches('…').count(), 1, "{got}");
        assert!(got.chars().all(|c| c == 'é' || c == '…' || " (panicked at src/lib.rs:12:5)".contains(c)));
        m.set_last_error("short");
        assert_eq!(m.snapshot().last_error, "short");
        let mut out = [0u8; 16];
        let n = cut_middle("panic: a long story (at x.rs:9)", &mut out);
        assert_eq!(std::str::from_utf8(&out[..n]).unwrap(), "panic:…x.rs:9)");
        let mut tiny = [0u8; 2];
        assert_eq!(cut_middle("abc", &mut tiny), 0, "no room for the ellipsis: nothing");
    }

    #[test]
    fn last_words_are_taken_once_and_an_ordinary_error_is_none() {
        let m = WorkerMetrics::default();
        assert_eq!(m.take_last_words(), None);
        m.set_last_error("ValueError: reported, not fatal");
        assert_eq!(m.take_last_words(), None);
        m.set_last_words("panic: boom (panicked at src/lib.rs:3:5)");
        assert_eq!(m.take_last_words().as_deref(), Some("panic: boom (panicked at src/lib.rs:3:5)"));
        assert_eq!(m.take_last_words(), None, "taken once");
        assert_eq!(m.snapshot().last_error, "panic: boom (panicked at src/lib.rs:3:5)", "stays the last error");
        m.set_last_words("panic: again");
        m.set_last_error("KeyError: later");
        assert_eq!(m.take_last_words(), None, "a later ordinary error is not last words");
    }

    #[test]
    fn closing_reads_only_as_the_worker_writes_it_and_leaves_the_size_alone() {
        let m = WorkerMetrics::default();
        assert!(!m.is_closing());
        m.set_closing();
        assert!(m.is_closing());
        m.closing.store(7, Ordering::Relaxed); // garbage another process wrote
        assert!(!m.is_closing());
        assert_eq!(WorkerMetrics::MEM_SIZE, 384, "the segment layout of earlier versions");
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
