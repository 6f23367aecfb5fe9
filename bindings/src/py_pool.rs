//! `ringenv._native.Pool`: the runtime's pool for Python, with the GIL released while it waits.
//!
//! With `inline="python"` or `"rust"`, the pool's last worker is this process
//! ([`ringenv_runtime::PoolConfig::inline`]): its envs are built here by the same host a worker
//! process runs (`crate::python_envs` or the built-in registry), and each `wait` or `recv` first
//! runs that share's pending command, then waits for the worker processes.

use crate::call_guard::Busy;
use crate::close_request::{closed_while_waiting, CloseRequest, PyPoolCloser};
use crate::errors::{catch, failure_fields, guard, internal_error, remote_to_dict, to_pyerr};
use crate::py_segment::PySegment;
use crate::python_envs::Handover;
use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyList};
use ringenv_runtime::{
    current_pid, ActionBounds, Array, ArraySpec, CloseProgress, CommandKind, DType, Failure, FailurePolicy, Layout,
    Pool, PoolConfig, RecvOrder, RestartPolicy, SpawnError, SpinPolicy, StateError, WaitError, WorkerCommand,
    WorkerFailure, CANCEL_CHECK, DEFAULT_INFO_ARENA,
};
use ringenv_worker::host::EnvHost;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn dtype(what: &str, name: &str) -> PyResult<DType> {
    DType::from_numpy(name).ok_or_else(|| PyValueError::new_err(format!("unsupported {what} dtype {name:?}")))
}

fn array(name: &str, leaf: usize) -> PyResult<Array> {
    Ok(match name {
        "obs" => Array::Obs(leaf),
        "reward" => Array::Reward,
        "terminated" => Array::Terminated,
        "truncated" => Array::Truncated,
        "action" => Array::Action(leaf),
        "seed" => Array::Seed,
        "seed_flags" => Array::SeedFlags,
        other => return Err(PyValueError::new_err(format!("no array {other:?} in a slot"))),
    })
}

fn specs(what: &str, leaves: &[(String, Vec<usize>)]) -> PyResult<Vec<ArraySpec>> {
    leaves.iter().map(|(d, shape)| Ok(ArraySpec::new(dtype(what, d)?, shape))).collect()
}

/// The observation and action leaves (`(numpy dtype name, shape)` each) of a pool, as Python
/// passes them.
struct Leaves<'a> {
    obs: &'a [(String, Vec<usize>)],
    action: &'a [(String, Vec<usize>)],
}

/// The layout of a pool (what `Pool(...)` maps and `Pool.segment_size(...)` reports), with info
/// arenas of `info_arena_bytes` per worker (`None`: the default, 64 KiB). Rewards are float64,
/// the dtype Gymnasium's vector envs return, so neither the CPU nor the GPU path converts them.
fn layout_of(
    py: Python<'_>,
    num_envs: usize,
    num_workers: usize,
    depth: usize,
    leaves: &Leaves<'_>,
    info_arena_bytes: Option<usize>,
) -> PyResult<Layout> {
    Layout::new(
        num_envs,
        num_workers,
        depth,
        specs("observation", leaves.obs)?,
        specs("action", leaves.action)?,
        DType::F64,
    )
    .and_then(|l| l.with_info_arena(info_arena_bytes.unwrap_or(DEFAULT_INFO_ARENA)))
    .map_err(|e| to_pyerr(py, SpawnError::Layout(e)))
}

/// `payloads` copied into Rust buffers, allocated fallibly (an init payload may be hundreds of MB;
/// under `ulimit -v` an infallible allocation would abort).
///
/// # Errors
/// `MemoryError` naming the payload and its size.
fn copy_payloads(payloads: &[PyBackedBytes]) -> PyResult<Vec<Vec<u8>>> {
    payloads
        .iter()
        .enumerate()
        .map(|(w, bytes)| {
            let mut copy = Vec::new();
            copy.try_reserve_exact(bytes.len()).map_err(|_| {
                PyMemoryError::new_err(format!(
                    "cannot allocate {} bytes for worker {w}'s init message (its pickled env factories and spaces)",
                    bytes.len()
                ))
            })?;
            copy.extend_from_slice(bytes);
            Ok(copy)
        })
        .collect()
}

/// The command `"step"`, `"reset"` or `"call"`.
fn command_kind(name: &str) -> PyResult<CommandKind> {
    match name {
        "step" => Ok(CommandKind::Step),
        "reset" => Ok(CommandKind::Reset),
        "call" => Ok(CommandKind::Call),
        other => Err(PyValueError::new_err(format!("unknown command {other:?}"))),
    }
}

fn seconds(what: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| PyValueError::new_err(format!("{what} must be a non-negative number of seconds, got {s}")))
}

