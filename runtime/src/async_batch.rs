//! Asynchronous batches (EnvPool's and PufferLib's `send` / `recv`): commands go to some workers
//! while others still run, and [`Pool::recv`] hands back the first workers to finish.
//!
//! The unit is a worker (its contiguous range of envs). Each worker alternates between the data
//! slots on its own, so the rows of one `recv` stay intact while those workers' next commands run.
//! [`RecvOrder::Arrival`] returns the workers that finished first; [`RecvOrder::Sent`] returns them
//! in the order their commands were sent, so a seeded run replays exactly.
//!
//! ```no_run
//! use ringenv_runtime::{ArraySpec, CommandKind, DType, Layout, Pool, PoolConfig, RecvOrder, WorkerCommand};
//! let layout = Layout::single(8, 4, 2, ArraySpec::new(DType::F32, &[4]),
//!                             ArraySpec::new(DType::I64, &[]), DType::F32).unwrap();
//! let init = br#"{"env_id": "CartPole-v1"}"#.to_vec();
//! let mut pool = Pool::spawn(PoolConfig::new(layout, WorkerCommand::new("ringenv-worker"), init)).unwrap();
//! pool.write_seeds(&[Some(0); 8]);
//! pool.send(&[0, 1, 2, 3], CommandKind::Reset, None).unwrap();
//! for _ in 0..100 {
//!     let batch = pool.recv(2, RecvOrder::Arrival, None).unwrap(); // 2 workers = 4 envs
//!     let workers: Vec<usize> = batch.iter().map(|b| b.worker).collect();
//!     // ... read each worker's rows from `pool.batch(b.slot)`, write its actions into
//!     // `pool.batch(pool.next_slot_of(b.worker))`, then:
//!     pool.send(&workers, CommandKind::Step, None).unwrap();
//! }
//! ```

use crate::pool::Lane;
use crate::{CommandKind, Pool, RemoteError, StateError, SubmitError, WaitError, WorkerFailure};
use std::time::{Duration, Instant};

/// Which finished workers [`Pool::recv`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvOrder {
    /// The first to finish, in the order they finished.
    Arrival,
    /// The earliest sent, in the order they were sent: deterministic.
    Sent,
}

/// One worker's finished command, from [`Pool::recv`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerOutcome {
    /// The worker.
    pub worker: usize,
    /// The data slot holding its rows (its env ids, [`crate::Layout::worker_envs`]).
    pub slot: usize,
    /// What ran.
    pub kind: CommandKind,
    /// The payload message it attached (for example non-empty infos).
    pub message: Option<Vec<u8>>,
    /// The error it raised; its rows are then not valid.
    pub error: Option<RemoteError>,
    /// It died during the command and was restarted ([`crate::FailurePolicy::Restart`]): its envs
    /// were reset; for a step its rows read truncated with reward 0.
    pub restarted: Option<WorkerFailure>,
}

impl Pool {
    /// The slot worker `w`'s next command uses: write its actions (or seeds) there before
    /// [`Pool::send`].
    ///
    /// # Panics
    /// When `w` is not a worker index.
    pub fn next_slot_of(&self, w: usize) -> usize {
        self.worker_slot[w]
    }

    /// Whether worker `w` has a command in flight (sent and not yet returned by a recv or wait).
    ///
    /// # Panics
    /// When `w` is not a worker index.
    pub fn is_busy(&self, w: usize) -> bool {
        self.lanes[w].flight().is_some()
    }

    /// Sends command `kind` (`Step` or `Reset`) to each worker of `workers`, on its own next
    /// slot, with an optional payload message each receives; returns at once.
    ///
    /// # Errors
    /// [`SubmitError::InvalidArgument`] (nothing is sent) for a worker index out of range, a
    /// worker named twice, a worker that still has a command in flight, or a kind other than
    /// `Step` or `Reset`; [`StateError::AlreadyPending`] while a [`Pool::submit`] is pending;
    /// the errors of every operation's first check (closed, forked, an earlier failure).
    pub fn send(&mut self, workers: &[usize], kind: CommandKind, message: Option<&[u8]>) -> Result<(), SubmitError> {
        self.usable()?;
        if self.is_pending() {
            return Err(StateError::AlreadyPending.into());
        }
        if !matches!(kind, CommandKind::Step | CommandKind::Reset) {
            return Err(SubmitError::InvalidArgument(format!("send takes Step or Reset, not {kind:?}")));
        }
        let n = self.layout().num_workers;
        let mut seen = vec![false; n];
        for &w in workers {
            if w >= n {
                return Err(SubmitError::InvalidArgument(format!("worker {w} out of range: the pool has {n}")));
            }
            if std::mem::replace(&mut seen[w], true) {
                return Err(SubmitError::InvalidArgument(format!("worker {w} named twice")));
            }
            if self.is_busy(w) {
                return Err(SubmitError::InvalidArgument(format!(
                    "worker {w} (envs {:?}) still has a command in flight: recv its results first",
                    self.layout().worker_envs(w)
                )));
            }
        }
        let message = message.map(<[u8]>::to_vec);
        if !workers.is_empty() {
            self.state.send()?;
        }
        for &w in workers {
            let seq = self.next_seq();
            self.launch(w, kind, seq, message.clone())?;
        }
        Ok(())
    }

