//! What a pool does when a worker dies: raise, or restart the worker, up to a crash-loop limit.
//!
//! Under [`FailurePolicy::Restart`] the pool starts a new worker for the dead one's envs, resets
//! those envs, and reports the command they were running as truncated (a step) or re-runs it (a
//! reset); the run goes on. More than `max_failures` deaths within `window` is a crash loop: the
//! pool stops with [`crate::Failure::CrashLoop`].
//!
//! ```
//! use ringenv_runtime::{CrashLoopGuard, RestartPolicy};
//! use std::time::{Duration, Instant};
//! let mut guard = CrashLoopGuard::new(RestartPolicy { max_failures: 2, window: Duration::from_secs(60) });
//! let t = Instant::now();
//! assert!(guard.allow(t));
//! assert!(guard.allow(t + Duration::from_secs(1)));
//! assert!(!guard.allow(t + Duration::from_secs(2)));   // a third death within the window
//! assert!(guard.allow(t + Duration::from_secs(120)));  // old deaths have left the window
//! ```

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How many worker deaths a pool absorbs by restarting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Deaths allowed within `window` (over all workers); one more is a crash loop.
    pub max_failures: u32,
    /// The sliding window, in seconds.
    pub window: Duration,
}

impl Default for RestartPolicy {
    /// 3 deaths per 60 s: enough for rare crashes of a long run, small enough that an env that
    /// dies at every step stops within seconds.
    fn default() -> Self {
        RestartPolicy { max_failures: 3, window: Duration::from_secs(60) }
    }
}

/// What a pool does when a worker dies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Stop every worker and return [`crate::Failure::WorkerDied`] (the default).
    #[default]
    Raise,
    /// Restart the worker, within the policy's crash-loop limit.
    Restart(RestartPolicy),
}

/// Counts deaths in a sliding window.
#[derive(Clone, Debug)]
pub struct CrashLoopGuard {
    policy: RestartPolicy,
    deaths: VecDeque<Instant>,
}

impl CrashLoopGuard {
    /// A guard with no deaths recorded.
    pub fn new(policy: RestartPolicy) -> CrashLoopGuard {
        CrashLoopGuard { policy, deaths: VecDeque::new() }
    }

    /// Records a death at `now`; whether a restart is still allowed.
    pub fn allow(&mut self, now: Instant) -> bool {
        while self.deaths.front().is_some_and(|&t| now.duration_since(t) > self.policy.window) {
            self.deaths.pop_front();
        }
        self.deaths.push_back(now);
        self.deaths.len() <= self.policy.max_failures as usize
    }

    /// Deaths recorded within the window.
    pub fn recent(&self) -> usize {
        self.deaths.len()
    }

    /// The policy.
    pub fn policy(&self) -> RestartPolicy {
        self.policy
    }
}