/// Waits for the workers of `pool`, told to close, to exit ([`Pool::await_close`]) in slices of
/// 100 ms with the GIL released, running signal handlers between; a report of workers still
/// running becomes a `RuntimeWarning`.
///
/// # Errors
/// A signal handler's exception (a Ctrl-C), which ends the wait.
fn await_close(py: Python<'_>, pool: &mut Pool, timeout: Option<Duration>) -> PyResult<()> {
    loop {
        match py.detach(|| pool.await_close(timeout, CANCEL_CHECK)) {
            CloseProgress::Exited => return Ok(()),
            CloseProgress::Waiting => {}
            CloseProgress::Slow(notice) => warn(py, &notice.to_string()),
            CloseProgress::GiveUp(notice) => {
                warn(py, &notice.to_string());
                return Ok(());
            }
        }
        py.check_signals()?;
    }
}

/// Issues a `RuntimeWarning` (a warning that cannot be issued is dropped: a close goes on).
fn warn(py: Python<'_>, text: &str) {
    let message = std::ffi::CString::new(text.replace('\0', " ")).unwrap_or_default();
    let _ = PyErr::warn(py, &py.get_type::<pyo3::exceptions::PyRuntimeWarning>(), &message, 1);
}

/// Runs `wait(timeout)`, a wait of the runtime, with the GIL released until it returns or
/// `timeout` seconds (`None`: forever) passed. The pool's cancel hook ([`cancelled`]) ends it
/// within [`CANCEL_CHECK`] when a signal handler raised (a Ctrl-C: that exception is raised) or a
/// close was asked for through `closer` (`ClosedEnvironmentError`). The timeout error names `asked`.
fn wait_released<T: Send>(
    py: Python<'_>,
    timeout: Option<f64>,
    asked: Option<f64>,
    closer: &CloseRequest,
    call: &str,
    wait: impl FnOnce(Option<Duration>) -> Result<T, WaitError> + Send,
) -> PyResult<T> {
    let timeout = timeout.map(|t| seconds("timeout", t.max(0.0))).transpose()?;
    if closer.requested() {
        return Err(closed_while_waiting(py, call));
    }
    // A panic in the runtime becomes `InternalError`, never `PanicException`.
    let result = py.detach(|| catch(|| wait(timeout))).map_err(|message| internal_error(py, message))?;
    if let Some(e) = SIGNAL_RAISED.with(|s| s.borrow_mut().take()) {
        return Err(e); // Ctrl-C during the wait, or while a replacement worker started (the pool is failed)
    }
    match result {
        Err(WaitError::Cancelled | WaitError::Failed(Failure::Restart(_))) if closer.requested() => {
            Err(closed_while_waiting(py, call))
        }
        Err(WaitError::Timeout { waiting_for, .. }) => {
            let seconds = asked.unwrap_or_default().max(0.0); // (a timeout error needs one)
            Err(to_pyerr(py, WaitError::Timeout { seconds, waiting_for }))
        }
        other => other.map_err(|e| to_pyerr(py, e)),
    }
}

/// `ringenv._native.Busy`: another call holds the pool (a `wait` or `recv` in another thread, or
/// in the frame below a signal handler's).
fn busy() -> PyErr {
    Busy::new_err("another call is inside this pool (waiting in another thread, or below this signal handler)")
}

/// The pool of `slf`, mutably, or [`busy`] while another call holds it: a typed refusal, where
/// PyO3's own is a bare `RuntimeError`.
fn held<'py>(slf: &Bound<'py, PyPool>) -> PyResult<PyRefMut<'py, PyPool>> {
    slf.try_borrow_mut().map_err(|_| busy())
}

/// A restarted worker as the dict Python sees: [`failure_fields`] and `status` (how it ended, in
/// words).
fn failure_to_dict<'py>(py: Python<'py>, f: &WorkerFailure) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    failure_fields(py, &d, f)?;
    d.set_item("status", f.status.to_string())?;
    Ok(d)
}

thread_local! {
    /// The exception (KeyboardInterrupt, ...) a signal handler raised while the runtime waited (a
    /// worker's start-up in `Pool.__new__` or a restart, a `wait`, a `recv`), for the caller to
    /// raise once the runtime returned.
    static SIGNAL_RAISED: std::cell::RefCell<Option<PyErr>> = const { std::cell::RefCell::new(None) };
}

/// `PoolConfig::cancel` of a pool started from Python: whether a close was asked for through
/// `closer` while a `wait` or `recv` holds the pool; else runs the pending signal handlers
/// (Ctrl-C) with the GIL and keeps the exception one raised, for the caller to raise
/// ([`SIGNAL_RAISED`]).
fn cancelled(closer: &CloseRequest) -> bool {
    if closer.requested() && closer.waiting() {
        return true;
    }
    match Python::attach(|py| py.check_signals()) {
        Ok(()) => false,
        Err(e) => {
            SIGNAL_RAISED.with(|s| *s.borrow_mut() = Some(e));
            true
        }
    }
}

