//! The main process's side of a pool: create the segment, start the workers, send commands,
//! collect completions, close.
//!
//! A command goes to every worker at once on data slot `s`; the next uses slot `s + 1 mod
//! depth`, so the arrays of the last result stay intact while the next command runs. At most one
//! command is pending ([`PoolState`]); a slow worker yields [`WaitError::Timeout`] with the
//! command still pending. A worker that dies either ends the pool ([`FailurePolicy::Raise`]) or
//! is restarted ([`FailurePolicy::Restart`]): its envs are reset and the command completes as a
//! reset for them ([`Outcome::restarted`]).
//!
//! A pool belongs to the process that created it: in a `fork` child every operation returns
//! [`StateError::ForkedChild`], and dropping the copy only releases the child's descriptors and
//! mapping ([`Pool::is_owner`]).
//!
//! Nothing a worker writes into the segment can hang or crash this side: every ring operation is
//! bounded and checked, every completion is validated, and an impossible state is a
//! [`Failure::Corrupt`] naming the worker, which is then killed and handled as a death.
//!
//! **Inline worker.** With [`PoolConfig::inline`], the layout's last worker is served by the
//! caller in this process: it takes the command with [`Pool::inline_command`], writes its rows
//! ([`Pool::batch_mut`]) and hands the result back with [`Pool::complete_inline`] before it waits.
//! It is never restarted. A layout of one worker with `inline` is a pool with no process at all
//! (what a Ray actor uses).
//!
//! Rust callers drive it like this (the worker binary comes from `ringenv-worker`):
//! ```no_run
//! use ringenv_runtime::{ArraySpec, DType, Layout, Pool, PoolConfig, WorkerCommand};
//! let layout = Layout::single(8, 2, 2, ArraySpec::new(DType::F32, &[4]),
//!                             ArraySpec::new(DType::I64, &[]), DType::F32).unwrap();
//! let init = br#"{"env_id": "CartPole-v1"}"#.to_vec();
//! let mut pool = Pool::spawn(PoolConfig::new(layout, WorkerCommand::new("ringenv-worker"), init)).unwrap();
//! pool.reset(&[Some(0); 8]).unwrap();
//! let out = pool.step(bytemuck::cast_slice(&[1i64; 8])).unwrap();
//! let batch = pool.batch(out.slot);
//! let obs: &[f32] = bytemuck::cast_slice(batch.rows(ringenv_runtime::Array::Obs(0), 0..8));
//! assert_eq!(obs.len(), 32);
//! ```

use crate::restart::{CrashLoopGuard, FailurePolicy};
use crate::supervisor::{stop_all, WorkerProcess};
use crate::{
    Array, Command, CommandKind, Completion, Consumer, ControlError, ControlMessage, ExitStatus, Failure, Layout,
    PushError, RemoteError, Ring, SeedFlags, Segment, SlotRef, SlotView, SpawnError, SpinPolicy, SpinSettings, Spinner,
    StateError, SubmitError, WaitError, WorkerCommand, WorkerFailure,
};
use std::time::{Duration, Instant};

mod close;
mod inputs;
mod state;
pub use close::{CloseNotice, CloseProgress, CloseReason, CLOSE_PATIENCE, CLOSE_TAKEN};
pub use state::PoolState;
pub(crate) use state::{Flight, Lane};

/// How long the wait loop sleeps at most before checking that every worker is alive: bounds the
/// time to notice a death (a death is noticed within 100 ms).
const LIVENESS_CHECK: Duration = Duration::from_millis(10);

/// How often a long wait asks [`PoolConfig::cancel`] whether to give up.
pub const CANCEL_CHECK: Duration = Duration::from_millis(100);

/// A caller's hook asked every [`CANCEL_CHECK`] while the pool waits ([`PoolConfig::cancel`]).
pub type Cancel = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// Everything [`Pool::spawn`] needs.
#[derive(Clone)]
pub struct PoolConfig {
    /// The segment layout (counts and array specs).
    pub layout: Layout,
    /// The worker program.
    pub command: WorkerCommand,
    /// The init payload of each worker (one entry per worker, or one entry for all).
    pub init: Vec<Vec<u8>>,
    /// How long start-up (exec, building the envs, the handshake) may take, in seconds.
    pub startup_timeout: Duration,
    /// The pool's spin-then-sleep policy: the bound of every wait's spin phase, in the main process
    /// and in the workers ([`crate::Spinner`]).
    pub spin: SpinPolicy,
    /// What to do when a worker dies.
    pub on_failure: FailurePolicy,
    /// Asked every [`CANCEL_CHECK`] while a worker starts (the handshake of [`Pool::spawn`] and
    /// of a restart) and while [`Pool::wait`] or [`Pool::recv`] waits: `true` abandons the
    /// start-up as a [`SpawnError::Cancelled`] (the started workers stopped), or the wait as a
    /// [`WaitError::Cancelled`] (the command stays pending). A caller uses it to honour Ctrl-C or
    /// a close from another thread during a long wait; `None`: never.
    pub cancel: Option<Cancel>,
    /// Whether the layout's last worker is served inline by the caller, in this process (see
    /// [`Pool::inline_command`]); the others are processes (none for a layout of one worker: then the
    /// caller steps every env). `false`: every worker is a process.
    pub inline: bool,
}

impl PoolConfig {
    /// A config with one init payload for all workers, a 60 s start-up timeout, the default
    /// spin policy, and [`FailurePolicy::Raise`].
    pub fn new(layout: Layout, command: WorkerCommand, init: Vec<u8>) -> PoolConfig {
        PoolConfig {
            layout,
            command,
            init: vec![init],
            startup_timeout: Duration::from_secs(60),
            spin: SpinPolicy::default(),
            on_failure: FailurePolicy::Raise,
            cancel: None,
            inline: false,
        }
    }

    fn init_of(&self, worker: usize) -> &[u8] {
        self.init.get(worker).unwrap_or(&self.init[0])
    }
}