    /// Whether a [`Pool::recv`] of `num_workers` workers needs the inline worker's command to
    /// have run first: it has not run yet, and fewer than `num_workers` other commands in flight
    /// were sent before it. So the inline share takes its turn in send order, like a worker
    /// process that is never early: it is not stepped again while older batches of the worker
    /// processes are outstanding (which would step its envs more often than theirs).
    pub fn inline_due(&self, num_workers: usize) -> bool {
        let Some(inline) = self.inline_command().and(self.inline_worker()) else { return false };
        let sent = self.lanes[inline].flight().map_or(0, |f| f.sent);
        let older = self.flights().filter(|f| f.sent < sent).count();
        older < num_workers
    }

    /// Waits until `num_workers` workers finished commands sent with [`Pool::send`] and returns
    /// them (in `order`), at most `timeout` (`None`: forever, still noticing dead workers within
    /// ~10 ms). Their rows stay valid until they have run one more command.
    ///
    /// # Errors
    /// [`WaitError::InvalidArgument`] when fewer than `num_workers` (or zero) commands are in
    /// flight, or the inline worker's command is due and has not run ([`Pool::inline_due`],
    /// [`Pool::complete_inline`]); [`StateError::AlreadyPending`] while a [`Pool::submit`] is
    /// pending; [`WaitError::Timeout`] (nothing is returned; the commands stay in flight); a
    /// [`crate::Failure`].
    pub fn recv(
        &mut self,
        num_workers: usize,
        order: RecvOrder,
        timeout: Option<Duration>,
    ) -> Result<Vec<WorkerOutcome>, WaitError> {
        self.usable()?;
        if self.is_pending() {
            return Err(StateError::AlreadyPending.into());
        }
        if self.inline_due(num_workers) {
            return Err(WaitError::InvalidArgument(
                "the inline worker's command is due: run it and call complete_inline before recv".into(),
            ));
        }
        let in_flight = self.in_flight();
        if num_workers == 0 || num_workers > in_flight {
            return Err(WaitError::InvalidArgument(format!(
                "recv waits for {num_workers} workers but {in_flight} have a command in flight{}",
                if in_flight == 0 { " (send their envs a command first: async_reset, then send)" } else { "" }
            )));
        }
        let start = Instant::now();
        self.pump(timeout, |lanes| chosen(lanes, num_workers, order).err().unwrap_or(0))?;
        self.segment.pool_metrics().record_command(start.elapsed().as_nanos() as u64);
        let batch = self.take_chosen(num_workers, order);
        self.state.settle(self.in_flight());
        Ok(batch)
    }

    /// Takes the flights `recv` returns once `chosen` found them all finished.
    fn take_chosen(&mut self, num_workers: usize, order: RecvOrder) -> Vec<WorkerOutcome> {
        let workers = chosen(&self.lanes, num_workers, order).expect("pump returned when enough finished");
        workers
            .into_iter()
            .map(|w| {
                let f = self.take_flight(w);
                WorkerOutcome {
                    worker: w,
                    slot: f.slot,
                    kind: f.kind,
                    message: f.reply,
                    error: f.error,
                    restarted: f.restarted,
                }
            })
            .collect()
    }
}

/// The `k` workers `recv` returns once they all finished, or (`Err`) how many of their
/// completions it still awaits.
fn chosen(lanes: &[Lane], k: usize, order: RecvOrder) -> Result<Vec<usize>, usize> {
    let flights = lanes.iter().enumerate().filter_map(|(w, l)| Some((w, l.flight()?)));
    let mut candidates: Vec<((u64, u64), usize)> = match order {
        // Ties (only the inline worker shares a stamp, see `Pool::complete_inline`): the earlier sent.
        RecvOrder::Arrival => flights.filter_map(|(w, f)| Some(((f.arrived?, f.sent), w))).collect(),
        RecvOrder::Sent => flights.map(|(w, f)| ((f.sent, 0), w)).collect(),
    };
    candidates.sort_unstable();
    candidates.truncate(k);
    let done = candidates.iter().filter(|&&(_, w)| lanes[w].flight().is_some_and(|f| f.arrived.is_some())).count();
    match k - done {
        0 => Ok(candidates.into_iter().map(|(_, w)| w).collect()),
        missing => Err(missing),
    }
}
