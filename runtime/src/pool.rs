//! The main process's side of a pool: create the segment, start the workers, send commands,
//! collect completions, close.
//!
//! A command goes to every worker at once (each steps or resets its own envs) on data slot
//! `s`; the next command uses slot `s + 1 mod depth`, so the arrays of the last result stay
//! intact while the next command runs. The protocol is an explicit state machine: at most one
//! command is pending ([`PoolError::AlreadyPending`], [`PoolError::NoPendingCall`]); a worker
//! that dies ends the pool ([`PoolError::WorkerDied`], the others are stopped), a slow one
//! yields [`PoolError::Timeout`] with the command still pending.
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

use crate::supervisor::{stop_all, WorkerProcess};
use crate::{
    Array, Command, CommandKind, Completion, Consumer, ControlError, ControlMessage, ExitStatus, Layout, PoolError,
    RemoteError, Ring, Segment, SlotView, SpinPolicy, WorkerCommand, WorkerFailure,
};
use std::time::{Duration, Instant};

/// How long the wait loop sleeps at most before checking that every worker is alive: bounds the
/// time to notice a death (the issue's budget is 100 ms).
const LIVENESS_CHECK: Duration = Duration::from_millis(10);

/// Everything [`Pool::spawn`] needs.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// The segment layout (counts and array specs).
    pub layout: Layout,
    /// The worker program.
    pub command: WorkerCommand,
    /// The init payload of each worker (one entry per worker, or one entry for all).
    pub init: Vec<Vec<u8>>,
    /// How long start-up (exec, building the envs, the handshake) may take, in seconds.
    pub startup_timeout: Duration,
    /// The main process's spin-then-sleep policy when waiting for completions.
    pub spin: SpinPolicy,
}

impl PoolConfig {
    /// A config with one init payload for all workers, a 60 s start-up timeout and the default
    /// spin policy.
    pub fn new(layout: Layout, command: WorkerCommand, init: Vec<u8>) -> PoolConfig {
        PoolConfig {
            layout,
            command,
            init: vec![init],
            startup_timeout: Duration::from_secs(60),
            spin: SpinPolicy::default(),
        }
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
}

struct Pending {
    kind: CommandKind,
    slot: usize,
    seq: u64,
    done: Vec<bool>,
    messages: Vec<(usize, Vec<u8>)>,
    errors: Vec<(usize, RemoteError)>,
}

/// A pool of worker processes stepping `num_envs` envs over shared memory.
pub struct Pool {
    segment: Segment,
    workers: Vec<WorkerProcess>,
    completions: Consumer<Completion>,
    commands: Vec<Ring<Command>>,
    spin: SpinPolicy,
    next_slot: usize,
    seq: u64,
    pending: Option<Pending>,
    failed: Option<WorkerFailure>,
    closed: bool,
    /// This pool's advertisement for `ringenv top` (None if it could not be made: monitoring is
    /// optional).
    advert: Option<crate::advert::Advert>,
}

impl Pool {
    /// Creates the segment, starts the workers, sends each its init payload and waits for every
    /// one to report ready.
    ///
    /// # Errors
    /// [`PoolError::Segment`], [`PoolError::Spawn`], [`PoolError::Startup`] (a worker reported an
    /// error, with its traceback), [`PoolError::WorkerDied`] (a worker died before its handshake),
    /// [`PoolError::Timeout`]. Every started worker is stopped before the error returns.
    pub fn spawn(config: PoolConfig) -> Result<Pool, PoolError> {
        let n = config.layout.num_workers;
        if config.init.len() != 1 && config.init.len() != n {
            return Err(PoolError::InvalidArgument(format!(
                "init has {} payloads; give one, or one per worker ({n})",
                config.init.len()
            )));
        }
        let segment = Segment::create(config.layout.clone()).map_err(PoolError::Segment)?;
        let completions = segment.completion_ring().acquire_consumer().expect("a fresh ring has no consumer");
        let commands = (0..n).map(|w| segment.command_ring(w)).collect();
        let mut pool = Pool {
            workers: Vec::with_capacity(n),
            segment,
            completions,
            commands,
            spin: config.spin,
            next_slot: 0,
            seq: 0,
            pending: None,
            failed: None,
            closed: false,
            advert: None,
        };
        pool.segment.pool_metrics().init(std::process::id());
        for w in 0..n {
            let env_ids = pool.segment.layout().worker_envs(w);
            let process = WorkerProcess::spawn(&config.command, pool.segment.fd(), w, env_ids)
                .map_err(|source| PoolError::Spawn { worker: w, source });
            match process {
                Ok(p) => pool.workers.push(p),
                Err(e) => {
                    pool.shutdown(Duration::ZERO);
                    return Err(e);
                }
            }
        }
        if let Err(e) = pool.handshake(&config) {
            pool.shutdown(Duration::ZERO);
            return Err(e);
        }
        use std::os::fd::AsRawFd;
        pool.advert = crate::advert::Advert::publish(pool.segment.fd().as_raw_fd()).ok();
        Ok(pool)
    }