/// The result of a finished command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The data slot holding the results; valid until `depth - 1` more commands ran.
    pub slot: usize,
    /// What ran.
    pub kind: CommandKind,
    /// Payload messages workers attached (for example non-empty infos), by worker index.
    pub messages: Vec<(usize, Vec<u8>)>,
    /// Errors workers raised while running the command, by worker index. The other workers'
    /// results are in the slot; the pool stays usable.
    pub errors: Vec<(usize, RemoteError)>,
    /// Workers that died while running the command and were restarted
    /// ([`FailurePolicy::Restart`]), with how they died. Their envs were reset: for a step, their
    /// rows hold the first observation of a new episode, reward 0, terminated 0, truncated 1.
    pub restarted: Vec<(usize, WorkerFailure)>,
}

/// A pool of worker processes stepping `num_envs` envs over shared memory.
pub struct Pool {
    pub(crate) segment: Segment,
    config: PoolConfig,
    /// The worker processes: workers `0..workers.len()` of the layout (all of them, or all but
    /// the last when it is served inline).
    pub(crate) workers: Vec<WorkerProcess>,
    commands: Vec<Ring<Command>>,
    completions: Vec<Consumer<Completion>>,
    /// The data slot each worker's next command uses (all equal unless async batches ran).
    pub(crate) worker_slot: Vec<usize>,
    seq: u64,
    /// Counters of sends and arrivals, ordering flights.
    sends: u64,
    arrivals: u64,
    /// What each worker is doing (its command in flight, if any).
    pub(crate) lanes: Vec<Lane>,
    /// What the pool is doing as a whole.
    pub(crate) state: PoolState,
    crash_guard: Option<CrashLoopGuard>,
    /// The learned spin state of the completion waits.
    spinner: Spinner,
    /// Scratch for the order in which a wait scans the workers' completion rings.
    scan_order: Vec<usize>,
    /// When `pump` last looked for dead worker processes while completions kept coming (see
    /// [`Pool::pump`]).
    liveness_checked: Instant,
    /// The process that created the pool: the only one that may command, signal or reap its
    /// workers.
    creator_pid: u32,
}

/// Why a worker is being replaced (or the pool ended).
enum Cause {
    /// It died.
    Died,
    /// It broke the control protocol (it is killed).
    Protocol(ControlError),
    /// It left the segment in an impossible state: what was found (it is killed).
    Corrupt(String),
}

/// The remote error a [`WorkerFailure`] records for a cause, if any.
fn last_error_of(cause: &Cause) -> Option<RemoteError> {
    let (kind, message) = match cause {
        Cause::Died => return None,
        Cause::Protocol(e) => ("ProtocolError", e.to_string()),
        Cause::Corrupt(what) => ("SharedMemoryCorrupt", what.clone()),
    };
    Some(RemoteError { kind: kind.into(), message, ..Default::default() })
}

/// The remote error of a dead worker's last words ([`crate::WorkerMetrics::set_last_words`]),
/// written as `"<kind>: <message>"` with an optional `" (env <id>)"` at the end (the one-line form
/// of [`RemoteError`]'s `Display`); a text without `": "` is all message, of kind `"error"`.
fn remote_of_last_words(text: &str) -> RemoteError {
    let (kind, rest) = match text.split_once(": ") {
        Some((kind, rest)) if !kind.is_empty() && !kind.contains(char::is_whitespace) => (kind, rest),
        _ => ("error", text),
    };
    let env = rest
        .strip_suffix(')')
        .and_then(|r| r.rsplit_once(" (env "))
        .and_then(|(message, id)| Some((message, id.parse::<u64>().ok()?)));
    let (message, env_id) = match env {
        Some((message, id)) => (message, Some(id)),
        None => (rest, None),
    };
    RemoteError { kind: kind.into(), message: message.into(), env_id, ..Default::default() }
}

/// `program arg ...` of a worker command, for messages: each argument quoted when it holds a
/// space, an argument longer than 60 characters cut (a Python worker's boot code lists its
/// whole `sys.path`).
fn describe_command(command: &WorkerCommand) -> String {
    const LONGEST: usize = 60;
    let mut words = vec![command.program.display().to_string()];
    for arg in &command.args {
        let arg = arg.to_string_lossy();
        let mut word: String = arg.chars().take(LONGEST).collect();
        if word.len() < arg.len() {
            word.push('…');
        }
        words.push(if word.contains(' ') { format!("{word:?}") } else { word });
    }
    words.join(" ")
}

/// Why a command could not be handed to a worker.
enum SendFault {
    /// Its command ring is corrupt: what was found.
    Corrupt(String),
    /// The control socket failed (the worker is probably dead: the waits notice).
    Control(ControlError),
}

