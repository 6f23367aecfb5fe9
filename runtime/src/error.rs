//! Errors of the pool, each carrying what a user needs to act: the worker, its env ids, the exit
//! status or signal, the remote traceback.
//!
//! ```
//! use ringenv_runtime::{ExitStatus, WorkerFailure};
//! let f = WorkerFailure { worker: 1, pid: 4242, env_ids: 4..8, status: ExitStatus::Signaled(9),
//!                         last_error: None };
//! assert_eq!(f.to_string(), "worker 1 (pid 4242, envs [4, 5, 6, 7]) died: killed by signal 9 (SIGKILL)");
//! ```
//!
//! Env ids are printed as the list of env indices ([`EnvIds`]), never as a range.

use crate::{ControlError, LayoutError, RemoteError, SegmentError};
use std::ops::Range;

/// Displays a worker's env ids (a contiguous block) as the list of its env indices: `[2, 3]`;
/// a long block as its first two and last ids, `[0, 1, ..., 99]`, with the count.
///
/// ```
/// use ringenv_runtime::EnvIds;
/// assert_eq!(EnvIds(&(2..4)).to_string(), "[2, 3]");
/// assert_eq!(EnvIds(&(0..100)).to_string(), "[0, 1, ..., 99] (100 envs)");
/// assert_eq!(EnvIds(&(5..5)).to_string(), "[]");
/// ```
pub struct EnvIds<'a>(pub &'a Range<usize>);

impl std::fmt::Display for EnvIds<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        /// Longest block printed in full.
        const FULL: usize = 8;
        let r = self.0;
        if r.len() <= FULL {
            let ids: Vec<String> = r.clone().map(|i| i.to_string()).collect();
            write!(f, "[{}]", ids.join(", "))
        } else {
            write!(f, "[{}, {}, ..., {}] ({} envs)", r.start, r.start + 1, r.end - 1, r.len())
        }
    }
}

/// How a worker process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited with this code.
    Exited(i32),
    /// It was killed by this signal number.
    Signaled(i32),
    /// It is gone but its status could not be collected.
    Unknown,
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => "?",
    }
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitStatus::Exited(code) => write!(f, "exited with code {code}"),
            ExitStatus::Signaled(s) => write!(f, "killed by signal {s} ({})", signal_name(*s)),
            ExitStatus::Unknown => write!(f, "exited with an unknown status"),
        }
    }
}

impl From<std::process::ExitStatus> for ExitStatus {
    fn from(s: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (s.code(), s.signal()) {
            (Some(code), _) => ExitStatus::Exited(code),
            (None, Some(signal)) => ExitStatus::Signaled(signal),
            _ => ExitStatus::Unknown,
        }
    }
}

/// A worker process that died; its `source()` is the last error it reported, if any.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("worker {worker} (pid {pid}, envs {}) died: {status}{}", EnvIds(.env_ids), last_error_text(.last_error))]
pub struct WorkerFailure {
    /// The worker index.
    pub worker: usize,
    /// Its process id.
    pub pid: u32,
    /// The env ids (indices) it stepped, a contiguous block.
    pub env_ids: Range<usize>,
    /// How it ended.
    pub status: ExitStatus,
    /// The last error it reported before dying, if any (boxed: errors stay small on the hot path).
    #[source]
    pub last_error: Option<Box<RemoteError>>,
}

fn last_error_text(e: &Option<Box<RemoteError>>) -> String {
    e.as_ref().map_or_else(String::new, |e| format!("; its last error: {e}"))
}

/// A call the pool's state machine refuses in its current state ([`crate::PoolState`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// A command was submitted (or the next slot moved) while commands are in flight.
    #[error("a command is already pending: wait for it first")]
    AlreadyPending,
    /// `wait` was called with no command of [`crate::Pool::submit`] pending.
    #[error("no command is pending: call submit (step_async / reset_async) first")]
    NoPendingCall,
    /// The pool is closed.
    #[error("the pool is closed")]
    Closed,
    /// The pool was used in a process other than the one that created it (a `fork` child, which
    /// holds a copy of the pool but not its workers).
    #[error(
        "this ringenv pool was created by process {creator_pid} and cannot be used in process {pid}, a fork of it \
         (os.fork, multiprocessing's 'fork' start method, a DataLoader worker): create a new env in this process \
         instead; closing or dropping the inherited one here only releases this process's copy"
    )]
    ForkedChild {
        /// The process that created the pool (and owns its workers).
        creator_pid: u32,
        /// The calling process.
        pid: u32,
    },
}

