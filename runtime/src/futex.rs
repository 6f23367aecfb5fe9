//! The futex system call behind a trait, so the wake-up protocol can be model-checked with a
//! process-local implementation and run for real with [`SharedFutex`].
//!
//! [`SharedFutex`] uses `FUTEX_WAIT` / `FUTEX_WAKE` *without* `FUTEX_PRIVATE_FLAG`: the word lives
//! in a `MAP_SHARED` memfd mapping, so a private futex would key on the virtual address and never
//! meet its peer in another process (futex(2), "FUTEX_PRIVATE_FLAG").
//!
//! ```
//! use ringenv_runtime::futex::{Futex, SharedFutex};
//! use std::sync::atomic::AtomicU32;
//! use std::time::Duration;
//! let word = AtomicU32::new(1);
//! // The word is not 0, so the wait returns at once instead of sleeping.
//! SharedFutex::wait(&word, 0, Duration::from_millis(100));
//! assert_eq!(SharedFutex::wake(&word, 1), 0); // nobody was asleep
//! ```

use rustix::thread::futex;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleep on a 32-bit word until woken, and wake sleepers.
pub trait Futex {
    /// Sleeps while `*word == expected`, for at most `timeout`. Returns on a wake, on a changed
    /// word, on a signal or at the timeout; callers re-check their condition in every case.
    fn wait(word: &AtomicU32, expected: u32, timeout: Duration);
    /// Wakes up to `count` sleepers of `word`; returns how many were woken.
    fn wake(word: &AtomicU32, count: u32) -> usize;
}

/// The real futex, shared between processes (no `FUTEX_PRIVATE_FLAG`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SharedFutex;

impl Futex for SharedFutex {
    fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
        let ts = rustix::time::Timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        // EAGAIN (the word changed), EINTR and ETIMEDOUT all mean "re-check": ignored on purpose.
        let _ = futex::wait(word, futex::Flags::empty(), expected, Some(&ts));
    }

    fn wake(word: &AtomicU32, count: u32) -> usize {
        futex::wake(word, futex::Flags::empty(), count).unwrap_or(0)
    }
}
