//! A worker process's side of a pool: attach the inherited segment, take the commands meant for
//! this worker, publish completions, talk on the control socket.
//!
//! The worker waits for commands with the main process's spin-then-sleep settings from the
//! segment header ([`crate::Spinner`]).
//!
//! A worker lives exactly as long as the main *process*: [`WorkerEndpoint::connect`] opens a
//! pidfd of the main process (checking it is still the parent) and a watcher thread `SIGKILL`s
//! the worker's process group when it ends, or when the control socket hangs up (a main process
//! that `execve`s keeps its pid) unless the worker has taken its `Close`. Without the watcher, a
//! sleeping worker checks its parent every 100 ms.
//!
//! ```no_run
//! use ringenv_runtime::{CommandKind, EndpointArgs, WorkerEndpoint};
//! let args = EndpointArgs { segment_fd: 3, control_fd: 4, worker: 0, parent_pid: 1234 };
//! // SAFETY: the supervisor handed these descriptors to this process.
//! let mut endpoint = unsafe { WorkerEndpoint::connect(&args) }.unwrap();
//! let _init = endpoint.recv_init().unwrap();
//! endpoint.send_ready().unwrap();
//! loop {
//!     let command = endpoint.next_command();
//!     if command.kind() == Ok(CommandKind::Close) { break; }
//!     endpoint.complete(command.seq, Ok(None)).unwrap();
//! }
//! ```

use crate::{
    Command, Completion, Consumer, ControlChannel, ControlError, ControlMessage, RemoteError, Ring, Segment,
    SegmentError, SlotView, Spinner,
};
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, Signal};
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a worker waits for a command before it counts its pool as idle; and, where no watcher
/// thread watches the main process, how often a sleeping worker checks that its parent is alive.
const PARENT_CHECK: Duration = Duration::from_millis(100);

/// How long an idle worker sleeps between looks at its command ring while the watcher thread
/// watches the main process. Only a safety net: a command wakes the worker at once (futex), and
/// the watcher ends it when the main process ends. Ten wake-ups a second cost an idle worker
/// ~0.075% of a core on a 2-core machine (`benches/idle_cpu.py`) and keep its CPU out of deep idle
/// states for nothing.
const IDLE_RECHECK: Duration = Duration::from_secs(1);

/// What the supervisor appends to a worker's command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointArgs {
    /// `--segment-fd`: the inherited segment descriptor.
    pub segment_fd: RawFd,
    /// `--control-fd`: the inherited control socket.
    pub control_fd: RawFd,
    /// `--worker`: this worker's index.
    pub worker: usize,
    /// `--parent-pid`: the main process.
    pub parent_pid: u32,
}

