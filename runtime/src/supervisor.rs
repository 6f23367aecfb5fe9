//! Starting, watching and stopping worker processes.
//!
//! Workers start with fork+exec (`std::process::Command` with a `pre_exec` hook that marks every
//! descriptor from 3 up close-on-exec, then clears it on exactly the segment and the child's end
//! of its control socket, and puts the child in the `SCHED_BATCH` scheduling class). Each worker
//! gets a `pidfd`, so death is detected without races on recycled pids.
//!
//! # Lifetimes
//! - **A worker dies with the main process, not with a thread of it.** `PR_SET_PDEATHSIG` fires
//!   when the forking *thread* exits, so instead each worker watches the main process through a
//!   pidfd ([`crate::WorkerEndpoint::connect`]) and kills its own process group when it ends.
//! - **A worker's helpers die with it.** Each worker leads its own process group (so Ctrl-C
//!   reaches only the main process); before the pool reaps a worker, on every path, it sends
//!   `SIGKILL` to the whole group (the unreaped pid keeps the group id from reuse). A helper that
//!   should outlive its worker must leave the group (`setsid`).
//!
//! The worker's command line is the program and arguments of a [`WorkerCommand`] followed by
//! `--segment-fd N --control-fd M --worker K --parent-pid P`.

use crate::{ControlChannel, ExitStatus};
use rustix::event::{PollFd, PollFlags};
use rustix::io::FdFlags;
use rustix::process::{Pid, PidfdFlags, Signal};
use std::ffi::OsString;
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The program a worker runs, with its arguments and extra environment variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerCommand {
    /// Path of the executable (`ringenv-worker`, a Python interpreter, a user's binary).
    pub program: PathBuf,
    /// Arguments before the ones the supervisor appends.
    pub args: Vec<OsString>,
    /// Environment variables set in the worker, on top of the parent's.
    pub env: Vec<(OsString, OsString)>,
}

impl WorkerCommand {
    /// Runs `program` with no extra arguments.
    pub fn new(program: impl Into<PathBuf>) -> WorkerCommand {
        WorkerCommand { program: program.into(), args: Vec::new(), env: Vec::new() }
    }
    /// Appends an argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> WorkerCommand {
        self.args.push(arg.into());
        self
    }
    /// Sets an environment variable in the worker.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> WorkerCommand {
        self.env.push((key.into(), value.into()));
        self
    }
}

/// A running worker process.
///
/// Dropping it only closes its descriptors (pidfd, control socket): it neither signals nor waits
/// for the process (std's `Child` does neither on drop), so a forked copy of a pool may drop it.
#[derive(Debug)]
pub struct WorkerProcess {
    /// The env ids it steps.
    pub env_ids: Range<usize>,
    /// The main process's end of its control socket.
    pub control: ControlChannel,
    child: Child,
    pidfd: OwnedFd,
    status: Option<ExitStatus>,
}

fn clear_cloexec(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    rustix::io::fcntl_setfd(fd, FdFlags::empty()).map_err(Into::into)
}

/// Marks every descriptor from 3 up close-on-exec (`close_range(2)` with `CLOSE_RANGE_CLOEXEC`,
/// Linux 5.11). Called between fork and exec, so it may only make async-signal-safe calls: on an
/// older kernel (`ENOSYS`) it does nothing rather than walk `/proc/self/fd` (which allocates);
/// the descriptors ringenv opens are close-on-exec anyway, only those a caller made inheritable
/// would cross.
fn cloexec_from_3() {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC closes nothing; it only sets a flag on the
    // descriptors of this (forked, single-threaded) child. A raw syscall: async-signal-safe.
    let _ = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
}

/// Puts the calling process in the `SCHED_BATCH` scheduling class (sched(7)); it keeps it
/// through exec, and the threads and processes it starts inherit it. Linux lets no
/// `SCHED_BATCH` task preempt the task running on its CPU as it wakes, only at the scheduler
/// tick (`check_preempt_wakeup_fair` in the kernel's `kernel/sched/fair.c`), so a worker woken
/// by a command takes an idle core or waits for the main process to sleep, instead of pushing
/// the main process off its core in the middle of a call (docs/WAKEUP.md). Called between fork
/// and exec: one system call, async-signal-safe. Where it is refused (a seccomp filter), the
/// worker runs as before.
fn batch_scheduling() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a system call on this process that only reads `param`, which outlives it.
    let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
}

/// `fd`, moved to a descriptor number of 3 or more (close-on-exec) when it is 0, 1 or 2: a
/// process started with its standard input (or output) closed gets those numbers back from
/// `memfd_create` and `socketpair`, and then a worker's `/dev/null` standard input would replace
/// its segment or control socket (fd 0), and this process's own writes to standard output or
/// error would land in them.
///
/// # Errors
/// The `io::Error` of `fcntl(F_DUPFD_CLOEXEC)`.
pub(crate) fn above_stdio(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?) // `fd` closes when dropped here
}

