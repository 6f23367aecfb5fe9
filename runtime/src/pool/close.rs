//! Closing a pool gracefully: every worker is told to close its envs and exit
//! ([`Pool::request_close`]), the caller waits for them in slices ([`Pool::await_close`]), between
//! which it can run its own work (signal handlers), and [`Pool::close`] kills whoever is left.
//!
//! With a timeout the workers get that long from the request. With none, a close waits as long as
//! the envs' own `close` takes, except for workers that never took their `Close` within
//! [`CLOSE_TAKEN`]: those are killed. A close slower than [`CLOSE_PATIENCE`] says so once
//! ([`CloseProgress::Slow`]).
//!
//! ```no_run
//! use ringenv_runtime::{CloseProgress, Pool};
//! use std::time::Duration;
//! fn close(mut pool: Pool) {
//!     pool.request_close();
//!     loop {
//!         match pool.await_close(None, Duration::from_millis(100)) {
//!             CloseProgress::Exited => break,
//!             CloseProgress::Waiting => {} // run signal handlers here
//!             CloseProgress::Slow(notice) => eprintln!("{notice}"),
//!             CloseProgress::GiveUp(notice) => {
//!                 eprintln!("{notice}");
//!                 break;
//!             }
//!         }
//!     }
//!     pool.close(Duration::ZERO); // kills the workers still running
//! }
//! ```

use crate::pool::{Pool, PoolState};
use crate::supervisor::await_all;
use crate::EnvIds;
use std::time::{Duration, Instant};

/// How long a close with no timeout waits for the workers' envs to close before it says it is
/// still waiting ([`CloseProgress::Slow`]; it goes on waiting).
pub const CLOSE_PATIENCE: Duration = Duration::from_secs(10);

/// How long a close with no timeout gives a worker to take its `Close` command: one that has not
/// by then is not closing its envs and is given up ([`CloseProgress::GiveUp`]).
pub const CLOSE_TAKEN: Duration = Duration::from_secs(1);

/// What [`Pool::await_close`] found.
#[derive(Clone, Debug, PartialEq)]
pub enum CloseProgress {
    /// Every worker exited (or there was nothing to wait for: not closing, or a `fork` child's copy).
    Exited,
    /// Workers are still closing their envs: wait again.
    Waiting,
    /// Workers have been closing their envs for [`CLOSE_PATIENCE`] (said once): wait again.
    Slow(CloseNotice),
    /// Workers that will not exit in time: [`Pool::close`] kills them.
    GiveUp(CloseNotice),
}

/// Why a close reports on workers still running.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CloseReason {
    /// The close's timeout, in seconds, passed.
    Timeout(f64),
    /// They did not take their `Close` command within [`CLOSE_TAKEN`].
    NotTaken,
    /// They have been closing their envs for [`CLOSE_PATIENCE`].
    Slow,
}

/// Workers still running during a close, and why that is reported; its `Display` is the warning a
/// caller shows.
#[derive(Clone, Debug, PartialEq)]
pub struct CloseNotice {
    /// Why.
    pub reason: CloseReason,
    /// The workers: `(index, pid, env ids)`.
    pub workers: Vec<(usize, u32, std::ops::Range<usize>)>,
}

impl std::fmt::Display for CloseNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // "worker 0 (pid 7, envs [0, 1])", or "workers 0 (pid 7, envs [0, 1]) and 1 (...)".
        let each: Vec<String> =
            self.workers.iter().map(|(w, pid, envs)| format!("{w} (pid {pid}, envs {})", EnvIds(envs))).collect();
        let names = match each.split_last() {
            Some((last, [])) => format!("worker {last}"),
            Some((last, rest)) => format!("workers {} and {last}", rest.join(", ")),
            None => String::new(),
        };
        let one = self.workers.len() == 1;
        let (its, was) = if one { ("its", "was") } else { ("their", "were") };
        match self.reason {
            CloseReason::Timeout(seconds) => write!(
                f,
                "close: {names} had not closed {its} envs within {seconds} s (close's timeout) and {was} killed, the \
                 envs' close() cut short; close() with no timeout waits as long as they take"
            ),
            CloseReason::NotTaken => write!(
                f,
                "close: {names} had not taken {its} Close command within {} s (a stopped process, one stuck in an \
                 env's step or reset, or an unusable command ring) and {was} killed",
                CLOSE_TAKEN.as_secs()
            ),
            CloseReason::Slow => write!(
                f,
                "close: {names} {} been closing {its} envs for {} s; close() waits as long as they take, as \
                 Gymnasium's does (Ctrl-C, close(timeout=...) or close(terminate=True) kill the workers instead)",
                if one { "has" } else { "have" },
                CLOSE_PATIENCE.as_secs()
            ),
        }
    }
}

impl Pool {
    /// Waits for the workers told to close ([`Pool::request_close`]) to exit: with a `timeout`
    /// (counted from the request), until it passes; with none, at most `slice`, then returns so
    /// that the caller can run its own work between slices.
    pub fn await_close(&mut self, timeout: Option<Duration>, slice: Duration) -> CloseProgress {
        let PoolState::Closing { since, warned } = self.state else { return CloseProgress::Exited };
        let wait = match timeout {
            Some(t) => (since + t).saturating_duration_since(Instant::now()),
            None => slice,
        };
        let running = await_all(&mut self.workers, wait);
        let reason = match timeout {
            _ if running.is_empty() => return CloseProgress::Exited,
            Some(t) => CloseReason::Timeout(t.as_secs_f64()),
            None if since.elapsed() >= CLOSE_TAKEN && !running.iter().any(|&w| self.is_closing(w)) => {
                CloseReason::NotTaken
            }
            None if !warned && since.elapsed() >= CLOSE_PATIENCE => {
                self.state = PoolState::Closing { since, warned: true };
                CloseReason::Slow
            }
            None => return CloseProgress::Waiting,
        };
        let layout = self.segment.layout();
        let workers = running.iter().map(|&w| (w, self.workers[w].pid(), layout.worker_envs(w))).collect();
        let notice = CloseNotice { reason, workers };
        if reason == CloseReason::Slow {
            CloseProgress::Slow(notice)
        } else {
            CloseProgress::GiveUp(notice)
        }
    }
}