/// A pool of worker processes over one shared memory segment (see `ringenv/_native.pyi`).
/// Only the creating process may use it; in a fork every call raises `ForkedProcessError`.
#[pyclass(name = "Pool", module = "ringenv._native")]
pub struct PyPool {
    /// The pool; `None` once closed.
    pool: Option<Pool>,
    /// The layout, kept for the read-only getters after close.
    layout: Layout,
    /// The process that created the pool.
    creator_pid: u32,
    /// The worker pids at close, what `worker_pids` reports afterwards.
    last_pids: Vec<u32>,
    /// The envs of the inline worker (the layout's last); `None` without one, or once closed.
    /// (In a mutex only because a pyclass must be `Sync`.)
    inline: Option<Mutex<Box<dyn EnvHost>>>,
    /// Where the Python inline share leaves its messages ([`crate::python_envs::Handover`]).
    handover: Option<Handover>,
    /// What [`PyPool::write_actions`] checks before it writes (`set_action_bounds`).
    action_bounds: ActionBounds,
    /// A close asked for while `wait` or `recv` holds the pool ([`crate::close_request`]).
    closer: Arc<CloseRequest>,
    /// What the last `wait` returned, until the next `submit`, `send` or `close`: a `wait` with
    /// no command pending returns it again (for a caller a Ctrl-C interrupted right after it).
    retained: Option<Waited>,
    /// The last `recv`'s batch until the next `recv` (or `submit`, `close`, `recv_taken`): a
    /// `recv(..., again=True)` returns it, as `retained` does for `wait`.
    received: Option<Py<PyList>>,
}

/// `wait`'s results as Python objects: `(slot, messages, errors, restarted)`.
type Waited = (usize, Py<PyList>, Py<PyList>, Py<PyList>);

impl PyPool {
    /// The open pool, or `ForkedProcessError` in a process other than its creator, or
    /// `ClosedEnvironmentError` once closed.
    fn open(&self, py: Python<'_>) -> PyResult<&Pool> {
        self.owned(py)?;
        self.pool.as_ref().ok_or_else(|| to_pyerr(py, StateError::Closed))
    }

    /// As [`PyPool::open`], mutably.
    fn open_mut(&mut self, py: Python<'_>) -> PyResult<&mut Pool> {
        self.owned(py)?;
        self.pool.as_mut().ok_or_else(|| to_pyerr(py, StateError::Closed))
    }

    /// `ForkedProcessError` in a process other than the pool's creator (checked even once the
    /// pool is closed, whose runtime state is gone).
    fn owned(&self, py: Python<'_>) -> PyResult<()> {
        match current_pid() {
            pid if pid == self.creator_pid => Ok(()),
            pid => Err(to_pyerr(py, StateError::ForkedChild { creator_pid: self.creator_pid, pid })),
        }
    }

    /// Runs the inline worker's pending command, if any, on the envs this process hosts and
    /// completes it in the pool; returns how long it ran (`None`: nothing to run). An env's
    /// exception becomes that worker's error, as in a worker process; a panic becomes
    /// `InternalError`.
    fn run_inline(&mut self, py: Python<'_>) -> PyResult<Option<Duration>> {
        self.open(py)?;
        let (Some(pool), Some(host)) = (self.pool.as_mut(), self.inline.as_mut()) else { return Ok(None) };
        let host = host.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some((kind, slot, message)) = pool.inline_command() else { return Ok(None) };
        let message = message.map(<[u8]>::to_vec);
        let started = Instant::now();
        let entered = crate::exit_guard::enter(py);
        let result = catch(|| host.run(kind, &mut pool.batch_mut(slot), slot, message.as_deref()))
            .map_err(|message| internal_error(py, message))?;
        drop(entered);
        let busy = started.elapsed();
        pool.complete_inline(result, busy).map_err(|e| to_pyerr(py, e))?;
        // Ctrl-C in the share: raised now; the command stays pending for the worker processes.
        if let Some(interrupt) = crate::python_envs::take_interrupt() {
            return Err(interrupt);
        }
        Ok(Some(busy))
    }

    /// Runs the inline worker's pending command ([`PyPool::run_inline`]), then returns what is left
    /// of `timeout` seconds for the wait on the worker processes (`None`: no limit).
    ///
    /// # Errors
    /// `multiprocessing.TimeoutError` when the inline share alone took `timeout` or longer (the
    /// command stays pending, its inline share done).
    fn run_inline_within(&mut self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<f64>> {
        let ran = self.run_inline(py)?;
        let Some(t) = timeout else { return Ok(None) };
        let left = t - ran.unwrap_or_default().as_secs_f64();
        if ran.is_some() && left <= 0.0 {
            let waiting_for = self.pool.as_ref().and_then(Pool::inline_worker).into_iter().collect();
            return Err(to_pyerr(py, WaitError::Timeout { seconds: t.max(0.0), waiting_for }));
        }
        Ok(Some(left.max(0.0)))
    }

    /// Worker `w`'s message: the bytes a worker process sent, or the inline share's step or reset
    /// message itself (its [`Handover`]), which the share completes with an empty payload.
    ///
    /// # Errors
    /// `InternalError` when the inline share completed with a message but left none to take.
    fn message<'py>(&self, py: Python<'py>, w: usize, bytes: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        match &self.handover {
            Some(handover) if bytes.is_empty() && self.pool.as_ref().and_then(Pool::inline_worker) == Some(w) => {
                let kept = handover.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
                kept.map(|m| m.into_bound(py))
                    .ok_or_else(|| internal_error(py, "the inline share's message was not handed over".into()))
            }
            _ => Ok(PyBytes::new(py, bytes).into_any()),
        }
    }