/// Why a worker could not join its pool.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// A descriptor given on the command line is not open in this process: names it.
    #[error("{0} descriptor {1} is not open in the worker")]
    BadFd(&'static str, RawFd),
    /// The segment was refused (its header does not match this build).
    #[error("{0}")]
    Segment(#[source] SegmentError),
    /// The worker index is not in the segment's layout.
    #[error("worker index {worker} out of range: the segment has {num_workers} workers")]
    WorkerIndex {
        /// The index given.
        worker: usize,
        /// Workers in the layout.
        num_workers: usize,
    },
    /// Another process already consumes this worker's command ring.
    #[error("worker {0}'s command ring already has a consumer")]
    AlreadyClaimed(usize),
    /// The main process (`--parent-pid`) is gone, or is not this process's parent.
    #[error("the main process (pid {0}) is gone or is not this worker's parent")]
    ParentGone(u32),
}

/// A connected worker.
pub struct WorkerEndpoint {
    segment: Segment,
    worker: usize,
    commands: Consumer<Command>,
    completions: Ring<Completion>,
    control: ControlChannel,
    parent_pid: u32,
    /// Whether the watcher thread still watches the main process (else the 100 ms check runs).
    watched: Arc<AtomicBool>,
    /// Set once this worker takes its `Close` command: the watcher then lets the control
    /// socket's hang-up pass.
    closing: Arc<AtomicBool>,
    /// The learned spin state of the command waits.
    spinner: Spinner,
    /// When the worker started waiting for its current command.
    wait_started: Instant,
    /// When the current command arrived, and whether it steps or resets the envs (for metrics).
    received: Option<(Instant, bool)>,
}

fn owned(what: &'static str, fd: RawFd) -> Result<OwnedFd, ConnectError> {
    // A negative number is refused before it reaches `borrow_raw`, which asserts that it is not -1.
    if fd < 0 {
        return Err(ConnectError::BadFd(what, fd));
    }
    // SAFETY: only probes the (non-negative) descriptor number; nothing is taken over yet.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    if rustix::io::fcntl_getfd(borrowed).is_err() {
        return Err(ConnectError::BadFd(what, fd));
    }
    // SAFETY: the descriptor is open (checked above) and, per `connect`'s contract, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl WorkerEndpoint {
    /// Takes over the descriptors in `args` and attaches the segment. When the segment is
    /// refused, the error is also sent to the main process on the control socket, so it can
    /// report it with the worker's index.
    ///
    /// # Safety
    /// `args.segment_fd` and `args.control_fd` must be descriptors this process owns and uses
    /// nowhere else (they were inherited from the supervisor for this purpose).
    ///
    /// Also starts the watcher of the main process (see `endpoint.rs`): from then on,
    /// this process and its process group are killed when the main process ends.
    ///
    /// # Errors
    /// [`ConnectError`] naming what was wrong.
    pub unsafe fn connect(args: &EndpointArgs) -> Result<WorkerEndpoint, ConnectError> {
        let control_fd = owned("control", args.control_fd)?;
        let segment_fd = owned("segment", args.segment_fd)?;
        let closing = Arc::new(AtomicBool::new(false));
        let watched = watch_parent(args.parent_pid, control_fd.as_fd(), Arc::clone(&closing))?;
        let mut control = ControlChannel::new(UnixStream::from(control_fd));
        let report = |control: &mut ControlChannel, e: ConnectError| {
            let kind = "SegmentError".to_string();
            let _ = control.send(&ControlMessage::Error(RemoteError {
                kind,
                message: e.to_string(),
                ..Default::default()
            }));
            e
        };
        let segment = match Segment::attach(segment_fd) {
            Ok(s) => s,
            Err(e) => return Err(report(&mut control, ConnectError::Segment(e))),
        };
        let num_workers = segment.layout().num_workers;
        if args.worker >= num_workers {
            return Err(report(&mut control, ConnectError::WorkerIndex { worker: args.worker, num_workers }));
        }
        let Some(commands) = segment.command_ring(args.worker).acquire_consumer() else {
            return Err(report(&mut control, ConnectError::AlreadyClaimed(args.worker)));
        };
        let completions = segment.completion_ring(args.worker);
        segment.worker_metrics(args.worker).set_pid(std::process::id());
        let spinner = Spinner::new(segment.spin_settings());
        Ok(WorkerEndpoint {
            segment,
            worker: args.worker,
            commands,
            completions,
            control,
            parent_pid: args.parent_pid,
            watched,
            closing,
            spinner,
            wait_started: Instant::now(),
            received: None,
        })
    }

    /// This worker's index.
    pub fn worker(&self) -> usize {
        self.worker
    }
    /// The env ids this worker steps (rows of every batch array).
    pub fn env_ids(&self) -> Range<usize> {
        self.segment.layout().worker_envs(self.worker)
    }
    /// The segment.
    pub fn segment(&self) -> &Segment {
        &self.segment
    }
    /// A view of data slot `slot`; write only the rows of [`WorkerEndpoint::env_ids`].
    pub fn slot(&mut self, slot: usize) -> SlotView<'_> {
        self.segment.slot_mut(slot)
    }
    /// The learned spin state of this worker's command waits (it follows the wait settings the
    /// main process recorded in the segment header).
    pub fn spinner(&self) -> &Spinner {
        &self.spinner
    }
    /// The control channel.
    pub fn control(&mut self) -> &mut ControlChannel {
        &mut self.control
    }

    /// Receives the init payload (the first message from the main process).
    ///
    /// # Errors
    /// [`ControlError`] when the socket closes or the first message is not `Init`.
    pub fn recv_init(&mut self) -> Result<Vec<u8>, ControlError> {
        match self.control.recv(None)? {
            ControlMessage::Init(payload) => Ok(payload),
            other => Err(ControlError::Protocol(format!("expected Init, got {other:?}"))),
        }
    }

    /// Tells the main process the envs are built.
    ///
    /// # Errors
    /// [`ControlError::Closed`] when the main process is gone.
    pub fn send_ready(&mut self) -> Result<(), ControlError> {
        self.control.send(&ControlMessage::Ready)
    }

    /// Reports a start-up error (building the envs failed).
    ///
    /// # Errors
    /// [`ControlError::Closed`] when the main process is gone.
    pub fn send_startup_error(&mut self, error: RemoteError) -> Result<(), ControlError> {
        self.control.send(&ControlMessage::Error(error))
    }

    /// Waits for the next command (spin, then futex sleep). Ends the process (and its process
    /// group) if the main process died.
    pub fn next_command(&mut self) -> Command {
        let mut waited = false;
        loop {
            if let Some(c) = self.commands.pop() {
                if c.kind() == Ok(crate::CommandKind::Close) {
                    self.closing.store(true, Ordering::SeqCst);
                }
                let steps_envs = matches!(c.kind(), Ok(crate::CommandKind::Step | crate::CommandKind::Reset));
                self.received = Some((Instant::now(), steps_envs));
                return c;
            }
            let ring = self.commands.ring();
            let wakeup = self.segment.command_wakeup(self.worker).expect("connect checked the worker index");
            // Here again: the last wait timed out with no command (it returns only when one is
            // ready), so the pool is idle (and the spinner, having learned that wait, sleeps at once).
            let idle = waited;
            waited = true;
            let timeout = if idle && self.watched.load(Ordering::Relaxed) { IDLE_RECHECK } else { PARENT_CHECK };
            let ready = self.spinner.wait(wakeup, || ring.has_ready(), timeout);
            if !ready && !self.parent_alive() {
                end_worker();
            }
        }
    }

    /// Receives the payload message that accompanies a command flagged `has_message`.
    ///
    /// # Errors
    /// [`ControlError`] when the socket closes or another message arrives.
    pub fn recv_payload(&mut self) -> Result<Vec<u8>, ControlError> {
        match self.control.recv(None)? {
            ControlMessage::Payload(p) => Ok(p),
            other => Err(ControlError::Protocol(format!("expected Payload, got {other:?}"))),
        }
    }

    /// Publishes the completion of command `seq`: `Ok(None)` plain, `Ok(Some(bytes))` with a
    /// payload (for example non-empty infos), `Err(e)` a failure. The results must already be
    /// in the slot. A payload that fits this worker's info arena goes there (no socket message);
    /// a larger one, and an error, follow on the control socket. Wakes the main process only if
    /// it sleeps.
    ///
    /// # Errors
    /// [`ControlError::Closed`] when the main process is gone.
    pub fn complete(&mut self, seq: u64, result: Result<Option<Vec<u8>>, RemoteError>) -> Result<(), ControlError> {
        let worker = self.worker as u32;
        let (completion, message) = match result {
            Ok(None) => (Completion::new(worker, seq, false, false), None),
            // The payload (infos) goes into this worker's info arena when it fits; the Release
            // push of the completion below publishes it.
            Ok(Some(p)) if self.segment.info_arena(self.worker).write(seq, &p) => {
                (Completion::in_arena(worker, seq), None)
            }
            Ok(Some(p)) => (Completion::new(worker, seq, false, true), Some(ControlMessage::Payload(p))),
            Err(e) => (Completion::new(worker, seq, true, true), Some(ControlMessage::Error(e))),
        };
        if let Some((at, steps_envs)) = self.received.take() {
            let envs = if steps_envs { self.env_ids().len() as u64 } else { 0 };
            let busy = at.elapsed().as_nanos() as u64;
            let wait = at.saturating_duration_since(self.wait_started).as_nanos() as u64;
            let metrics = self.segment.worker_metrics(self.worker);
            metrics.record_command(envs, busy, wait);
            if let Some(ControlMessage::Error(e)) = &message {
                metrics.set_last_error(&format!("{}: {}", e.kind, e.message));
            }
        }
        self.wait_started = Instant::now();
        let mut c = completion;
        // Each worker has at most one completion outstanding in its own ring, so it is never full;
        // yield defensively all the same.
        while let Err(crate::PushError::Full(back)) = self.completions.push(c) {
            c = back;
            std::thread::yield_now();
        }
        self.segment.completion_wakeup().notify();
        if let Some(m) = message {
            self.control.send(&m)?;
        }
        Ok(())
    }

    fn parent_alive(&self) -> bool {
        rustix::process::getppid().map(|p| p.as_raw_nonzero().get() as u32) == Some(self.parent_pid)
    }
}