    fn handshake(&mut self, config: &PoolConfig) -> Result<(), PoolError> {
        for w in 0..self.workers.len() {
            let init = config.init.get(w).unwrap_or(&config.init[0]).clone();
            if let Err(error) = self.workers[w].control.send(&ControlMessage::Init(init)) {
                return Err(self.control_failure(w, error));
            }
        }
        let deadline = Instant::now() + config.startup_timeout;
        for w in 0..self.workers.len() {
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    let waiting_for = (w..self.workers.len()).collect();
                    return Err(PoolError::Timeout { seconds: config.startup_timeout.as_secs_f64(), waiting_for });
                }
                match self.workers[w].control.recv(Some(left.min(Duration::from_millis(100)))) {
                    Ok(ControlMessage::Ready) => break,
                    Ok(ControlMessage::Error(error)) => {
                        let env_ids = self.workers[w].env_ids.clone();
                        return Err(PoolError::Startup { worker: w, env_ids, error: Box::new(error) });
                    }
                    Ok(other) => {
                        let error = ControlError::Protocol(format!("expected Ready, got {other:?}"));
                        return Err(PoolError::Control { worker: w, error });
                    }
                    Err(ControlError::Timeout) => {
                        if let Some(dead) = self.first_dead() {
                            return Err(self.fail(dead, None));
                        }
                    }
                    Err(error) => return Err(self.control_failure(w, error)),
                }
            }
        }
        Ok(())
    }

    /// The segment layout.
    pub fn layout(&self) -> &Layout {
        self.segment.layout()
    }

    /// The segment (for zero-copy views of its arrays).
    pub fn segment(&self) -> &Segment {
        &self.segment
    }

    /// Process ids of the workers, by worker index.
    pub fn worker_pids(&self) -> Vec<u32> {
        self.workers.iter().map(WorkerProcess::pid).collect()
    }

    /// The slot the next command will use: write its actions (and seeds) there before
    /// [`Pool::submit`].
    pub fn next_slot(&self) -> usize {
        self.next_slot
    }

    /// A view of slot `slot` (read results, or write the next command's inputs).
    pub fn batch(&self, slot: usize) -> SlotView<'_> {
        self.segment.slot(slot)
    }

    /// Whether a command is pending.
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    fn usable(&self) -> Result<(), PoolError> {
        if let Some(f) = &self.failed {
            return Err(PoolError::WorkerDied(f.clone()));
        }
        if self.closed {
            return Err(PoolError::Closed);
        }
        Ok(())
    }

    /// Sends command `kind` on slot [`Pool::next_slot`] to every worker, with an optional payload
    /// message (for example reset options) that each worker receives with it. Returns the slot.
    ///
    /// # Errors
    /// [`PoolError::AlreadyPending`], [`PoolError::Closed`], [`PoolError::WorkerDied`],
    /// [`PoolError::InvalidArgument`] for `Close` (use [`Pool::close`]).
    pub fn submit(&mut self, kind: CommandKind, message: Option<&[u8]>) -> Result<usize, PoolError> {
        self.usable()?;
        if self.pending.is_some() {
            return Err(PoolError::AlreadyPending);
        }
        if kind == CommandKind::Close {
            return Err(PoolError::InvalidArgument("close a pool with Pool::close".into()));
        }
        let slot = self.next_slot;
        self.seq += 1;
        let command = Command::new(kind, slot as u32, self.seq, message.is_some());
        for w in 0..self.workers.len() {
            self.commands[w].push(command).expect("at most one command per worker is outstanding");
            self.segment.command_wakeup(w).notify();
        }
        if let Some(bytes) = message {
            let msg = ControlMessage::Payload(bytes.to_vec());
            for w in 0..self.workers.len() {
                if let Err(error) = self.workers[w].control.send(&msg) {
                    return Err(self.control_failure(w, error));
                }
            }
        }
        let n = self.workers.len();
        self.pending =
            Some(Pending { kind, slot, seq: self.seq, done: vec![false; n], messages: vec![], errors: vec![] });
        Ok(slot)
    }

    /// Waits for the pending command to finish on every worker, at most `timeout` (`None`:
    /// forever, still noticing dead workers within ~10 ms).
    ///
    /// # Errors
    /// [`PoolError::NoPendingCall`], [`PoolError::Timeout`] (the command stays pending),
    /// [`PoolError::WorkerDied`] (the pool is closed), [`PoolError::Control`].
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<Outcome, PoolError> {
        self.usable()?;
        if self.pending.is_none() {
            return Err(PoolError::NoPendingCall);
        }
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        loop {
            while let Some(c) = self.completions.pop() {
                self.on_completion(c)?;
            }
            let pending = self.pending.as_ref().expect("pending checked above");
            if pending.done.iter().all(|&d| d) {
                let p = self.pending.take().expect("pending checked above");
                self.segment.pool_metrics().record_command(start.elapsed().as_nanos() as u64);
                self.next_slot = (p.slot + 1) % self.segment.layout().depth;
                return Ok(Outcome { slot: p.slot, kind: p.kind, messages: p.messages, errors: p.errors });
            }
            let now = Instant::now();
            if let Some(d) = deadline {
                if now >= d {
                    let waiting_for = pending.done.iter().enumerate().filter(|(_, &d)| !d).map(|(w, _)| w).collect();
                    let seconds = timeout.unwrap_or_default().as_secs_f64();
                    return Err(PoolError::Timeout { seconds, waiting_for });
                }
            }
            let chunk = deadline.map_or(LIVENESS_CHECK, |d| (d - now).min(LIVENESS_CHECK));
            let ring = self.completions.ring();
            if !self.segment.completion_wakeup().wait(|| ring.has_ready(), self.spin, chunk) {
                if let Some(dead) = self.first_dead() {
                    return Err(self.fail(dead, None));
                }
            }
        }
    }

    fn on_completion(&mut self, c: Completion) -> Result<(), PoolError> {
        let w = c.worker as usize;
        let pending = self.pending.as_mut().expect("completions arrive only while pending");
        if w >= pending.done.len() || c.seq != pending.seq || pending.done[w] {
            let error = ControlError::Protocol(format!("unexpected completion {c:?} (pending seq {})", pending.seq));
            return Err(self.fail(w.min(self.workers.len() - 1), Some(error)));
        }
        pending.done[w] = true;
        if c.has_message() {
            match self.workers[w].control.recv(Some(Duration::from_secs(30))) {
                Ok(ControlMessage::Payload(bytes)) if !c.is_error() => pending.messages.push((w, bytes)),
                Ok(ControlMessage::Error(e)) if c.is_error() => pending.errors.push((w, e)),
                Ok(other) => {
                    let error = ControlError::Protocol(format!("unexpected message {other:?} for {c:?}"));
                    return Err(self.fail(w, Some(error)));
                }
                Err(error) => return Err(self.fail(w, Some(error))),
            }
        }
        Ok(())
    }

    fn first_dead(&self) -> Option<usize> {
        self.workers.iter().position(WorkerProcess::has_exited)
    }

    fn control_failure(&mut self, worker: usize, error: ControlError) -> PoolError {
        if let ControlError::Closed = error {
            return self.fail(worker, None);
        }
        PoolError::Control { worker, error }
    }

    /// Records the death (or protocol failure) of `worker`, stops every worker and returns the
    /// error. A worker that broke the protocol while alive is killed and reported with its error.
    fn fail(&mut self, worker: usize, protocol: Option<ControlError>) -> PoolError {
        let w = &mut self.workers[worker];
        let status = match w.try_status(Duration::from_millis(100)) {
            Some(s) => s,
            None if protocol.is_some() => w.kill(),
            None => ExitStatus::Unknown,
        };
        let last_error = protocol.map(|e| {
            Box::new(RemoteError { kind: "ProtocolError".into(), message: e.to_string(), ..Default::default() })
        });
        let failure = WorkerFailure { worker, pid: w.pid(), env_ids: w.env_ids.clone(), status, last_error };
        self.failed = Some(failure.clone());
        self.pending = None;
        self.shutdown(Duration::ZERO);
        PoolError::WorkerDied(failure)
    }

    /// Steps every env with `actions` (the bytes of `action[num_envs, *action.shape]`, for a
    /// layout with one action leaf) and waits for the result.
    ///
    /// # Errors
    /// [`PoolError::InvalidArgument`] when the layout does not have exactly one action leaf or
    /// `actions` has the wrong length (nothing is written); the errors of [`Pool::submit`] and
    /// [`Pool::wait`].
    pub fn step(&mut self, actions: &[u8]) -> Result<Outcome, PoolError> {
        let layout = self.segment.layout();
        let [leaf] = layout.action.as_slice() else {
            let leaves = layout.action.len();
            return Err(PoolError::InvalidArgument(format!(
                "Pool::step takes the actions of a single action leaf; this layout has {leaves}: write each leaf with Pool::batch and use submit"
            )));
        };
        let expected = layout.num_envs * leaf.bytes();
        if actions.len() != expected {
            return Err(PoolError::InvalidArgument(format!(
                "actions are {} bytes; num_envs ({}) x action {leaf} needs {expected}",
                actions.len(),
                layout.num_envs,
            )));
        }
        self.usable()?;
        let n = layout.num_envs;
        self.segment.slot(self.next_slot).rows_mut(Array::Action(0), 0..n).copy_from_slice(actions);
        self.submit(CommandKind::Step, None)?;
        self.wait(None)
    }

    /// Resets every env, env `i` with `seeds[i]` (`None`: the env continues its own random
    /// stream), and waits for the result.
    ///
    /// # Errors
    /// [`PoolError::InvalidArgument`] when `seeds.len() != num_envs`; the errors of
    /// [`Pool::submit`] and [`Pool::wait`].
    pub fn reset(&mut self, seeds: &[Option<u64>]) -> Result<Outcome, PoolError> {
        let n = self.segment.layout().num_envs;
        if seeds.len() != n {
            return Err(PoolError::InvalidArgument(format!("{} seeds given for {n} envs", seeds.len())));
        }
        self.usable()?;
        self.write_seeds(seeds);
        self.submit(CommandKind::Reset, None)?;
        self.wait(None)
    }

    /// Writes reset seeds into the next slot (call before submitting a reset).
    ///
    /// # Panics
    /// When `seeds.len() != num_envs`.
    pub fn write_seeds(&mut self, seeds: &[Option<u64>]) {
        let n = self.segment.layout().num_envs;
        assert_eq!(seeds.len(), n, "one seed per env");
        let mut slot = self.segment.slot(self.next_slot);
        let values: Vec<u64> = seeds.iter().map(|s| s.unwrap_or(0)).collect();
        slot.rows_mut(Array::Seed, 0..n).copy_from_slice(bytemuck::cast_slice(&values));
        let flags: Vec<u8> = seeds.iter().map(|s| u8::from(s.is_some())).collect();
        slot.rows_mut(Array::SeedFlags, 0..n).copy_from_slice(&flags);
    }

    fn shutdown(&mut self, grace: Duration) {
        if !self.closed {
            let slot = self.next_slot as u32;
            for w in 0..self.workers.len() {
                let _ = self.commands[w].push(Command::new(CommandKind::Close, slot, 0, false));
                self.segment.command_wakeup(w).notify();
            }
        }
        stop_all(&mut self.workers, grace);
        self.closed = true;
        self.advert = None;
    }

    /// Asks every worker to close its envs and exit, waits up to `timeout` for them, then kills
    /// the rest. A pending command is abandoned. Idempotent.
    pub fn close(&mut self, timeout: Duration) {
        self.pending = None;
        self.shutdown(timeout);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.close(Duration::from_secs(1));
    }
}