    /// Closes the inline envs (in the creator process only) under [`crate::exit_guard::enter`].
    /// Returns the `KeyboardInterrupt` or `SystemExit` an env's `close` raised, for the caller to
    /// raise once the rest of the close is done.
    fn close_inline(&mut self) -> Option<PyErr> {
        self.handover = None;
        let host = self.inline.take()?;
        if current_pid() != self.creator_pid {
            return None;
        }
        let mut host = host.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        Python::attach(|py| {
            let _entered = crate::exit_guard::enter(py);
            drop(crate::python_envs::take_interrupt()); // only this close's own is returned
            let _ = catch(move || host.close());
        });
        crate::python_envs::take_interrupt()
    }

    /// After `wait` or `recv` (`call`): when a close was asked for meanwhile
    /// ([`crate::close_request`]), closes the pool with the requested timeout and returns the
    /// call's error, or `ClosedEnvironmentError` in place of its results; else the result as it is.
    fn close_if_requested<T>(&mut self, py: Python<'_>, result: PyResult<T>, call: &str) -> PyResult<T> {
        if !self.closer.requested() || self.pool.is_none() {
            return result;
        }
        let timeout = self.closer.timeout();
        self.close_pool(py, timeout)?;
        Err(result.err().unwrap_or_else(|| closed_while_waiting(py, call)))
    }

    /// Stops the workers (waits up to `timeout` seconds, `None`: as long as their envs' `close`
    /// takes; kills the rest; [`Pool::await_close`]), then releases every OS resource of the pool
    /// in this process; the mapping goes with the last NumPy array over it. Idempotent. In a fork
    /// it only lets go of this process's handle.
    ///
    /// # Errors
    /// A `KeyboardInterrupt` or `SystemExit` raised while envs closed, once the close is complete;
    /// `InternalError` on a panic.
    fn close_pool(&mut self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let timeout = timeout.map(|t| seconds("timeout", t.max(0.0))).transpose()?;
        (self.retained, self.received) = (None, None);
        // The worker processes are told first, so they close their envs while the share does.
        let mut closed = Ok(());
        if let Some(pool) = self.pool.as_mut() {
            self.last_pids = pool.worker_pids();
            closed = if timeout == Some(Duration::ZERO) {
                py.detach(|| catch(|| pool.close(Duration::ZERO))).map_err(|message| internal_error(py, message))
            } else {
                pool.request_close();
                Ok(())
            };
        }
        let interrupt = self.close_inline();
        if let Some(mut pool) = self.pool.take() {
            closed = closed.and(await_close(py, &mut pool, timeout)).and(
                py.detach(|| {
                    catch(move || {
                        pool.close(Duration::ZERO); // the workers still running (none, unless warned of) are killed
                        drop(pool);
                    })
                })
                .map_err(|message| internal_error(py, message)),
            );
        }
        self.closer.set_closed();
        // A Ctrl-C in an inline env's `close`: raised now that everything else is closed.
        interrupt.map_or(closed, Err)
    }

    fn check_worker(&self, worker: usize) -> PyResult<()> {
        let n = self.layout.num_workers;
        if worker >= n {
            return Err(PyValueError::new_err(format!("no worker {worker}: the pool has {n}")));
        }
        Ok(())
    }
}

impl Drop for PyPool {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.as_mut() {
            pool.request_close(); // the workers close their envs while the share's close here
        }
        if let Some(interrupt) = self.close_inline() {
            // freed, not closed: nothing to raise it to (a `__del__` closes the env first)
            Python::attach(|py| interrupt.write_unraisable(py, None));
        }
        // The pool's drop stops the workers and releases everything.
        self.pool = None;
    }
}