/// A worker failure that ended the pool (every worker is stopped; later calls return it again),
/// or a replacement worker that could not start. Its `source()` is the failure of a death (whose
/// own source is its last error), the control error, or the replacement's start-up error.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// A worker died ([`crate::FailurePolicy::Raise`]).
    #[error("{0}")]
    WorkerDied(#[source] WorkerFailure),
    /// Workers died more often than the restart policy allows.
    #[error("crash loop: {failures} worker deaths within {window_s} s exceed the restart policy; the last: {last}")]
    CrashLoop {
        /// Deaths within the window.
        failures: usize,
        /// The window, in seconds.
        window_s: f64,
        /// The last death.
        #[source]
        last: WorkerFailure,
    },
    /// Worker `failure.worker` left the shared segment in an impossible state (ring indices or
    /// stamps, a completion naming another worker or a command not in flight, ...): what was
    /// found. The worker was killed (its status is in `failure`).
    #[error(
        "worker {} (pid {}, envs {}) corrupted the shared memory segment ({what}); it was killed",
        .failure.worker, .failure.pid, EnvIds(&.failure.env_ids)
    )]
    Corrupt {
        /// What was found, with the values read.
        what: String,
        /// The worker, killed.
        #[source]
        failure: WorkerFailure,
    },
    /// A worker broke the control protocol.
    #[error("worker {worker}: {error}")]
    Control {
        /// The worker index.
        worker: usize,
        /// What went wrong.
        #[source]
        error: ControlError,
    },
    /// A dead worker's replacement did not start ([`crate::FailurePolicy::Restart`]).
    #[error("{0}")]
    Restart(#[source] Box<SpawnError>),
}

impl Failure {
    /// The copy a failed pool returns from every later call (`None`: a failure that cannot be
    /// copied, a control or restart error; later calls then return [`StateError::Closed`]).
    pub(crate) fn again(&self) -> Option<Failure> {
        Some(match self {
            Failure::WorkerDied(f) => Failure::WorkerDied(f.clone()),
            Failure::Corrupt { what, failure } => Failure::Corrupt { what: what.clone(), failure: failure.clone() },
            Failure::CrashLoop { failures, window_s, last } => {
                Failure::CrashLoop { failures: *failures, window_s: *window_s, last: last.clone() }
            }
            Failure::Control { .. } | Failure::Restart(_) => return None,
        })
    }

    /// The worker this failure names.
    pub fn worker(&self) -> Option<usize> {
        match self {
            Failure::WorkerDied(f) | Failure::CrashLoop { last: f, .. } | Failure::Corrupt { failure: f, .. } => {
                Some(f.worker)
            }
            Failure::Control { worker, .. } => Some(*worker),
            Failure::Restart(e) => e.worker(),
        }
    }
}

