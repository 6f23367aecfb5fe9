//! The futex system call behind a trait, so the wake-up protocol runs for real with
//! [`SharedFutex`] and is model-checked with the process-local [`LocalFutex`].
//!
//! [`SharedFutex`] uses `FUTEX_WAIT` / `FUTEX_WAKE` *without* `FUTEX_PRIVATE_FLAG`: the word lives
//! in a `MAP_SHARED` mapping, and a private futex would never meet its peer in another process.
//! [`LocalFutex`] keeps futex(2)'s contract with a mutex and condition variable from the crate's
//! `sync` module; under `cfg(loom)` timeouts are not modelled, so a lost wake-up is a deadlock loom
//! reports. [`DefaultFutex`] is what [`crate::Wakeup`] uses (`LocalFutex` under loom).
//!
//! Concurrency: any number of waiters and wakers, on any number of words.
//!
//! ```
//! use ringenv_runtime::{Futex, LocalFutex, SharedFutex};
//! use std::sync::atomic::AtomicU32;
//! use std::time::Duration;
//! let word = AtomicU32::new(1);
//! // The word is not 0, so the wait returns at once instead of sleeping.
//! SharedFutex::wait(&word, 0, Duration::from_millis(100));
//! assert_eq!(SharedFutex::wake(&word, 1), 0); // nobody was asleep
//! LocalFutex::wait(&word, 0, Duration::from_secs(100)); // same contract, in-process
//! assert_eq!(LocalFutex::wake(&word, 1), 0);
//! ```

use crate::sync::{AtomicU32, Condvar, Mutex, Ordering};
use std::collections::BTreeMap;
use std::time::Duration;

/// Sleep on a 32-bit word until woken, and wake sleepers.
pub trait Futex {
    /// Sleeps while `*word == expected`, for at most `timeout`. Returns on a wake, on a changed
    /// word, on a signal or at the timeout; callers re-check their condition in every case.
    fn wait(word: &AtomicU32, expected: u32, timeout: Duration);
    /// Wakes up to `count` sleepers of `word`; returns how many were woken.
    fn wake(word: &AtomicU32, count: u32) -> usize;
}

/// The futex [`crate::Wakeup`] uses: [`SharedFutex`], or [`LocalFutex`] under `cfg(loom)`.
#[cfg(not(loom))]
pub type DefaultFutex = SharedFutex;
/// The futex [`crate::Wakeup`] uses: [`SharedFutex`], or [`LocalFutex`] under `cfg(loom)`.
#[cfg(loom)]
pub type DefaultFutex = LocalFutex;

/// The real futex, shared between processes (no `FUTEX_PRIVATE_FLAG`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SharedFutex;

#[cfg(not(loom))]
impl Futex for SharedFutex {
    fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
        let ts = rustix::time::Timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        // EAGAIN (the word changed), EINTR and ETIMEDOUT all mean "re-check": ignored on purpose.
        let _ = rustix::thread::futex::wait(word, rustix::thread::futex::Flags::empty(), expected, Some(&ts));
    }

    fn wake(word: &AtomicU32, count: u32) -> usize {
        rustix::thread::futex::wake(word, rustix::thread::futex::Flags::empty(), count).unwrap_or(0)
    }
}

/// A futex for threads of one process (and for loom models): see the module docs.
///
/// A wake of `count >= 1` wakes every sleeper of the word and returns `min(count, sleepers)`;
/// ringenv has one sleeper per word and always wakes with `u32::MAX`, where the two agree.
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalFutex;

/// Per word with a sleeper (keyed by address): wakes addressed to it so far, and its sleepers.
#[derive(Debug, Default)]
struct Sleepers {
    wakes: u64,
    count: usize,
}

type Table = Mutex<BTreeMap<usize, Sleepers>>;

#[cfg(not(loom))]
fn table() -> (&'static Table, &'static Condvar) {
    static TABLE: Table = Mutex::new(BTreeMap::new());
    static WOKEN: Condvar = Condvar::new();
    (&TABLE, &WOKEN)
}

#[cfg(loom)]
fn table() -> (&'static Table, &'static Condvar) {
    // loom's lazy statics are created afresh for every explored execution.
    loom::lazy_static! {
        static ref TABLE: Table = Mutex::new(BTreeMap::new());
        static ref WOKEN: Condvar = Condvar::new();
    }
    (&TABLE, &WOKEN)
}

fn key(word: &AtomicU32) -> usize {
    word as *const AtomicU32 as usize
}

impl Futex for LocalFutex {
    fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
        let (table, woken) = table();
        let mut sleepers = table.lock().unwrap_or_else(|e| e.into_inner());
        // The check happens under the table lock, which a waker takes before waking: a wake
        // issued after the word changed either finds this sleeper enqueued or, if it came
        // first, made the word differ here.
        if word.load(Ordering::SeqCst) != expected {
            return;
        }
        let entry = sleepers.entry(key(word)).or_default();
        entry.count += 1;
        let seen = entry.wakes;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            // loom's `wait_timeout` ignores the duration (timeouts are not modelled).
            let (guard, result) = woken.wait_timeout(sleepers, left).unwrap_or_else(|e| e.into_inner());
            sleepers = guard;
            let wakes = sleepers.get(&key(word)).map_or(seen, |s| s.wakes);
            if wakes != seen || result.timed_out() {
                break;
            }
        }
        let entry = sleepers.get_mut(&key(word)).expect("a sleeper keeps its entry");
        entry.count -= 1;
        if entry.count == 0 {
            sleepers.remove(&key(word));
        }
    }

    fn wake(word: &AtomicU32, count: u32) -> usize {
        let (table, woken) = table();
        let mut sleepers = table.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = sleepers.get_mut(&key(word)) else { return 0 };
        if count == 0 {
            return 0;
        }
        entry.wakes += 1;
        let n = entry.count.min(count as usize);
        drop(sleepers);
        woken.notify_all();
        n
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    #[test]
    fn local_futex_sleeps_until_woken_and_only_by_its_own_word() {
        let (word, other) = (AtomicU32::new(0), AtomicU32::new(0));
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                LocalFutex::wait(&word, 0, Duration::from_secs(30));
                done.store(true, Ordering::SeqCst);
            });
            // Wait until the sleeper is enqueued, then wake another word: it must stay asleep.
            while table().0.lock().unwrap().get(&key(&word)).is_none() {
                std::thread::yield_now();
            }
            assert_eq!(LocalFutex::wake(&other, u32::MAX), 0);
            std::thread::sleep(Duration::from_millis(20));
            assert!(!done.load(Ordering::SeqCst), "woken by a wake of another word");
            assert_eq!(LocalFutex::wake(&word, u32::MAX), 1);
        });
        assert!(done.load(Ordering::SeqCst));
        assert!(table().0.lock().unwrap().get(&key(&word)).is_none(), "entry removed after the last sleeper");
    }

    #[test]
    fn local_futex_times_out_and_refuses_a_stale_value() {
        let word = AtomicU32::new(5);
        let t = Instant::now();
        LocalFutex::wait(&word, 4, Duration::from_secs(30));
        assert!(t.elapsed() < Duration::from_secs(5), "a stale expected value must not sleep");
        let t = Instant::now();
        LocalFutex::wait(&word, 5, Duration::from_millis(20));
        assert!(t.elapsed() >= Duration::from_millis(20));
    }
}