impl Pool {
    /// Creates the segment, starts the workers, sends each its init payload and waits for every
    /// one to report ready.
    ///
    /// # Errors
    /// [`SpawnError::Segment`], [`SpawnError::Spawn`], [`SpawnError::Startup`] (a worker reported
    /// an error, with its traceback), [`SpawnError::WorkerDied`] (a worker died before its
    /// handshake), [`SpawnError::StartupTimeout`] (naming the worker not ready),
    /// [`SpawnError::Cancelled`] (the [`PoolConfig::cancel`] hook cancelled the start-up). Every
    /// started worker is stopped before the error returns.
    pub fn spawn(config: PoolConfig) -> Result<Pool, SpawnError> {
        let n = config.layout.num_workers;
        if config.init.len() != 1 && config.init.len() != n {
            return Err(SpawnError::InvalidArgument(format!(
                "init has {} payloads; give one, or one per worker ({n})",
                config.init.len()
            )));
        }
        // The worker processes; the inline worker (the last), if any, is this process.
        let processes = n - usize::from(config.inline);
        let spin = SpinSettings::for_pool(config.spin, processes);
        let segment = Segment::create_with(config.layout.clone(), spin).map_err(SpawnError::Segment)?;
        let completions = (0..n)
            .map(|w| {
                segment.completion_ring(w).acquire_consumer().expect("a fresh ring of this process has no consumer")
            })
            .collect();
        let commands = (0..n).map(|w| segment.command_ring(w)).collect();
        let crash_guard = match config.on_failure {
            FailurePolicy::Raise => None,
            FailurePolicy::Restart(p) => Some(CrashLoopGuard::new(p)),
        };
        let mut pool = Pool {
            workers: Vec::with_capacity(n),
            segment,
            config,
            completions,
            commands,
            worker_slot: vec![0; n],
            seq: 0,
            sends: 0,
            arrivals: 0,
            lanes: (0..n).map(|_| Lane::Idle).collect(),
            state: PoolState::Idle,
            crash_guard,
            spinner: Spinner::new(spin),
            scan_order: Vec::new(),
            liveness_checked: Instant::now(),
            creator_pid: crate::current_pid(),
        };
        pool.segment.pool_metrics().init(std::process::id());
        if pool.config.inline {
            pool.segment.worker_metrics(n - 1).set_pid(std::process::id()); // `ringenv top` shows who steps it
        }
        for w in 0..processes {
            let env_ids = pool.segment.layout().worker_envs(w);
            match WorkerProcess::spawn(&pool.config.command, pool.segment.fd(), w, env_ids) {
                Ok(p) => pool.workers.push(p),
                Err(source) => {
                    pool.shutdown(Duration::ZERO);
                    return Err(SpawnError::Spawn { worker: w, source });
                }
            }
        }
        let deadline = Instant::now() + pool.config.startup_timeout;
        let started = (0..processes)
            .try_for_each(|w| pool.send_init(w))
            .and_then(|()| (0..processes).try_for_each(|w| pool.await_ready(w, deadline)));
        if let Err(e) = started {
            pool.shutdown(Duration::ZERO);
            return Err(e);
        }
        Ok(pool)
    }

    fn send_init(&mut self, w: usize) -> Result<(), SpawnError> {
        match self.workers[w].control.send_init(self.config.init_of(w)) {
            Ok(()) => Ok(()),
            Err(ControlError::Closed) => Err(SpawnError::WorkerDied(self.failure_of(w, &Cause::Died))),
            Err(error) => Err(SpawnError::Control { worker: w, error }),
        }
    }

    /// Whether the caller's [`PoolConfig::cancel`] hook asks to give up the current wait.
    fn cancelled(&self) -> bool {
        self.config.cancel.as_ref().is_some_and(|cancel| cancel())
    }

