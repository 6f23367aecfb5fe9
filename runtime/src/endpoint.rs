//! A worker process's side of a pool: attach the inherited segment, take the commands meant for
//! this worker, publish completions, talk on the control socket.
//!
//! The worker waits for commands with the same spin-then-sleep protocol as the main process,
//! following the wait settings the main process recorded in the segment header (a
//! [`crate::Spinner`] learns how long to spin from the worker's own recent waits);
//! while asleep it wakes every 100 ms to check that its parent is alive (besides the kernel's
//! parent-death signal set by the supervisor), so an orphaned worker always exits.
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
use std::ops::Range;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// How often a sleeping worker checks that its parent is alive.
const PARENT_CHECK: Duration = Duration::from_millis(100);

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
#[derive(Debug)]
pub enum ConnectError {
    /// A descriptor given on the command line is not open in this process: names it.
    BadFd(&'static str, RawFd),
    /// The segment was refused (its header does not match this build).
    Segment(SegmentError),
    /// The worker index is not in the segment's layout.
    WorkerIndex {
        /// The index given.
        worker: usize,
        /// Workers in the layout.
        num_workers: usize,
    },
    /// Another process already consumes this worker's command ring.
    AlreadyClaimed(usize),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::BadFd(what, fd) => write!(f, "{what} descriptor {fd} is not open in the worker"),
            ConnectError::Segment(e) => write!(f, "{e}"),
            ConnectError::WorkerIndex { worker, num_workers } => {
                write!(f, "worker index {worker} out of range: the segment has {num_workers} workers")
            }
            ConnectError::AlreadyClaimed(w) => write!(f, "worker {w}'s command ring already has a consumer"),
        }
    }
}
impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::Segment(e) => Some(e),
            _ => None,
        }
    }
}

/// A connected worker.
pub struct WorkerEndpoint {
    segment: Segment,
    worker: usize,
    commands: Consumer<Command>,
    completions: Ring<Completion>,
    control: ControlChannel,
    parent_pid: u32,
    /// The learned spin state of the command waits.
    spinner: Spinner,
    /// When the worker started waiting for its current command.
    wait_started: Instant,
    /// When the current command arrived, and whether it steps or resets the envs (for metrics).
    received: Option<(Instant, bool)>,
}

fn owned(what: &'static str, fd: RawFd) -> Result<OwnedFd, ConnectError> {
    // SAFETY: only probes the descriptor number; nothing is taken over yet.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    if fd < 0 || rustix::io::fcntl_getfd(borrowed).is_err() {
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
    /// # Errors
    /// [`ConnectError`] naming what was wrong.
    pub unsafe fn connect(args: &EndpointArgs) -> Result<WorkerEndpoint, ConnectError> {
        let control_fd = owned("control", args.control_fd)?;
        let segment_fd = owned("segment", args.segment_fd)?;
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

    /// Waits for the next command (spin, then futex sleep). Exits the process with status 0 if
    /// the parent died.
    pub fn next_command(&mut self) -> Command {
        loop {
            if let Some(c) = self.commands.pop() {
                let steps_envs = matches!(c.kind(), Ok(crate::CommandKind::Step | crate::CommandKind::Reset));
                self.received = Some((Instant::now(), steps_envs));
                return c;
            }
            let ring = self.commands.ring();
            let wakeup = self.segment.command_wakeup(self.worker).expect("connect checked the worker index");
            if !self.spinner.wait(wakeup, || ring.has_ready(), PARENT_CHECK) && !self.parent_alive() {
                std::process::exit(0);
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
    /// in the slot. Wakes the main process only if it sleeps.
    ///
    /// # Errors
    /// [`ControlError::Closed`] when the main process is gone.
    pub fn complete(&mut self, seq: u64, result: Result<Option<Vec<u8>>, RemoteError>) -> Result<(), ControlError> {
        let (completion, message) = match result {
            Ok(None) => (Completion::new(self.worker as u32, seq, false, false), None),
            Ok(Some(p)) => (Completion::new(self.worker as u32, seq, false, true), Some(ControlMessage::Payload(p))),
            Err(e) => (Completion::new(self.worker as u32, seq, true, true), Some(ControlMessage::Error(e))),
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