/// An error of [`crate::Pool::spawn`] (and of a worker's restart, [`Failure::Restart`]). Its
/// `source()` is the wrapped error, so the chain down to the system call or the remote exception
/// is never cut: the layout or segment error, the `io::Error` of a spawn, the worker's remote
/// error, the failure of a death, the control error.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// An argument is invalid: names it and why.
    #[error("{0}")]
    InvalidArgument(String),
    /// The requested layout is invalid.
    #[error("invalid pool layout: {0}")]
    Layout(#[source] LayoutError),
    /// The segment could not be created.
    #[error("cannot set up the shared memory segment: {0}")]
    Segment(#[source] SegmentError),
    /// A worker process could not be started.
    #[error("cannot start worker {worker}: {source}{}", limit_hint(.source))]
    Spawn {
        /// The worker index.
        worker: usize,
        /// Why.
        source: std::io::Error,
    },
    /// A worker reported an error while building its envs.
    #[error("worker {worker} (envs {}) failed to start: {error}", EnvIds(.env_ids))]
    Startup {
        /// The worker index.
        worker: usize,
        /// The env ids it was to step.
        env_ids: Range<usize>,
        /// The error it reported (boxed: errors stay small on the hot path).
        #[source]
        error: Box<RemoteError>,
    },
    /// A worker died before its handshake.
    #[error("{0}")]
    WorkerDied(#[source] WorkerFailure),
    /// A worker did not report ready within the start-up timeout ([`crate::PoolConfig::startup_timeout`]);
    /// the pool's workers are stopped.
    #[error(
        "worker {worker} (pid {pid}, envs {}) did not start within {seconds} s: {}; it runs {program}. Give it a \
         longer start-up timeout if building them is only slow; otherwise something in it hangs (a constructor \
         waiting for a lock, a pipe, a server)",
        EnvIds(.env_ids),
        if *.joined {
            "it was building its envs (their constructors or factories had not returned)"
        } else {
            "its program had not joined the pool yet (still starting: exec, loading, imports)"
        }
    )]
    StartupTimeout {
        /// The timeout in seconds.
        seconds: f64,
        /// The first worker found not ready.
        worker: usize,
        /// Its process id.
        pid: u32,
        /// Its env ids (indices).
        env_ids: Range<usize>,
        /// Whether it had joined the pool (connected to the segment: it was then building its
        /// envs from its init payload) or was still starting its program (exec, loading).
        joined: bool,
        /// The program it runs (path and arguments, as [`crate::WorkerCommand`] gives them;
        /// long arguments shortened).
        program: String,
    },
    /// A worker broke the control protocol during its handshake.
    #[error("worker {worker}: {error}")]
    Control {
        /// The worker index.
        worker: usize,
        /// What went wrong.
        #[source]
        error: ControlError,
    },
    /// The [`crate::PoolConfig::cancel`] hook cancelled the start-up of worker `worker`.
    #[error("the start-up of worker {worker} was cancelled")]
    Cancelled {
        /// The worker starting then.
        worker: usize,
        /// The start-up timeout, in seconds.
        seconds: f64,
    },
}

impl SpawnError {
    /// The worker this error names, if any.
    pub fn worker(&self) -> Option<usize> {
        match self {
            SpawnError::Spawn { worker, .. }
            | SpawnError::Startup { worker, .. }
            | SpawnError::StartupTimeout { worker, .. }
            | SpawnError::Control { worker, .. }
            | SpawnError::Cancelled { worker, .. } => Some(*worker),
            SpawnError::WorkerDied(f) => Some(f.worker),
            SpawnError::InvalidArgument(_) | SpawnError::Layout(_) | SpawnError::Segment(_) => None,
        }
    }
}

/// An error of [`crate::Pool::submit`], [`crate::Pool::send`] and the calls that prepare one
/// (`set_next_slot`, `complete_inline`): nothing was sent, unless the pool failed. Its `source()`
/// is the failure's own (see [`Failure`]).
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The pool's state does not allow the call.
    #[error(transparent)]
    State(#[from] StateError),
    /// An argument is invalid: names it and why (nothing was sent).
    #[error("{0}")]
    InvalidArgument(String),
    /// A worker failure ended the pool.
    #[error(transparent)]
    Failed(#[from] Failure),
}

/// An error of [`crate::Pool::wait`] and [`crate::Pool::recv`] (and of `step` / `reset`, which
/// submit then wait). Its `source()` is the failure's own (see [`Failure`]).
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// The pool's state does not allow the call.
    #[error(transparent)]
    State(#[from] StateError),
    /// An argument is invalid: names it and why.
    #[error("{0}")]
    InvalidArgument(String),
    /// The call did not finish within its timeout; the command stays pending and a later wait
    /// may still collect it.
    #[error("timed out after {seconds} s waiting for workers {waiting_for:?}")]
    Timeout {
        /// The timeout in seconds.
        seconds: f64,
        /// Workers that had not completed.
        waiting_for: Vec<usize>,
    },
    /// The caller's [`crate::PoolConfig::cancel`] hook ended the wait; the command stays pending
    /// and a later wait may still collect it.
    #[error("the wait was cancelled")]
    Cancelled,
    /// A worker failure ended the pool.
    #[error(transparent)]
    Failed(#[from] Failure),
}

impl From<SubmitError> for WaitError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::State(e) => WaitError::State(e),
            SubmitError::InvalidArgument(why) => WaitError::InvalidArgument(why),
            SubmitError::Failed(e) => WaitError::Failed(e),
        }
    }
}