#[pymethods]
impl PyPool {
    #[new]
    #[pyo3(signature = (num_envs, num_workers, obs_leaves, action_leaves, argv, init, env=Vec::new(), depth=2, startup_timeout=60.0, spin_us=None, on_worker_failure="raise", max_restarts=3, restart_window=60.0, info_arena_bytes=None, inline=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        num_envs: usize,
        num_workers: usize,
        obs_leaves: Vec<(String, Vec<usize>)>,
        action_leaves: Vec<(String, Vec<usize>)>,
        argv: Vec<String>,
        init: Vec<PyBackedBytes>,
        env: Vec<(String, String)>,
        depth: usize,
        startup_timeout: f64,
        spin_us: Option<f64>,
        on_worker_failure: &str,
        max_restarts: u32,
        restart_window: f64,
        info_arena_bytes: Option<usize>,
        inline: Option<&str>,
    ) -> PyResult<PyPool> {
        let python_host = match inline {
            None => None,
            Some("python") => Some(true),
            Some("rust") => Some(false),
            Some(other) => {
                return Err(PyValueError::new_err(format!("inline must be None, 'python' or 'rust', got {other:?}")))
            }
        };
        let on_failure = match on_worker_failure {
            "raise" => FailurePolicy::Raise,
            "restart" => FailurePolicy::Restart(RestartPolicy {
                max_failures: max_restarts,
                window: seconds("restart_window", restart_window)?,
            }),
            other => {
                return Err(PyValueError::new_err(format!(
                    "on_worker_failure must be 'raise' or 'restart', got {other:?}"
                )))
            }
        };
        let leaves = Leaves { obs: &obs_leaves, action: &action_leaves };
        let layout = layout_of(py, num_envs, num_workers, depth, &leaves, info_arena_bytes)?;
        let (program, args) =
            argv.split_first().ok_or_else(|| PyValueError::new_err("argv must name the worker program"))?;
        let mut command = WorkerCommand::new(program);
        command.args = args.iter().map(Into::into).collect();
        command.env = env.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        if init.is_empty() {
            return Err(PyValueError::new_err("init must hold one payload, or one per worker"));
        }
        let closer: Arc<CloseRequest> = Arc::default();
        let asked = Arc::clone(&closer);
        let config = PoolConfig {
            layout,
            command,
            init: copy_payloads(&init)?,
            startup_timeout: seconds("startup_timeout", startup_timeout)?,
            spin: match spin_us {
                None => SpinPolicy::default(),
                Some(us) => SpinPolicy {
                    spin: Duration::try_from_secs_f64(us / 1e6).map_err(|_| {
                        PyValueError::new_err(format!(
                            "spin_us must be None or a number of microseconds >= 0, got {us}"
                        ))
                    })?,
                },
            },
            on_failure,
            cancel: Some(Arc::new(move || cancelled(&asked))),
            inline: python_host.is_some(),
        };
        let layout = config.layout.clone();
        SIGNAL_RAISED.with(|s| s.borrow_mut().take());
        let spawned = py.detach(|| catch(|| Pool::spawn(config))).map_err(|message| internal_error(py, message))?;
        if let Some(e) = SIGNAL_RAISED.with(|s| s.borrow_mut().take()) {
            return Err(e); // Ctrl-C during start-up: the workers were stopped
        }
        let mut pool = spawned.map_err(|e| to_pyerr(py, e))?;
        let handover: Option<Handover> = (python_host == Some(true)).then(Handover::default);
        let host = match (python_host, pool.inline_worker()) {
            (Some(python), Some(w)) => {
                let init = pool.init_payload(w);
                let env_ids = layout.worker_envs(w);
                let built = catch(|| {
                    if python {
                        crate::python_envs::build_for(py, init, pool.segment(), env_ids.clone(), handover.clone())
                    } else {
                        ringenv_worker::registration::build_host_for(init, env_ids.clone(), &layout)
                    }
                })
                .map_err(|message| internal_error(py, message))?;
                match built {
                    Ok(host) => Some(Mutex::new(host)),
                    Err(error) => {
                        pool.close(Duration::ZERO);
                        return Err(to_pyerr(py, SpawnError::Startup { worker: w, env_ids, error: Box::new(error) }));
                    }
                }
            }
            _ => None,
        };
        Ok(PyPool {
            pool: Some(pool),
            layout,
            creator_pid: current_pid(),
            last_pids: Vec::new(),
            inline: host,
            handover,
            action_bounds: ActionBounds::Unchecked,
            closer,
            retained: None,
            received: None,
        })
    }

    /// Bytes of the segment a pool with these arguments would map (the layout's total size,
    /// a multiple of 4096), computed without allocating anything.
    ///
    /// Raises `ValueError` for arguments no layout fits (zero envs or workers, more workers than
    /// envs, a size that overflows).
    #[staticmethod]
    #[pyo3(signature = (num_envs, num_workers, obs_leaves, action_leaves, depth=2))]
    fn segment_size(
        py: Python<'_>,
        num_envs: usize,
        num_workers: usize,
        obs_leaves: Vec<(String, Vec<usize>)>,
        action_leaves: Vec<(String, Vec<usize>)>,
        depth: usize,
    ) -> PyResult<usize> {
        let leaves = Leaves { obs: &obs_leaves, action: &action_leaves };
        Ok(layout_of(py, num_envs, num_workers, depth, &leaves, None)?.total_size())
    }

    /// The segment as a writable `uint8` NumPy array of shape `(segment_size,)` over the mapping
    /// (no copy; its `.base` is a `Segment`), for `numpy.frombuffer(array, dtype, count, offset)`.
    fn segment<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        PySegment::array(py, self.open(py)?.segment().memory())
    }

    /// Byte offset of `array` (`"obs"`, `"reward"`, `"terminated"`, `"truncated"`, `"action"`,
    /// `"seed"`, `"seed_flags"`; `leaf` picks an observation or action leaf) of slot `slot` in
    /// the segment.
    #[pyo3(signature = (slot, array_name, leaf=0))]
    fn offset(&self, py: Python<'_>, slot: usize, array_name: &str, leaf: usize) -> PyResult<usize> {
        let pool = self.open(py)?;
        let layout = pool.layout();
        if slot >= layout.depth {
            return Err(PyValueError::new_err(format!("slot {slot} out of range (depth {})", layout.depth)));
        }
        let leaves = match array_name {
            "obs" => layout.obs.len(),
            "action" => layout.action.len(),
            _ => 1,
        };
        if leaf >= leaves {
            return Err(PyValueError::new_err(format!("{array_name} has {leaves} leaves, no leaf {leaf}")));
        }
        let view = pool.batch(slot);
        let base = pool.segment().memory().as_ptr() as usize;
        Ok(view.address(array(array_name, leaf)?) - base)
    }

    #[getter]
    fn depth(&self) -> usize {
        self.layout.depth
    }

    /// The layout's workers: the worker processes, and the inline worker if any.
    #[getter]
    fn num_workers(&self) -> usize {
        self.layout.num_workers
    }

    /// The index of the inline worker (the last; its envs are stepped in this process), or
    /// `None` when every worker is a process.
    #[getter]
    fn inline_worker(&self) -> Option<usize> {
        self.pool.as_ref().and_then(Pool::inline_worker)
    }

    /// Whether the pool was closed (its OS resources released in this process).
    #[getter]
    fn closed(&self) -> bool {
        self.pool.is_none()
    }

    /// The env ids of worker `worker`: a tuple of env indices (a contiguous block, ascending).
    /// Raises `ValueError` for a worker index out of range.
    fn env_ids<'py>(&self, py: Python<'py>, worker: usize) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
        self.check_worker(worker)?;
        crate::errors::env_ids_tuple(py, &self.layout.worker_envs(worker))
    }

    /// Messages `(sent, received)` on worker `worker`'s control socket, counted by this process
    /// since the worker (or its latest restart) started. Per-step infos that fit the worker's
    /// info arena add none.
    fn control_message_counts(&self, py: Python<'_>, worker: usize) -> PyResult<(u64, u64)> {
        self.check_worker(worker)?;
        Ok(self.open(py)?.control_message_counts(worker))
    }

    /// Process ids of the workers (after `close`, those they had when it was called).
    fn worker_pids(&self) -> Vec<u32> {
        match &self.pool {
            Some(pool) => pool.worker_pids(),
            None => self.last_pids.clone(),
        }
    }

    /// The slot the next command uses.
    #[getter]
    fn next_slot(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.open(py)?.next_slot())
    }

    #[getter]
    fn pending(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.open(py)?.is_pending())
    }

    /// Sets what [`PyPool::write_actions`] checks: with `low` and `high` (one inclusive bound per
    /// element of one env's action), integers within them; with `nan`, floats that are not NaN;
    /// with neither, nothing.
    ///
    /// # Errors
    /// `ValueError` for `low` without `high` (or of another length), or bounds with `nan`.
    #[pyo3(signature = (low=None, high=None, nan=false))]
    fn set_action_bounds(&mut self, low: Option<Vec<i64>>, high: Option<Vec<i64>>, nan: bool) -> PyResult<()> {
        self.action_bounds = match (low, high, nan) {
            (None, None, false) => ActionBounds::Unchecked,
            (None, None, true) => ActionBounds::NotNan,
            (Some(low), Some(high), false) => ActionBounds::integer(low, high).map_err(PyValueError::new_err)?,
            _ => return Err(PyValueError::new_err("action bounds are low and high together, or nan alone")),
        };
        Ok(())
    }

    /// Checks `actions` (rows in C order, in the action leaf's dtype) against the bounds of
    /// `set_action_bounds` and, when every value passes, copies them into the action rows of each
    /// `(slot, start, stop)` run of `runs` in turn; returns whether it wrote them.
    ///
    /// # Errors
    /// `ValueError` when the pool has no flat action leaf, a run's slot is not a slot or its envs
    /// are not within the pool's, `actions` is not one action per env of the runs, or a worker of
    /// those envs has a command in flight (it may be reading them); `ForkedProcessError`,
    /// `ClosedEnvironmentError` as every call.
    fn write_actions(&mut self, py: Python<'_>, actions: &[u8], runs: Vec<(usize, usize, usize)>) -> PyResult<bool> {
        let runs: Vec<_> = runs.into_iter().map(|(slot, start, stop)| (slot, start..stop)).collect();
        let bounds = &self.action_bounds;
        let Some(pool) = self.pool.as_mut().filter(|_| current_pid() == self.creator_pid) else {
            return self.owned(py).and_then(|()| Err(to_pyerr(py, StateError::Closed)));
        };
        pool.write_actions(&runs, actions, bounds).map_err(|e| to_pyerr(py, e))
    }

    /// Makes `slot` the one the next command of `worker` uses (`None`: of every worker; before
    /// writing its actions or seeds). Raises `ValueError` for a slot or worker out of range,
    /// `AlreadyPendingCallError` while that worker (with `None`, any) has a command in flight.
    #[pyo3(signature = (slot, worker=None))]
    fn set_next_slot(&mut self, py: Python<'_>, slot: usize, worker: Option<usize>) -> PyResult<()> {
        self.open_mut(py)?.set_next_slot(worker, slot).map_err(|e| to_pyerr(py, e))
    }

    /// The slot worker `worker`'s next command uses (write its actions there before `send`).
    fn next_slot_of(&self, py: Python<'_>, worker: usize) -> PyResult<usize> {
        self.check_worker(worker)?;
        Ok(self.open(py)?.next_slot_of(worker))
    }

    /// How many workers have a command in flight.
    #[getter]
    fn in_flight(slf: &Bound<'_, Self>) -> PyResult<usize> {
        let this = slf.try_borrow().map_err(|_| busy())?;
        Ok(this.open(slf.py())?.in_flight())
    }

    /// Whether worker `worker` has a command in flight.
    fn is_busy(&self, py: Python<'_>, worker: usize) -> PyResult<bool> {
        self.check_worker(worker)?;
        Ok(self.open(py)?.is_busy(worker))
    }

    /// Sends `"step"` or `"reset"` to the workers `workers` (each on its own next slot), with an
    /// optional payload each receives; returns at once.
    #[pyo3(signature = (workers, kind, payload=None))]
    fn send(&mut self, py: Python<'_>, workers: Vec<usize>, kind: &str, payload: Option<Vec<u8>>) -> PyResult<()> {
        let kind = command_kind(kind)?;
        self.retained = None;
        // GIL released: a worker whose command ring is corrupt is restarted here.
        let pool = self.open_mut(py)?;
        let sent = py.detach(|| catch(|| pool.send(&workers, kind, payload.as_deref())));
        sent.map_err(|message| internal_error(py, message))?.map_err(|e| to_pyerr(py, e))
    }

    /// Waits (GIL released, checking for Ctrl-C every 100 ms) until `num_workers` workers
    /// finished what `send` sent them: the first to finish, or with `deterministic` the earliest
    /// sent. Returns a list of `(worker, slot, message, error, restarted)`: message bytes or
    /// None, error a dict or None, restarted a dict or None (as in `wait`). With `again`, the
    /// last `recv`'s batch if it still holds one (see `received`).
    #[pyo3(signature = (num_workers, deterministic=false, timeout=None, again=false))]
    #[allow(clippy::type_complexity)]
    fn recv<'py>(
        slf: &Bound<'py, Self>,
        py: Python<'py>,
        num_workers: usize,
        deterministic: bool,
        timeout: Option<f64>,
        again: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut this = held(slf)?;
        let this = &mut *this;
        this.open(py)?;
        if let (true, Some(batch)) = (again, &this.received) {
            return Ok(batch.bind(py).clone());
        }
        this.received = None;
        let waiting = this.closer.enter();
        let result = (|| {
            let order = if deterministic { RecvOrder::Sent } else { RecvOrder::Arrival };
            // The inline share takes its turn in send order (`Pool::inline_due`): run now, it would
            // step its envs more often than those of the worker processes.
            let due = this.open(py)?.inline_due(num_workers);
            let left = if due { this.run_inline_within(py, timeout)? } else { timeout };
            let pool = this.open_mut(py)?;
            let out = wait_released(py, left, timeout, &waiting, "recv", |t| pool.recv(num_workers, order, t))?;
            let list = PyList::empty(py);
            for b in &out {
                let message = b.message.as_ref().map(|m| this.message(py, b.worker, m)).transpose()?;
                let error = b.error.as_ref().map(|e| remote_to_dict(py, e)).transpose()?;
                let restarted = b.restarted.as_ref().map(|f| failure_to_dict(py, f)).transpose()?;
                list.append((b.worker, b.slot, message, error, restarted))?;
            }
            Ok(list)
        })();
        let result = this.close_if_requested(py, result, "recv"); // `waiting` held until the close is done
        if let Ok(batch) = &result {
            this.received = Some(batch.clone().unbind());
        }
        result
    }

    /// Drops the last `recv`'s batch (see `received`): a reset supersedes it.
    fn recv_taken(&mut self) {
        self.received = None;
    }

    /// Writes one reset seed per env (`None`: no seed) into its worker's next slot, and the reset mask
    /// (`None`: reset every env; else envs whose entry is false are not reset).
    #[pyo3(signature = (seeds, mask=None))]
    fn write_seeds(&mut self, py: Python<'_>, seeds: Vec<Option<u64>>, mask: Option<Vec<bool>>) -> PyResult<()> {
        let pool = self.open_mut(py)?;
        let n = pool.layout().num_envs;
        if seeds.len() != n || mask.as_ref().is_some_and(|m| m.len() != n) {
            return Err(PyValueError::new_err(format!("one seed and one mask entry per env ({n}) are needed")));
        }
        guard(py, || {
            pool.write_seeds(&seeds);
            if let Some(mask) = mask {
                pool.write_reset_mask(&mask);
            }
            Ok(())
        })
    }

    /// Sends `"step"` or `"reset"` to every worker, with an optional payload. Returns the slot.
    #[pyo3(signature = (kind, payload=None))]
    fn submit(&mut self, py: Python<'_>, kind: &str, payload: Option<Vec<u8>>) -> PyResult<usize> {
        let kind = command_kind(kind)?;
        (self.retained, self.received) = (None, None);
        // GIL released: a worker whose command ring is corrupt is restarted here.
        let pool = self.open_mut(py)?;
        let sent = py.detach(|| catch(|| pool.submit(kind, payload.as_deref())));
        sent.map_err(|message| internal_error(py, message))?.map_err(|e| to_pyerr(py, e))
    }

    /// Waits for the pending command (GIL released, checking for Ctrl-C every 100 ms). Returns
    /// `(slot, messages, errors, restarted)`: messages a list of `(worker, bytes)`, errors a list
    /// of `(worker, dict)`, restarted a list of dicts (`worker`, `pid`, `env_ids`, `exitcode`,
    /// `signal`) of workers that died during the command and were restarted. With no command
    /// pending, the same results (objects) as the last `wait`, if no `submit`, `send` or `close`
    /// came since (see `retained`).
    #[pyo3(signature = (timeout=None))]
    #[allow(clippy::type_complexity)]
    fn wait<'py>(
        slf: &Bound<'py, Self>,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<(usize, Bound<'py, PyList>, Bound<'py, PyList>, Bound<'py, PyList>)> {
        let mut this = held(slf)?;
        let this = &mut *this;
        if let Some((slot, messages, errors, restarted)) = &this.retained {
            if !this.open(py)?.is_pending() {
                return Ok((*slot, messages.bind(py).clone(), errors.bind(py).clone(), restarted.bind(py).clone()));
            }
        }
        let waiting = this.closer.enter();
        let result = (|| {
            let left = this.run_inline_within(py, timeout)?;
            let pool = this.open_mut(py)?;
            let out = wait_released(py, left, timeout, &waiting, "wait", |t| pool.wait(t))?;
            let messages = PyList::empty(py);
            for (w, bytes) in &out.messages {
                messages.append((w, this.message(py, *w, bytes)?))?;
            }
            let errors = PyList::empty(py);
            for (w, e) in &out.errors {
                errors.append((w, remote_to_dict(py, e)?))?;
            }
            let restarted = PyList::empty(py);
            for (_, f) in &out.restarted {
                restarted.append(failure_to_dict(py, f)?)?;
            }
            Ok((out.slot, messages, errors, restarted))
        })();
        let result = this.close_if_requested(py, result, "wait"); // `waiting` held until the close is done
        if let Ok((slot, messages, errors, restarted)) = &result {
            let own = |list: &Bound<'py, PyList>| list.clone().unbind();
            this.retained = Some((*slot, own(messages), own(errors), own(restarted)));
        }
        result
    }

    /// Stops the workers and releases the pool's OS resources ([`PyPool::close_pool`]).
    ///
    /// # Errors
    /// `Busy` while another call holds the pool (a wait: ask its closer instead); those of
    /// [`PyPool::close_pool`].
    #[pyo3(signature = (timeout=Some(1.0)), text_signature = "($self, timeout=1.0)")]
    fn close(slf: &Bound<'_, Self>, timeout: Option<f64>) -> PyResult<()> {
        held(slf)?.close_pool(slf.py(), timeout)
    }

    /// The pool's closer: `request(timeout)` asks a `wait` or `recv` in progress (in another
    /// thread, or under a signal handler) to close the pool, without borrowing it.
    fn closer(&self) -> PyPoolCloser {
        PyPoolCloser { shared: Arc::clone(&self.closer) }
    }

    fn __repr__(&self) -> String {
        let l = &self.layout;
        let (obs, action) = (l.obs.len(), l.action.len());
        format!(
            "Pool(num_envs={}, num_workers={}, obs_leaves={obs}, action_leaves={action}{})",
            l.num_envs,
            l.num_workers,
            if self.pool.is_none() { ", closed" } else { "" }
        )
    }

    /// A dict describing the layout (for debugging and tests).
    fn layout<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let l = &self.layout;
        let d = PyDict::new(py);
        d.set_item("num_envs", l.num_envs)?;
        d.set_item("num_workers", l.num_workers)?;
        d.set_item("depth", l.depth)?;
        d.set_item("total_size", l.total_size())?;
        d.set_item("info_arena_bytes", l.info_arena_bytes())?;
        let arenas: Vec<usize> = (0..l.num_workers).map(|w| l.info_arena_offset(w)).collect();
        d.set_item("info_arena_offsets", arenas)?;
        // Byte offsets of each worker's command and completion rings (for tests that corrupt them).
        let rings: Vec<(usize, usize)> =
            (0..l.num_workers).map(|w| (l.command_ring_offset(w), l.completion_ring_offset(w))).collect();
        d.set_item("ring_offsets", rings)?;
        d.set_item("ring_bytes", l.completion_ring_offset(0) - l.command_ring_offset(0))?;
        Ok(d)
    }
}