/// Starts the watcher thread of the module docs on a pidfd of `parent` and on `control`; returns a
/// flag that holds while it watches the pidfd (else `next_command` checks the parent itself).
/// `getppid` is checked after `pidfd_open`: an orphan's parent never changes back, so a pid reused
/// by then cannot be mistaken for the main process.
fn watch_parent(
    parent: u32,
    control: BorrowedFd<'_>,
    closing: Arc<AtomicBool>,
) -> Result<Arc<AtomicBool>, ConnectError> {
    let gone = || ConnectError::ParentGone(parent);
    let pid = i32::try_from(parent).ok().and_then(Pid::from_raw).ok_or_else(gone)?;
    let pidfd = match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => Some(fd),
        Err(Errno::SRCH) => return Err(gone()),
        // No pidfds here (an old kernel, no descriptor left): the 100 ms check of `next_command`.
        Err(_) => None,
    };
    if rustix::process::getppid() != Some(pid) {
        return Err(gone());
    }
    let watched = Arc::new(AtomicBool::new(false));
    if let Some(pidfd) = pidfd {
        let flag = Arc::clone(&watched);
        // The watcher's own descriptor of the control socket (the endpoint owns the other): the
        // hang-up is the socket's, whichever descriptor polls it. Without one, the pidfd alone.
        let control = rustix::io::fcntl_dupfd_cloexec(control, 3).ok();
        let watcher = move || {
            let hang_up = PollFlags::HUP | PollFlags::RDHUP | PollFlags::ERR | PollFlags::NVAL;
            let mut watch_control = control.is_some();
            loop {
                let mut fds = vec![PollFd::new(&pidfd, PollFlags::IN)];
                if let (true, Some(control)) = (watch_control, &control) {
                    fds.push(PollFd::new(control, PollFlags::RDHUP));
                }
                match rustix::event::poll(&mut fds, None) {
                    Ok(n) if n > 0 => {
                        if !fds[0].revents().is_empty() {
                            break; // the main process ended
                        }
                        if fds.get(1).is_some_and(|fd| fd.revents().intersects(hang_up)) {
                            if !closing.load(Ordering::SeqCst) {
                                break; // the main process's end closed, no Close taken: an exec
                            }
                            watch_control = false; // closing: the pidfd alone from here
                        }
                    }
                    Ok(_) | Err(Errno::INTR) => continue,
                    // The pidfd cannot be polled: leave it to the fallback check.
                    Err(_) => {
                        flag.store(false, Ordering::Relaxed);
                        return;
                    }
                }
            }
            end_worker();
        };
        // Set before the thread starts, so that a poll failure's `false` cannot be overwritten.
        watched.store(true, Ordering::Relaxed);
        let thread = std::thread::Builder::new().name("ringenv-parent-watch".into()).stack_size(64 * 1024);
        if thread.spawn(watcher).is_err() {
            // No thread: the fallback check.
            watched.store(false, Ordering::Relaxed);
        }
    }
    Ok(watched)
}

/// Ends this worker because the main process is gone: `SIGKILL` to its process group when it
/// leads one (as the supervisor starts it), so the helpers its envs started end too; else to
/// itself. Nobody waits for the status: the main process is gone.
fn end_worker() -> ! {
    let me = rustix::process::getpid();
    if rustix::process::getpgrp() == me {
        let _ = rustix::process::kill_current_process_group(Signal::KILL);
    }
    let _ = rustix::process::kill_process(me, Signal::KILL);
    // Unreachable in practice (SIGKILL cannot be caught); exit all the same.
    std::process::exit(0)
}
