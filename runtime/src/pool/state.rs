//! The state machine of a pool's calls: what the pool is doing as a whole ([`PoolState`]) and
//! what each worker is doing ([`Lane`]). Every public operation of [`crate::Pool`] starts with
//! one of its transitions, which refuses a call out of turn with a typed [`StateError`] (or, once
//! a worker failure ended the pool, that [`Failure`] again).
//!
//! ```text
//!            submit              wait
//!   Idle ───────────> Pending(kind) ───────> Idle
//!    │ ^   send              recv (last in flight)
//!    │ └─ Batches <───┘  (send / recv while some worker is in flight)
//!    └── request_close ─> Closing ── close ─> Closed
//!   any open state ── a worker failure ─> Failed(failure)
//! ```
//!
//! ```
//! use ringenv_runtime::{CommandKind, PoolState, StateError};
//! let mut state = PoolState::Idle;
//! state.submit(CommandKind::Step).unwrap();
//! assert_eq!(state.submit(CommandKind::Reset), Err(StateError::AlreadyPending));
//! assert_eq!(state.finish_wait(), Ok(CommandKind::Step));
//! assert_eq!(state.finish_wait(), Err(StateError::NoPendingCall));
//! ```

use std::time::Instant;

use crate::{CommandKind, Failure, RemoteError, StateError, SubmitError, WorkerFailure};

/// What a pool is doing as a whole.
#[derive(Debug, Default)]
pub enum PoolState {
    /// Open, no command in flight.
    #[default]
    Idle,
    /// A command of [`crate::Pool::submit`] runs on every worker; [`crate::Pool::wait`] collects it.
    Pending(CommandKind),
    /// Commands of [`crate::Pool::send`] run on some workers; [`crate::Pool::recv`] collects them.
    Batches,
    /// Every worker was sent its `Close` command ([`crate::Pool::request_close`]) at `since`; the
    /// pool waits for them to exit ([`crate::Pool::await_close`], which said it is slow if `warned`).
    Closing {
        /// When the workers were told to close.
        since: Instant,
        /// Whether the close said it is slow ([`crate::CloseProgress::Slow`]).
        warned: bool,
    },
    /// A worker failure ended the pool: every worker is stopped and later calls return the failure
    /// again (`None`: one that cannot be copied; they return [`StateError::Closed`]).
    Failed(Option<Failure>),
    /// Closed.
    Closed,
}

impl PoolState {
    /// Whether the pool takes calls: `Ok` while open (idle, pending, batches), else the error every
    /// call returns.
    pub fn check_open(&self) -> Result<(), SubmitError> {
        match self {
            PoolState::Idle | PoolState::Pending(_) | PoolState::Batches => Ok(()),
            PoolState::Failed(Some(f)) => Err(SubmitError::Failed(f.again().expect("a stored failure copies"))),
            PoolState::Failed(None) | PoolState::Closing { .. } | PoolState::Closed => Err(StateError::Closed.into()),
        }
    }

    /// Whether the pool is open (idle, pending or running batches).
    pub fn is_open(&self) -> bool {
        matches!(self, PoolState::Idle | PoolState::Pending(_) | PoolState::Batches)
    }

    /// `Idle -> Pending(kind)`: a command goes to every worker.
    ///
    /// # Errors
    /// [`StateError::AlreadyPending`] unless idle; [`StateError::Closed`] when not open.
    pub fn submit(&mut self, kind: CommandKind) -> Result<(), StateError> {
        match self {
            PoolState::Idle => {
                *self = PoolState::Pending(kind);
                Ok(())
            }
            PoolState::Pending(_) | PoolState::Batches => Err(StateError::AlreadyPending),
            _ => Err(StateError::Closed),
        }
    }

    /// `Pending(kind) -> Idle`: the pending command finished; returns its kind.
    ///
    /// # Errors
    /// [`StateError::NoPendingCall`] when no command of `submit` is pending.
    pub fn finish_wait(&mut self) -> Result<CommandKind, StateError> {
        self.pending().ok_or(StateError::NoPendingCall).inspect(|_| *self = PoolState::Idle)
    }

    /// The kind of the pending command of `submit`, if any.
    pub fn pending(&self) -> Option<CommandKind> {
        match self {
            PoolState::Pending(kind) => Some(*kind),
            _ => None,
        }
    }

    /// `Idle | Batches -> Batches`: commands go to some workers.
    ///
    /// # Errors
    /// [`StateError::AlreadyPending`] while a command of `submit` is pending.
    pub fn send(&mut self) -> Result<(), StateError> {
        match self {
            PoolState::Idle | PoolState::Batches => {
                *self = PoolState::Batches;
                Ok(())
            }
            PoolState::Pending(_) => Err(StateError::AlreadyPending),
            _ => Err(StateError::Closed),
        }
    }

    /// `Batches -> Idle` once no worker has a command in flight (after a `recv`).
    pub fn settle(&mut self, in_flight: usize) {
        if in_flight == 0 && matches!(self, PoolState::Batches) {
            *self = PoolState::Idle;
        }
    }

    /// Open -> `Closing`: the workers are being told to close. Returns whether they must be told
    /// (`false`: already closing, closed or failed).
    pub fn request_close(&mut self) -> bool {
        let open = self.is_open();
        if open {
            *self = PoolState::Closing { since: Instant::now(), warned: false };
        }
        open
    }

    /// Any state -> `Closed`, but a failure stays what later calls return.
    pub fn close(&mut self) {
        if !matches!(self, PoolState::Failed(_)) {
            *self = PoolState::Closed;
        }
    }

    /// Any state -> `Failed`: `failure` ended the pool.
    pub fn fail(&mut self, failure: &Failure) {
        *self = PoolState::Failed(failure.again());
    }
}

/// The command in flight on one worker, and what came back for it.
pub(crate) struct Flight {
    pub(crate) kind: CommandKind,
    pub(crate) slot: usize,
    pub(crate) seq: u64,
    pub(crate) message: Option<Vec<u8>>,
    /// When the command was sent, in the pool's send order (the deterministic order of
    /// [`crate::RecvOrder::Sent`]).
    pub(crate) sent: u64,
    /// When its completion arrived, in the pool's arrival order; `None` while running (for the
    /// inline worker: until [`crate::Pool::complete_inline`]).
    pub(crate) arrived: Option<u64>,
    pub(crate) reply: Option<Vec<u8>>,
    pub(crate) error: Option<RemoteError>,
    pub(crate) restarted: Option<WorkerFailure>,
    /// A restart of the worker while it was idle, which this command (a call) does not report:
    /// kept for its next step or reset ([`Lane::Restarted`] again once this flight is taken).
    pub(crate) idle_restart: Option<WorkerFailure>,
}

/// What one worker is doing.
#[allow(clippy::large_enum_variant)] // one per worker, in place: boxing would allocate per command
pub(crate) enum Lane {
    /// Nothing in flight.
    Idle,
    /// Nothing in flight, and it was restarted meanwhile (in asynchronous batches, between `recv`
    /// and `send`): reported with its next step or reset, which then resets its new envs.
    Restarted(WorkerFailure),
    /// A command in flight.
    Busy(Flight),
}

impl Lane {
    /// The flight, if a command is in flight.
    pub(crate) fn flight(&self) -> Option<&Flight> {
        match self {
            Lane::Busy(f) => Some(f),
            _ => None,
        }
    }

    /// The flight, mutably.
    pub(crate) fn flight_mut(&mut self) -> Option<&mut Flight> {
        match self {
            Lane::Busy(f) => Some(f),
            _ => None,
        }
    }
}