/// What limit a failed worker start most likely hit, named for the user (empty when the error is
/// not one a limit causes): `EMFILE` is the open-file limit (`ulimit -n`; each worker takes a
/// few descriptors in this process), `EAGAIN` from `fork`/`clone` the per-user process limit
/// (`ulimit -u`) or memory (fork(2), ERRORS).
fn limit_hint(source: &std::io::Error) -> String {
    use rustix::process::{getrlimit, Resource};
    let limit = |resource| match getrlimit(resource).current {
        Some(n) => n.to_string(),
        None => "unlimited".to_string(),
    };
    match source.raw_os_error() {
        Some(code) if code == rustix::io::Errno::MFILE.raw_os_error() => {
            format!(
                " (this process's open-file limit, `ulimit -n`, is {}; each worker needs a few descriptors)",
                limit(Resource::Nofile)
            )
        }
        Some(code) if code == rustix::io::Errno::AGAIN.raw_os_error() => format!(
            " (the per-user process limit, `ulimit -u`, is {}; or the machine is out of memory or processes)",
            limit(Resource::Nproc)
        ),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    /// The chain of `e` from the top, as `Display` strings.
    fn chain(e: &(dyn Error + 'static)) -> Vec<String> {
        let mut links = vec![e.to_string()];
        let mut next = e.source();
        while let Some(cause) = next {
            links.push(cause.to_string());
            next = cause.source();
        }
        links
    }

    #[test]
    fn a_worker_start_that_hit_a_limit_names_the_limit_and_its_value() {
        let spawn = |code| SpawnError::Spawn { worker: 3, source: std::io::Error::from_raw_os_error(code) };
        let files = spawn(rustix::io::Errno::MFILE.raw_os_error()).to_string();
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        assert!(files.starts_with("cannot start worker 3: "), "{files}");
        assert!(files.contains("`ulimit -n`, is "), "{files}");
        assert!(files.contains(&limit.map_or("unlimited".into(), |n| n.to_string())), "{files}");
        assert!(spawn(rustix::io::Errno::AGAIN.raw_os_error()).to_string().contains("`ulimit -u`"));
        let other = spawn(rustix::io::Errno::NOENT.raw_os_error()).to_string();
        assert!(!other.contains("ulimit"), "{other}");
    }

    #[test]
    fn every_wrapping_error_returns_its_cause_from_source() {
        let io = || std::io::Error::from_raw_os_error(12);
        let segment = SpawnError::Segment(SegmentError::Os("mmap", io()));
        let links = chain(&segment);
        assert_eq!(links.len(), 3, "{links:?}");
        assert!(segment.source().unwrap().source().unwrap().downcast_ref::<std::io::Error>().is_some());

        let header = SegmentError::Header(crate::HeaderError::Layout(LayoutError::TooLarge));
        assert_eq!(chain(&SpawnError::Segment(header)).len(), 4);

        let spawn = SpawnError::Spawn { worker: 2, source: io() };
        assert_eq!(spawn.source().unwrap().downcast_ref::<std::io::Error>().unwrap().raw_os_error(), Some(12));
        assert_eq!(spawn.worker(), Some(2));

        let control = Failure::Control { worker: 1, error: ControlError::Io(io()) };
        assert_eq!(chain(&control).len(), 3);

        let remote = RemoteError { kind: "ValueError".into(), message: "bad".into(), ..Default::default() };
        let failure = WorkerFailure {
            worker: 0,
            pid: 1,
            env_ids: 0..2,
            status: ExitStatus::Signaled(9),
            last_error: Some(Box::new(remote.clone())),
        };
        let died = WaitError::Failed(Failure::WorkerDied(failure.clone()));
        assert_eq!(chain(&died).len(), 3);
        let corrupt = Failure::Corrupt { what: "ring".into(), failure: failure.clone() };
        assert!(chain(&corrupt)[2].contains("bad"));
        let crash = Failure::CrashLoop { failures: 3, window_s: 1.0, last: failure };
        assert_eq!(chain(&crash).len(), 3);
        let startup = SpawnError::Startup { worker: 0, env_ids: 0..1, error: Box::new(remote) };
        assert_eq!(chain(&startup).len(), 2);
        assert!(SpawnError::Layout(LayoutError::TooLarge).source().is_some());
        assert!(WaitError::State(StateError::Closed).source().is_none());
        let restart = Failure::Restart(Box::new(SpawnError::Spawn { worker: 1, source: io() }));
        assert_eq!(chain(&restart).len(), 3);
        assert_eq!(restart.worker(), Some(1));
    }
}