    /// Waits for worker `w`'s `Ready`, noticing its death.
    fn await_ready(&mut self, w: usize, deadline: Instant) -> Result<(), SpawnError> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.startup_timeout(w));
            }
            match self.workers[w].control.recv(Some(left.min(Duration::from_millis(100)))) {
                Ok(ControlMessage::Ready) => return Ok(()),
                Ok(ControlMessage::Error(error)) => {
                    let env_ids = self.workers[w].env_ids.clone();
                    return Err(SpawnError::Startup { worker: w, env_ids, error: Box::new(error) });
                }
                Ok(other) => {
                    let error = ControlError::Protocol(format!("expected Ready, got {other:?}"));
                    return Err(SpawnError::Control { worker: w, error });
                }
                Err(ControlError::Timeout) if !self.workers[w].has_exited() => {
                    if self.cancelled() {
                        let seconds = self.config.startup_timeout.as_secs_f64();
                        return Err(SpawnError::Cancelled { worker: w, seconds });
                    }
                }
                Err(ControlError::Timeout | ControlError::Closed) => {
                    return Err(SpawnError::WorkerDied(self.failure_of(w, &Cause::Died)));
                }
                Err(error) => return Err(SpawnError::Control { worker: w, error }),
            }
        }
    }

    /// The error of worker `w` not ready in time: who it is, how far it got (joined the pool:
    /// its metrics hold its pid), what it runs.
    fn startup_timeout(&self, w: usize) -> SpawnError {
        let worker = &self.workers[w];
        let joined = self.segment.worker_metrics(w).snapshot().pid == worker.pid();
        SpawnError::StartupTimeout {
            seconds: self.config.startup_timeout.as_secs_f64(),
            worker: w,
            pid: worker.pid(),
            env_ids: worker.env_ids.clone(),
            joined,
            program: describe_command(&self.config.command),
        }
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        self.segment.layout()
    }

    /// Messages `(sent, received)` on worker `worker`'s control socket since it (or its latest
    /// restart) started; `(0, 0)` for the inline worker, which has no socket.
    ///
    /// # Panics
    /// When `worker >= num_workers`.
    pub fn control_message_counts(&self, worker: usize) -> (u64, u64) {
        assert!(worker < self.lanes.len(), "no worker {worker}");
        self.workers.get(worker).map_or((0, 0), |w| w.control.message_counts())
    }

    /// Worker `w`'s init payload ([`PoolConfig::init`]: its own, or the one for all), for a
    /// caller that builds the inline worker's envs itself.
    pub fn init_payload(&self, w: usize) -> &[u8] {
        self.config.init_of(w)
    }

    /// The index of the inline worker (the layout's last), or `None` when every worker is a
    /// process ([`PoolConfig::inline`]).
    pub fn inline_worker(&self) -> Option<usize> {
        self.config.inline.then(|| self.lanes.len() - 1)
    }

    /// The inline worker's command that has not run yet: `(kind, slot, message)`. The caller runs
    /// it on the envs it hosts (their rows of slot `slot`) and reports with
    /// [`Pool::complete_inline`]. `None` when there is no inline worker or nothing for it to run.
    pub fn inline_command(&self) -> Option<(CommandKind, usize, Option<&[u8]>)> {
        let f = self.lanes[self.inline_worker()?].flight().filter(|f| f.arrived.is_none())?;
        Some((f.kind, f.slot, f.message.as_deref()))
    }

    /// Completes the inline worker's command with an optional payload message, or the env error
    /// it raised; `busy` is how long it ran (for the worker's metrics).
    ///
    /// # Errors
    /// [`SubmitError::InvalidArgument`] when the inline worker has no command waiting to run;
    /// the errors of every operation's first check (closed, forked, an earlier failure).
    pub fn complete_inline(
        &mut self,
        result: Result<Option<Vec<u8>>, RemoteError>,
        busy: Duration,
    ) -> Result<(), SubmitError> {
        self.usable()?;
        let Some((kind, _, _)) = self.inline_command() else {
            return Err(SubmitError::InvalidArgument("the inline worker has no command waiting to run".into()));
        };
        let w = self.lanes.len() - 1;
        let metrics = self.segment.worker_metrics(w);
        let envs = if kind == CommandKind::Step { self.segment.layout().worker_envs(w).len() as u64 } else { 0 };
        metrics.record_command(envs, busy.as_nanos() as u64, 0);
        if let Err(e) = &result {
            metrics.set_last_error(&format!("{}: {}", e.kind, e.message));
        }
        // It counts as finished no later than any command sent after it that finished already,
        // so its envs step as often as the worker processes' envs.
        let sent = self.lanes[w].flight().map_or(0, |f| f.sent);
        let later = self.flights().filter(|f| f.sent > sent).filter_map(|f| f.arrived).min();
        let arrived = later.unwrap_or_else(|| {
            self.arrivals += 1;
            self.arrivals
        });
        let f = self.flight(w);
        match result {
            Ok(reply) => f.reply = reply,
            Err(e) => f.error = Some(e),
        }
        f.arrived = Some(arrived);
        Ok(())
    }

    /// `InvalidArgument` while the inline worker's command has not run: a wait could not end.
    pub(crate) fn inline_done(&self) -> Result<(), WaitError> {
        match self.inline_command() {
            Some((kind, slot, _)) => Err(WaitError::InvalidArgument(format!(
                "the inline worker's {kind:?} command on slot {slot} has not run: run it and call complete_inline \
                 before waiting"
            ))),
            None => Ok(()),
        }
    }

    /// The segment (for zero-copy views of its arrays).
    pub fn segment(&self) -> &Segment {
        &self.segment
    }

    /// Process ids of the workers, by worker index.
    pub fn worker_pids(&self) -> Vec<u32> {
        self.workers.iter().map(WorkerProcess::pid).collect()
    }

    /// The slot the next [`Pool::submit`] will use: write its actions (and seeds) there first.
    pub fn next_slot(&self) -> usize {
        self.worker_slot[0]
    }

    /// Makes `slot` the one the next command of worker `w` uses (`None`: of every worker, as
    /// [`Pool::submit`] needs), in place of the slot after its last: for a caller that must not
    /// have a slot rewritten yet (`ringenv._leases`). Write the command's inputs after this.
    ///
    /// # Errors
    /// [`SubmitError::InvalidArgument`]: `slot` is not below the depth, or `w` is not a worker;
    /// [`StateError::AlreadyPending`]: that worker (or, with `None`, any worker) has a command in
    /// flight; the errors of every operation's first check (closed, forked, an earlier failure).
    pub fn set_next_slot(&mut self, w: Option<usize>, slot: usize) -> Result<(), SubmitError> {
        self.usable()?;
        let depth = self.segment.layout().depth;
        if slot >= depth {
            return Err(SubmitError::InvalidArgument(format!("no slot {slot}: the pool has {depth}")));
        }
        match w {
            None => {
                if !matches!(self.state, PoolState::Idle) {
                    return Err(StateError::AlreadyPending.into());
                }
                self.worker_slot.iter_mut().for_each(|s| *s = slot);
            }
            Some(w) => {
                let workers = self.worker_slot.len();
                if w >= workers {
                    return Err(SubmitError::InvalidArgument(format!("no worker {w}: the pool has {workers}")));
                }
                if self.is_pending() || self.is_busy(w) {
                    return Err(StateError::AlreadyPending.into());
                }
                self.worker_slot[w] = slot;
            }
        }
        Ok(())
    }

    /// A read-only view of slot `slot` (read results).
    ///
    /// # Panics
    /// When `slot >= depth`.
    pub fn batch(&self, slot: usize) -> SlotRef<'_> {
        self.segment.slot(slot)
    }

    /// A writable view of slot `slot` (write the next command's inputs: actions, seeds).
    ///
    /// # Panics
    /// When `slot >= depth`.
    pub fn batch_mut(&mut self, slot: usize) -> SlotView<'_> {
        self.segment.slot_mut(slot)
    }

    /// Whether a command of [`Pool::submit`] is pending.
    pub fn is_pending(&self) -> bool {
        self.state.pending().is_some()
    }

    /// The pool's state ([`PoolState`]).
    pub fn state(&self) -> &PoolState {
        &self.state
    }

    /// How many workers have a command in flight (of [`Pool::submit`] or [`Pool::send`]).
    pub fn in_flight(&self) -> usize {
        self.flights().count()
    }

    /// The commands in flight.
    pub(crate) fn flights(&self) -> impl Iterator<Item = &Flight> {
        self.lanes.iter().filter_map(Lane::flight)
    }

    /// Whether this process created the pool ([`crate::current_pid`]). In a `fork` child it is false:
    /// every operation there returns [`StateError::ForkedChild`], and [`Pool::close`] or a drop
    /// only releases the child's own descriptors and mapping ([`Pool::batch`] views are not
    /// checked: the memory is shared).
    pub fn is_owner(&self) -> bool {
        crate::current_pid() == self.creator_pid
    }

    /// The id of the process that created the pool.
    pub fn creator_pid(&self) -> u32 {
        self.creator_pid
    }

    /// Every operation's first check: this is the creator process ([`StateError::ForkedChild`])
    /// and the pool is open ([`PoolState::check_open`]: [`StateError::Closed`], or the failure
    /// that ended it).
    pub(crate) fn usable(&self) -> Result<(), SubmitError> {
        let pid = crate::current_pid();
        if pid != self.creator_pid {
            return Err(StateError::ForkedChild { creator_pid: self.creator_pid, pid }.into());
        }
        self.state.check_open()?;
        Ok(())
    }

    /// Sends command `kind` on slot [`Pool::next_slot`] to every worker, with an optional payload
    /// message (for example reset options) that each worker receives with it. Returns the slot.
    ///
    /// # Errors
    /// [`StateError::AlreadyPending`], the errors of every operation's first check
    /// (closed, forked, an earlier failure), a [`Failure`] (a worker's command ring is corrupt, under
    /// [`FailurePolicy::Raise`], or its restart failed), [`SubmitError::InvalidArgument`] for
    /// `Close` (use [`Pool::close`]).
    pub fn submit(&mut self, kind: CommandKind, message: Option<&[u8]>) -> Result<usize, SubmitError> {
        self.usable()?;
        if kind == CommandKind::Close {
            return Err(SubmitError::InvalidArgument("close a pool with Pool::close".into()));
        }
        self.state.submit(kind)?;
        let slot = self.worker_slot[0];
        let (seq, message) = (self.next_seq(), message.map(<[u8]>::to_vec));
        for w in 0..self.lanes.len() {
            self.worker_slot[w] = slot;
            self.launch(w, kind, seq, message.clone())?;
        }
        Ok(slot)
    }

    /// Starts command `kind` on worker `w`'s next slot: records the flight, then pushes it. A
    /// corrupt command ring is handled as the worker's death (restart, or the pool's end).
    pub(crate) fn launch(
        &mut self,
        w: usize,
        kind: CommandKind,
        seq: u64,
        message: Option<Vec<u8>>,
    ) -> Result<(), Failure> {
        self.sends += 1;
        let slot = self.worker_slot[w];
        let (restarted, idle_restart) = match std::mem::replace(&mut self.lanes[w], Lane::Idle) {
            // A worker restarted while idle: its next step or reset reports the restart and
            // resets its new envs (a call leaves that to them).
            Lane::Restarted(failure) if kind == CommandKind::Call => (None, Some(failure)),
            Lane::Restarted(failure) => (Some(failure), None),
            _ => (None, None),
        };
        let reset_first = restarted.is_some();
        self.lanes[w] = Lane::Busy(Flight {
            kind,
            slot,
            seq,
            message,
            sent: self.sends,
            arrived: None,
            reply: None,
            error: None,
            restarted,
            idle_restart,
        });
        if w >= self.workers.len() {
            return Ok(()); // the inline worker: the caller runs it (Pool::inline_command)
        }
        if reset_first {
            return self.reset_restarted(w);
        }
        match self.send_command(w, kind) {
            Ok(()) => Ok(()),
            Err(SendFault::Corrupt(what)) => self.on_death(w, Cause::Corrupt(what)),
            // A worker that died here is noticed (and restarted or reported) by the waits.
            Err(SendFault::Control(_)) => Ok(()),
        }
    }

    /// The next command sequence number.
    pub(crate) fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Pushes worker `w`'s flight (as `kind`) to it, then its message if any.
    fn send_command(&mut self, w: usize, kind: CommandKind) -> Result<(), SendFault> {
        let f = self.lanes[w].flight().expect("a command is in flight");
        let command = Command::new(kind, f.slot as u32, f.seq, f.message.is_some());
        match self.commands[w].push(command) {
            Ok(()) => {}
            // At most one command per worker is outstanding (and a Close at the end): a full ring
            // holds stamps the worker wrote.
            Err(PushError::Full(_)) => {
                return Err(SendFault::Corrupt("its command ring reads full with no command outstanding".into()))
            }
            Err(PushError::Corrupt(_, c)) => return Err(SendFault::Corrupt(format!("its command ring: {c}"))),
        }
        if let Some(wakeup) = self.segment.command_wakeup(w) {
            wakeup.notify();
        }
        match &f.message {
            Some(bytes) => {
                self.workers[w].control.send(&ControlMessage::Payload(bytes.clone())).map_err(SendFault::Control)
            }
            None => Ok(()),
        }
    }

    /// Waits for the pending command to finish on every worker, at most `timeout` (`None`:
    /// forever, still noticing dead workers within ~10 ms).
    ///
    /// # Errors
    /// [`StateError::NoPendingCall`], [`WaitError::Timeout`] (the command stays pending), a
    /// [`Failure`] (the pool is closed), the errors of every operation's first check
    /// (closed, forked, an earlier failure).
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<Outcome, WaitError> {
        self.usable()?;
        let Some(kind) = self.state.pending() else {
            return Err(StateError::NoPendingCall.into());
        };
        self.inline_done()?;
        let start = Instant::now();
        self.pump(timeout, |lanes| lanes.iter().filter(|l| l.flight().is_some_and(|f| f.arrived.is_none())).count())?;
        self.segment.pool_metrics().record_command(start.elapsed().as_nanos() as u64);
        self.state.finish_wait()?;
        let mut out = Outcome { slot: self.worker_slot[0], kind, messages: vec![], errors: vec![], restarted: vec![] };
        for w in 0..self.lanes.len() {
            let f = self.take_flight(w);
            out.slot = f.slot;
            out.messages.extend(f.reply.map(|r| (w, r)));
            out.errors.extend(f.error.map(|e| (w, e)));
            out.restarted.extend(f.restarted.map(|r| (w, r)));
        }
        Ok(out)
    }

    /// Drains completions until `missing(lanes)` (how many completions the caller still awaits)
    /// is 0, at most `timeout` (`None`: forever, still noticing dead workers within ~10 ms, also
    /// while other workers' completions keep arriving). A sleeping wait is woken by the last
    /// awaited completion only.
    ///
    /// # Errors
    /// [`WaitError::Timeout`] naming the workers still running, a [`Failure`].
    pub(crate) fn pump(
        &mut self,
        timeout: Option<Duration>,
        missing: impl Fn(&[Lane]) -> usize,
    ) -> Result<(), WaitError> {
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let mut cancel_check = start + CANCEL_CHECK;
        loop {
            // Scan in the order commands were sent, so `RecvOrder::Arrival` starves no worker
            // (the inline worker's ring is never used).
            let mut order = std::mem::take(&mut self.scan_order);
            order.clear();
            order.extend(0..self.workers.len());
            order.sort_by_key(|&w| (self.lanes[w].flight().map_or(u64::MAX, |f| f.sent), w));
            let drained: Result<(), Failure> = order.iter().try_for_each(|&w| {
                while let Some(c) = self.completions[w].pop() {
                    self.on_completion(w, c)?;
                }
                Ok(())
            });
            self.scan_order = order;
            drained?;
            let now = Instant::now();
            let awaited = missing(&self.lanes);
            if awaited == 0 {
                // While completions keep coming the wait below never times out: look for a dead
                // worker at most every LIVENESS_CHECK anyway.
                if now.duration_since(self.liveness_checked) < LIVENESS_CHECK {
                    return Ok(());
                }
                self.liveness_checked = now;
                match self.workers.iter().position(WorkerProcess::has_exited) {
                    Some(dead) => {
                        self.on_death(dead, Cause::Died)?;
                        continue;
                    }
                    None => return Ok(()),
                }
            }
            if let Some(d) = deadline {
                if now >= d {
                    let running = |(w, l): (usize, &Lane)| l.flight().is_some_and(|f| f.arrived.is_none()).then_some(w);
                    let waiting_for = self.lanes.iter().enumerate().filter_map(running).collect();
                    let seconds = timeout.unwrap_or_default().as_secs_f64();
                    return Err(WaitError::Timeout { seconds, waiting_for });
                }
            }
            if now >= cancel_check {
                if self.cancelled() {
                    return Err(WaitError::Cancelled);
                }
                cancel_check = now + CANCEL_CHECK;
            }
            let chunk = deadline.map_or(LIVENESS_CHECK, |d| (d - now).min(LIVENESS_CHECK));
            // Rings with a completion not drained yet count against the awaited ones: at worst
            // ones the caller does not await, which wakes the wait early to drain and count again.
            let (completions, lanes) = (&self.completions[..self.workers.len()], &self.lanes);
            let running = |w: &usize| lanes[*w].flight().is_some_and(|f| f.arrived.is_none());
            let missing = || {
                let ready = (0..completions.len()).filter(running).filter(|&w| completions[w].ring().has_ready());
                awaited.saturating_sub(ready.count()) as u32
            };
            if !self.spinner.wait_for(self.segment.completion_wakeup(), missing, chunk) {
                if let Some(dead) = self.workers.iter().position(WorkerProcess::has_exited) {
                    self.on_death(dead, Cause::Died)?;
                } else if let Some((w, c)) = self.completions[..self.workers.len()]
                    .iter()
                    .enumerate()
                    .find_map(|(w, c)| c.check().err().map(|e| (w, e)))
                {
                    self.on_death(w, Cause::Corrupt(format!("its completion ring: {c}")))?;
                }
            }
        }
    }

    /// Removes worker `w`'s finished flight, moving the worker to its next slot; for a step it
    /// restarted in, marks its rows truncated with reward 0.
    pub(crate) fn take_flight(&mut self, w: usize) -> Flight {
        let Lane::Busy(mut f) = std::mem::replace(&mut self.lanes[w], Lane::Idle) else {
            panic!("worker {w} has no flight to take")
        };
        if let Some(failure) = f.idle_restart.take() {
            self.lanes[w] = Lane::Restarted(failure);
        }
        self.worker_slot[w] = (f.slot + 1) % self.segment.layout().depth;
        if f.kind == CommandKind::Step && f.restarted.is_some() {
            let envs = self.segment.layout().worker_envs(w);
            let mut view = self.segment.slot_mut(f.slot);
            view.rows_mut(Array::Truncated, envs.clone()).fill(1);
            view.rows_mut(Array::Terminated, envs.clone()).fill(0);
            view.rows_mut(Array::Reward, envs).fill(0);
        }
        f
    }

    fn on_completion(&mut self, w: usize, c: Completion) -> Result<(), Failure> {
        let expected = self.lanes[w].flight().filter(|f| f.arrived.is_none()).map(|f| f.seq);
        if c.worker as usize != w || expected != Some(c.seq) {
            let what = format!("unexpected completion {c:?} in its completion ring (in flight: seq {expected:?})");
            return self.on_death(w, Cause::Corrupt(what));
        }
        if c.is_error() && !c.has_message() {
            let what = format!("error completion {c:?} without its error message");
            return self.on_death(w, Cause::Corrupt(what));
        }
        if c.is_in_arena() && c.has_message() {
            let what = format!("completion {c:?} claims both the info arena and a message");
            return self.on_death(w, Cause::Corrupt(what));
        }
        if c.is_in_arena() {
            // SYNC POINT: the Acquire pop of `c` pairs with the worker's Release push after it
            // wrote the arena.
            match self.segment.info_arena(w).read(c.seq) {
                Ok(bytes) => self.flight(w).reply = Some(bytes),
                Err(e) => return self.on_death(w, Cause::Corrupt(e.to_string())),
            }
        } else if c.has_message() {
            // The worker sends the message right after the completion; a signal may interrupt the
            // read (a Timeout before the frame starts), which is retried: the worker is alive.
            let deadline = Instant::now() + Duration::from_secs(30);
            let message = loop {
                match self.workers[w].control.recv(Some(deadline.saturating_duration_since(Instant::now()))) {
                    Err(ControlError::Timeout) if Instant::now() < deadline => continue,
                    other => break other,
                }
            };
            match message {
                Ok(ControlMessage::Payload(bytes)) if !c.is_error() => self.flight(w).reply = Some(bytes),
                Ok(ControlMessage::Error(e)) if c.is_error() => self.flight(w).error = Some(e),
                Ok(other) => {
                    let error = ControlError::Protocol(format!("unexpected message {other:?} for {c:?}"));
                    return self.on_death(w, Cause::Protocol(error));
                }
                Err(ControlError::Closed) => return self.on_death(w, Cause::Died),
                Err(error) => return self.on_death(w, Cause::Protocol(error)),
            }
        }
        self.arrivals += 1;
        self.flight(w).arrived = Some(self.arrivals);
        Ok(())
    }

    fn flight(&mut self, w: usize) -> &mut Flight {
        self.lanes[w].flight_mut().expect("a command is in flight")
    }

    /// Worker `w` died, broke the protocol or corrupted the segment (`cause`): restart it or end
    /// the pool.
    fn on_death(&mut self, w: usize, cause: Cause) -> Result<(), Failure> {
        let failure = self.failure_of(w, &cause);
        let Some(guard) = self.crash_guard.as_mut() else {
            let error = match cause {
                Cause::Corrupt(what) => Failure::Corrupt { what, failure },
                _ => Failure::WorkerDied(failure),
            };
            return Err(self.fail(error));
        };
        if !guard.allow(Instant::now()) {
            let (failures, window_s) = (guard.recent(), guard.policy().window.as_secs_f64());
            return Err(self.fail(Failure::CrashLoop { failures, window_s, last: failure }));
        }
        if let Err(e) = self.restart(w) {
            return Err(self.fail(e));
        }
        let Some(flight) = self.lanes[w].flight_mut() else {
            // No command in flight (asynchronous batches, between recv and send): the new
            // worker's envs are reset, and the restart reported, with its next step or reset.
            self.lanes[w] = Lane::Restarted(failure);
            return Ok(());
        };
        flight.arrived = None;
        flight.reply = None;
        flight.error = None;
        flight.restarted = Some(failure);
        let kind = flight.kind;
        match kind {
            CommandKind::Step | CommandKind::Reset => self.reset_restarted(w)?,
            _ => {
                // A call cannot be replayed safely: report it as failed for this worker's envs.
                let message = "the worker died during the call and was restarted; its envs were reset".into();
                flight.error = Some(RemoteError { kind: "WorkerRestarted".into(), message, ..Default::default() });
                self.arrivals += 1;
                flight.arrived = Some(self.arrivals);
            }
        }
        Ok(())
    }

    /// Sends restarted worker `w` its flight (a step or reset) as a reset of its new envs: a Reset
    /// re-runs as it was (same seeds, same options message); a Step becomes a reset without seeds,
    /// so its envs continue fresh random streams, as an autoreset would.
    fn reset_restarted(&mut self, w: usize) -> Result<(), Failure> {
        let flight = self.lanes[w].flight_mut().expect("a restarted worker's flight");
        if flight.kind == CommandKind::Step {
            let envs = self.segment.layout().worker_envs(w);
            flight.message = None;
            let slot = flight.slot;
            let fresh = SeedFlags::default().bits();
            self.segment.slot_mut(slot).rows_mut(Array::SeedFlags, envs).fill(fresh);
        }
        match self.send_command(w, CommandKind::Reset) {
            Ok(()) => Ok(()),
            Err(SendFault::Control(error)) => Err(self.fail(Failure::Control { worker: w, error })),
            Err(SendFault::Corrupt(what)) => {
                let failure = self.failure_of(w, &Cause::Corrupt(what.clone()));
                Err(self.fail(Failure::Corrupt { what, failure }))
            }
        }
    }

    /// Replaces dead worker `w`: reset its rings, start a new process, hand it its init payload.
    fn restart(&mut self, w: usize) -> Result<(), Failure> {
        self.workers[w].kill();
        // SAFETY: the worker is dead and reaped, and this (single-threaded) pool is the only
        // other user of its rings and wake-up word.
        unsafe { self.segment.init_worker_rings(w) };
        self.commands[w] = self.segment.command_ring(w);
        self.completions[w] = match self.segment.completion_ring(w).acquire_consumer() {
            Some(consumer) => consumer,
            // Something still mapping the segment (a process the dead worker left) claimed it.
            None => {
                let what = "its completion ring was claimed again right after its reset".to_string();
                let failure = self.failure_of(w, &Cause::Corrupt(what.clone()));
                return Err(Failure::Corrupt { what, failure });
            }
        };
        self.segment.worker_metrics(w).add_restart();
        let env_ids = self.segment.layout().worker_envs(w);
        self.workers[w] = WorkerProcess::spawn(&self.config.command, self.segment.fd(), w, env_ids)
            .map_err(|source| Failure::Restart(Box::new(SpawnError::Spawn { worker: w, source })))?;
        let deadline = Instant::now() + self.config.startup_timeout;
        self.send_init(w).and_then(|()| self.await_ready(w, deadline)).map_err(|e| Failure::Restart(Box::new(e)))
    }

    /// How worker `w` ended (waiting up to 100 ms for the status; a live worker that broke the
    /// protocol or corrupted the segment is killed first).
    fn failure_of(&mut self, w: usize, cause: &Cause) -> WorkerFailure {
        let worker = &mut self.workers[w];
        // A worker that corrupted the segment is alive and broken: do not wait for it to exit.
        let grace = if matches!(cause, Cause::Corrupt(_)) { Duration::ZERO } else { Duration::from_millis(100) };
        let status = match worker.try_status(grace) {
            Some(s) => s,
            None if !matches!(cause, Cause::Died) => worker.kill(),
            None => ExitStatus::Unknown,
        };
        // Taken in every case, so that a restarted worker never inherits it.
        let last_words = self.segment.worker_metrics(w).take_last_words();
        let last_error = match cause {
            Cause::Died => last_words.map(|text| remote_of_last_words(&text)),
            _ => last_error_of(cause),
        };
        let worker = &self.workers[w];
        WorkerFailure {
            worker: w,
            pid: worker.pid(),
            env_ids: worker.env_ids.clone(),
            status,
            last_error: last_error.map(Box::new),
        }
    }

    /// Ends the pool with `error`: every worker is stopped and later calls return it again.
    fn fail(&mut self, error: Failure) -> Failure {
        self.lanes.iter_mut().for_each(|l| *l = Lane::Idle);
        self.shutdown(Duration::ZERO);
        self.state.fail(&error);
        error
    }

    /// Steps every env with `actions` (the bytes of `action[num_envs, *action.shape]`, for a
    /// layout with one action leaf) and waits for the result.
    ///
    /// # Errors
    /// [`WaitError::InvalidArgument`] when the layout does not have exactly one action leaf or
    /// `actions` has the wrong length (nothing is written); the errors of [`Pool::submit`] and
    /// [`Pool::wait`].
    pub fn step(&mut self, actions: &[u8]) -> Result<Outcome, WaitError> {
        let layout = self.segment.layout();
        let [leaf] = layout.action.as_slice() else {
            let leaves = layout.action.len();
            return Err(WaitError::InvalidArgument(format!(
                "Pool::step takes the actions of a single action leaf; this layout has {leaves}: write each leaf with Pool::batch and use submit"
            )));
        };
        let expected = layout.num_envs * leaf.bytes();
        if actions.len() != expected {
            return Err(WaitError::InvalidArgument(format!(
                "actions are {} bytes; num_envs ({}) x action {leaf} needs {expected}",
                actions.len(),
                layout.num_envs,
            )));
        }
        self.usable()?;
        let (n, slot) = (layout.num_envs, self.next_slot());
        self.segment.slot_mut(slot).rows_mut(Array::Action(0), 0..n).copy_from_slice(actions);
        self.submit(CommandKind::Step, None)?;
        self.wait(None)
    }

    /// Resets every env, env `i` with `seeds[i]` (`None`: the env continues its own random
    /// stream), and waits for the result.
    ///
    /// # Errors
    /// [`WaitError::InvalidArgument`] when `seeds.len() != num_envs`; the errors of
    /// [`Pool::submit`] and [`Pool::wait`].
    pub fn reset(&mut self, seeds: &[Option<u64>]) -> Result<Outcome, WaitError> {
        let n = self.segment.layout().num_envs;
        if seeds.len() != n {
            return Err(WaitError::InvalidArgument(format!("{} seeds given for {n} envs", seeds.len())));
        }
        self.usable()?;
        self.write_seeds(seeds);
        self.submit(CommandKind::Reset, None)?;
        self.wait(None)
    }

    /// Writes reset seeds for every env into its worker's next slot (call before submitting or
    /// sending a reset).
    ///
    /// In a `fork` child it writes nothing (the memory is shared with the creator's pool).
    ///
    /// # Panics
    /// When `seeds.len() != num_envs`.
    pub fn write_seeds(&mut self, seeds: &[Option<u64>]) {
        let n = self.segment.layout().num_envs;
        assert_eq!(seeds.len(), n, "one seed per env");
        if !self.is_owner() {
            return;
        }
        for w in 0..self.lanes.len() {
            let envs = self.segment.layout().worker_envs(w);
            let mut slot = self.segment.slot_mut(self.worker_slot[w]);
            for env in envs {
                slot.set_seed(env, seeds[env]);
            }
        }
    }

    fn shutdown(&mut self, grace: Duration) {
        if !self.is_owner() {
            // A fork child's copy: the workers are the creator's. Drop this process's descriptors
            // of them (pidfds, control sockets: neither signals nor waits) and nothing else.
            self.workers.clear();
            self.state.close();
            return;
        }
        self.request_close();
        stop_all(&mut self.workers, grace);
        self.state.close();
        self.segment.pool_metrics().mark_closed(); // `ringenv top` no longer lists it (monitor.rs)
    }

    /// Sends every worker its `Close` command without waiting; [`Pool::close`] then waits for
    /// them. Once per pool; nothing in a `fork` child or after the pool closed. A pending command
    /// is abandoned.
    pub fn request_close(&mut self) {
        if !self.is_owner() || !self.state.request_close() {
            return;
        }
        self.lanes.iter_mut().for_each(|l| *l = Lane::Idle);
        let slot = self.worker_slot[0] as u32;
        for w in 0..self.workers.len() {
            // Bounded whatever the worker wrote into its ring; a worker that cannot be told
            // to close is killed after the grace of `close`.
            let _ = self.commands[w].push(Command::new(CommandKind::Close, slot, 0, false));
            if let Some(wakeup) = self.segment.command_wakeup(w) {
                wakeup.notify();
            }
        }
    }

    /// Whether worker `w` has taken its `Close` command ([`Pool::request_close`]) and is closing
    /// its envs (its metrics record says so); `false` for a worker index out of range.
    pub fn is_closing(&self, w: usize) -> bool {
        w < self.workers.len() && self.segment.worker_metrics(w).is_closing()
    }

    /// Asks every worker to close its envs and exit, waits up to `timeout` for them, then kills
    /// the rest (each with its process group, see `supervisor.rs`). A pending command is
    /// abandoned. Idempotent. In a process other than the creator (a `fork` child) it only
    /// releases that process's descriptors of the workers: no command, no signal, no wait.
    pub fn close(&mut self, timeout: Duration) {
        self.lanes.iter_mut().for_each(|l| *l = Lane::Idle);
        self.shutdown(timeout);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.close(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::remote_of_last_words;

    #[test]
    fn a_command_is_described_with_long_arguments_cut() {
        let command = crate::WorkerCommand::new("/bin/worker").arg("--rust").arg("x".repeat(100)).arg("a b");
        let text = super::describe_command(&command);
        assert_eq!(text, format!("/bin/worker --rust {}… \"a b\"", "x".repeat(60)));
    }

    #[test]
    fn last_words_become_a_remote_error_with_kind_message_and_env() {
        let e = remote_of_last_words("panic: bad action: 7 (panicked at src/lib.rs:3:5) (env 12)");
        assert_eq!(
            (e.kind.as_str(), e.message.as_str(), e.env_id),
            ("panic", "bad action: 7 (panicked at src/lib.rs:3:5)", Some(12))
        );
        assert_eq!(e.to_string(), "panic: bad action: 7 (panicked at src/lib.rs:3:5) (env 12)");
        let e = remote_of_last_words("panic: cut… (env 1");
        assert_eq!((e.message.as_str(), e.env_id), ("cut… (env 1", None));
        let e = remote_of_last_words("no kind here");
        assert_eq!((e.kind.as_str(), e.message.as_str()), ("error", "no kind here"));
        let e = remote_of_last_words("two words: x (env nine)");
        assert_eq!((e.kind.as_str(), e.message.as_str(), e.env_id), ("error", "two words: x (env nine)", None));
    }
}