impl WorkerProcess {
    /// Starts worker `index` for `env_ids`, handing it `segment`.
    ///
    /// # Errors
    /// The `io::Error` of `socketpair`, `fork`/`exec` or `pidfd_open`.
    pub fn spawn(
        command: &WorkerCommand,
        segment: BorrowedFd<'_>,
        index: usize,
        env_ids: Range<usize>,
    ) -> std::io::Result<WorkerProcess> {
        let (ours, theirs) = UnixStream::pair()?;
        let ours = UnixStream::from(above_stdio(OwnedFd::from(ours))?);
        let theirs = UnixStream::from(above_stdio(OwnedFd::from(theirs))?);
        let parent = std::process::id();
        let (segment_fd, control_fd) = (segment.as_raw_fd(), theirs.as_raw_fd());
        let mut cmd = std::process::Command::new(&command.program);
        cmd.args(&command.args)
            .args(["--segment-fd", &segment_fd.to_string(), "--control-fd", &control_fd.to_string()])
            .args(["--worker", &index.to_string(), "--parent-pid", &parent.to_string()])
            .envs(command.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            // Its own process group: a Ctrl-C at the terminal interrupts the main process, which
            // then closes the pool, instead of killing every worker in the middle of a step.
            .process_group(0);
        // SAFETY: the hook runs in the forked child before exec and makes only async-signal-safe
        // system calls (close_range, sched_setscheduler, fcntl), allocating nothing on the
        // success path.
        unsafe {
            cmd.pre_exec(move || {
                cloexec_from_3();
                batch_scheduling();
                // SAFETY: both descriptors are open in the parent, so in this child too.
                clear_cloexec(BorrowedFd::borrow_raw(segment_fd))?;
                clear_cloexec(BorrowedFd::borrow_raw(control_fd))?;
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        drop(theirs);
        let pid = Pid::from_raw(child.id() as i32).expect("a child pid is positive");
        let pidfd = above_stdio(rustix::process::pidfd_open(pid, PidfdFlags::empty())?)?;
        Ok(WorkerProcess { env_ids, control: ControlChannel::new(ours), child, pidfd, status: None })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited (a non-blocking `poll` of its pidfd).
    pub fn has_exited(&self) -> bool {
        if self.status.is_some() {
            return true;
        }
        let mut fds = [PollFd::new(&self.pidfd, PollFlags::IN)];
        matches!(rustix::event::poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 })), Ok(n) if n > 0)
    }

    /// Collects the exit status, waiting up to `timeout` for the process to end. `None` if it is
    /// still running. A worker that has ended has its process group killed before it is reaped
    /// (see the [module docs](self)).
    pub fn try_status(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if self.status.is_none() {
            let mut fds = [PollFd::new(&self.pidfd, PollFlags::IN)];
            let ts =
                rustix::time::Timespec::try_from(timeout).unwrap_or(rustix::time::Timespec { tv_sec: 1, tv_nsec: 0 });
            if matches!(rustix::event::poll(&mut fds, Some(&ts)), Ok(n) if n > 0) {
                self.kill_group();
                if let Ok(Some(s)) = self.child.try_wait() {
                    self.status = Some(s.into());
                }
            }
        }
        self.status
    }

    /// Sends `SIGKILL` to the worker's process group, then to the worker through its pidfd (so
    /// never to a recycled pid), and reaps it.
    pub fn kill(&mut self) -> ExitStatus {
        if self.try_status(Duration::ZERO).is_none() {
            self.kill_group();
            let _ = rustix::process::pidfd_send_signal(self.pidfd.as_fd(), Signal::KILL);
            if let Ok(s) = self.child.wait() {
                self.status = Some(s.into());
            }
        }
        self.status.unwrap_or(ExitStatus::Unknown)
    }

    /// `SIGKILL` to every process of the worker's group (the worker and the helpers its envs
    /// started). Only while the worker is unreaped: its pid, the group's id, is not reusable then.
    fn kill_group(&self) {
        if self.status.is_none() {
            if let Some(pgid) = Pid::from_raw(self.child.id() as i32) {
                // ESRCH (the group is empty) is the expected outcome of a clean exit.
                let _ = rustix::process::kill_process_group(pgid, Signal::KILL);
            }
        }
    }
}

/// Waits up to `timeout` for every worker to exit by itself, killing none; the indices of those
/// still running then (empty: all have exited).
pub fn await_all(workers: &mut [WorkerProcess], timeout: Duration) -> Vec<usize> {
    let deadline = Instant::now() + timeout;
    let mut running = Vec::new();
    for (k, w) in workers.iter_mut().enumerate() {
        if w.try_status(deadline.saturating_duration_since(Instant::now())).is_none() {
            running.push(k);
        }
    }
    running
}

/// Waits up to `grace` for every worker to exit by itself ([`await_all`]), then kills and reaps
/// the rest.
pub fn stop_all(workers: &mut [WorkerProcess], grace: Duration) {
    for k in await_all(workers, grace) {
        workers[k].kill();
    }
}
