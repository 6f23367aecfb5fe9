//! `ringenv._native.Pool`: the runtime's pool for Python, with the GIL released while it waits.
//!
//! With `inline="python"` or `"rust"`, the pool's last worker is this process
//! ([`ringenv_runtime::PoolConfig::inline`]): its envs are built here by the same host a worker
//! process runs (`crate::python_envs` or the built-in registry), and each `wait` or `recv` first
//! runs that share's pending command, then waits for the worker processes.

use crate::close_request::{closed_while_waiting, CloseRequest, PyPoolCloser};
use crate::errors::{catch, guard, internal_error, remote_to_dict, to_pyerr};
use crate::py_segment::PySegment;
use crate::python_envs::Handover;
use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyList};
use ringenv_runtime::{
    current_pid, ActionBounds, Array, ArraySpec, CommandKind, DType, ExitStatus, FailurePolicy, Layout, Pool,
    PoolConfig, PoolError, RecvOrder, RemoteError, RestartPolicy, SpinPolicy, WorkerCommand, WorkerFailure,
    DEFAULT_INFO_ARENA,
};
use ringenv_worker::host::EnvHost;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a blocking wait checks for signals such as Ctrl-C.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

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

/// The observation and action leaves (`(numpy dtype name, shape)` each) and the reward dtype of a
/// pool, as Python passes them.
struct Leaves<'a> {
    obs: &'a [(String, Vec<usize>)],
    action: &'a [(String, Vec<usize>)],
    reward: &'a str,
}

/// The layout of a pool (what `Pool(...)` maps and `Pool.segment_size(...)` reports), with info
/// arenas of `info_arena_bytes` per worker (`None`: the default, 64 KiB).
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
        dtype("reward", leaves.reward)?,
    )
    .and_then(|l| l.with_info_arena(info_arena_bytes.unwrap_or(DEFAULT_INFO_ARENA)))
    .map_err(|e| to_pyerr(py, PoolError::Layout(e)))
}

/// `payloads` copied into Rust buffers, each allocated fallibly: an init payload holds the
/// pickled factories and spaces (hundreds of MB for a big `Box` space), and where memory is
/// limited (`ulimit -v`) Rust's infallible allocation would abort the process.
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

fn seconds(what: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| PyValueError::new_err(format!("{what} must be a non-negative number of seconds, got {s}")))
}

/// How long `close` with no timeout waits for a worker's envs to close before it warns that it
/// is still waiting (it goes on waiting), in seconds.
const CLOSE_PATIENCE_S: u64 = 10;

/// How long `close` with no timeout gives a worker to take its `Close` command: one that has not
/// by then (stopped, stuck in an env's step, its command ring unusable) is not closing its envs
/// and is killed. The grace every worker had before `close` waited for the envs' own `close`.
const CLOSE_TAKEN_S: u64 = 1;

/// Waits for the workers of `pool`, asked to close (`Pool::request_close`), to close their envs
/// and exit: until `deadline` (`timeout` seconds after `close` began), or with none as long as
/// the envs' `close` takes in the workers that took their `Close` command
/// ([`Pool::is_closing`]; one that has not within [`CLOSE_TAKEN_S`] is left to be killed), in
/// slices of 100 ms with the GIL released between which signal handlers run, with a
/// `RuntimeWarning` once after [`CLOSE_PATIENCE_S`] naming the workers still closing. Workers
/// left running are named in a `RuntimeWarning`: the caller kills them next.
///
/// # Errors
/// A signal handler's exception (a Ctrl-C), which ends the wait.
fn await_workers(
    py: Python<'_>,
    pool: &mut Pool,
    layout: &Layout,
    timeout: Option<f64>,
    deadline: Option<Instant>,
) -> PyResult<()> {
    // "worker 0 (pid 7, envs [0, 1]) had", or "workers 0 (pid 7, envs [0, 1]) and 1 (...) had".
    let name = |pool: &Pool, running: &[usize]| -> String {
        let pids = pool.worker_pids();
        let each: Vec<String> = running
            .iter()
            .map(|&w| {
                let pid = pids.get(w).copied().unwrap_or(0);
                format!("{w} (pid {pid}, envs {})", ringenv_runtime::EnvIds(&layout.worker_envs(w)))
            })
            .collect();
        match each.split_last() {
            Some((last, [])) => format!("worker {last}"),
            Some((last, rest)) => format!("workers {} and {last}", rest.join(", ")),
            None => String::new(),
        }
    };
    let warn = |text: String| {
        let message = std::ffi::CString::new(text.replace('\0', " ")).unwrap_or_default();
        let _ = PyErr::warn(py, &py.get_type::<pyo3::exceptions::PyRuntimeWarning>(), &message, 1);
    };
    if let Some(deadline) = deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        let running = py.detach(|| pool.await_exit(left));
        if !running.is_empty() {
            warn(format!(
                "close: {} had not closed {} envs within {} s (close's timeout) and {} killed, the envs' close() cut \
                 short; close() with no timeout waits as long as they take",
                name(pool, &running),
                if running.len() == 1 { "its" } else { "their" },
                timeout.unwrap_or_default(),
                if running.len() == 1 { "was" } else { "were" },
            ));
        }
        return Ok(());
    }
    let start = Instant::now();
    let mut warned = false;
    loop {
        let running = py.detach(|| pool.await_exit(Duration::from_millis(100)));
        if running.is_empty() {
            return Ok(());
        }
        py.check_signals()?;
        if start.elapsed() >= Duration::from_secs(CLOSE_TAKEN_S) && !running.iter().any(|&w| pool.is_closing(w)) {
            warn(format!(
                "close: {} had not taken {} Close command within {CLOSE_TAKEN_S} s (a stopped process, one stuck in \
                 an env's step or reset, or an unusable command ring) and {} killed",
                name(pool, &running),
                if running.len() == 1 { "its" } else { "their" },
                if running.len() == 1 { "was" } else { "were" },
            ));
            return Ok(());
        }
        if !warned && start.elapsed() >= Duration::from_secs(CLOSE_PATIENCE_S) {
            warned = true;
            warn(format!(
                "close: {} {} been closing {} envs for {CLOSE_PATIENCE_S} s; close() waits as long as they take, \
                 as Gymnasium's does (Ctrl-C, close(timeout=...) or close(terminate=True) kill the workers instead)",
                name(pool, &running),
                if running.len() == 1 { "has" } else { "have" },
                if running.len() == 1 { "its" } else { "their" },
            ));
        }
    }
}

/// Runs `wait(slice)` in slices of at most 100 ms with the GIL released, checking for signals
/// (Ctrl-C) between slices, until it returns or `timeout` seconds (`None`: forever) passed; a
/// close asked for meanwhile (`closer`, from another thread or a signal handler) ends it with
/// `ClosedEnvironmentError` (`call` names the waiting call) before the next slice. The timeout
/// error names `asked`, the caller's timeout (of which the inline share may have used a part
/// before this wait).
fn wait_in_slices<T: Send>(
    py: Python<'_>,
    timeout: Option<f64>,
    asked: Option<f64>,
    closer: &CloseRequest,
    call: &str,
    mut wait: impl FnMut(Duration) -> Result<T, PoolError> + Send,
) -> PyResult<T> {
    let timeout = timeout.map(|t| seconds("timeout", t.max(0.0))).transpose()?;
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        if closer.requested() {
            return Err(closed_while_waiting(py, call));
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let slice = left.map_or(SIGNAL_CHECK, |l| l.min(SIGNAL_CHECK));
        // A panic in the runtime becomes `InternalError`, never `PanicException`.
        let result = py.detach(|| catch(|| wait(slice))).map_err(|message| internal_error(py, message))?;
        if let Some(e) = SIGNAL_RAISED.with(|s| s.borrow_mut().take()) {
            return Err(e); // Ctrl-C while a replacement worker started (the pool is failed)
        }
        match result {
            Err(PoolError::Timeout { .. }) if left.is_none_or(|l| l > slice) => py.check_signals()?,
            Err(PoolError::Timeout { waiting_for, .. }) => {
                let seconds = asked.unwrap_or_default().max(0.0); // (a timeout error needs one)
                return Err(to_pyerr(py, PoolError::Timeout { seconds, waiting_for }));
            }
            other => return other.map_err(|e| to_pyerr(py, e)),
        }
    }
}

/// A worker failure as the dict Python sees (`worker`, `pid`, `env_ids`, `exitcode`, `signal`,
/// `status`, `last_error`: a dict or None).
fn failure_to_dict<'py>(py: Python<'py>, w: usize, f: &WorkerFailure) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("worker", w)?;
    d.set_item("pid", f.pid)?;
    d.set_item("env_ids", crate::errors::env_ids_tuple(py, &f.env_ids)?)?;
    d.set_item("exitcode", if let ExitStatus::Exited(c) = f.status { Some(c) } else { None })?;
    d.set_item("signal", if let ExitStatus::Signaled(s) = f.status { Some(s) } else { None })?;
    d.set_item("status", f.status.to_string())?;
    // Why it was replaced when it did not simply die (a protocol error, a corrupt segment).
    d.set_item("last_error", f.last_error.as_deref().map(|e| remote_to_dict(py, e)).transpose()?)?;
    Ok(d)
}

thread_local! {
    /// The exception (KeyboardInterrupt, ...) a signal handler raised while a worker started (in
    /// `Pool.__new__` or a restart), for the caller to raise once the runtime returned.
    static SIGNAL_RAISED: std::cell::RefCell<Option<PyErr>> = const { std::cell::RefCell::new(None) };
}

/// `PoolConfig::cancel` of a pool started from Python: runs the pending signal handlers (Ctrl-C)
/// with the GIL and keeps the exception one raised, for `Pool.__new__` to raise.
fn start_interrupted() -> bool {
    match Python::attach(|py| py.check_signals()) {
        Ok(()) => false,
        Err(e) => {
            SIGNAL_RAISED.with(|s| *s.borrow_mut() = Some(e));
            true
        }
    }
}

/// `ringenv.errors.ForkedProcessError` for a pool created by process `creator` used in `pid`.
fn forked_error(py: Python<'_>, creator: u32, pid: u32) -> PyErr {
    let message = format!(
        "this ringenv pool was created by process {creator} and cannot be used in process {pid}, a fork of it \
         (os.fork, multiprocessing's 'fork' start method, a DataLoader worker): create a new env in this \
         process instead; closing or dropping the inherited one here only releases this process's copy"
    );
    let built =
        py.import("ringenv.errors").and_then(|m| m.getattr("ForkedProcessError")?.call1((message, creator, pid)));
    match built {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

/// Lets go of a pool in a process that did not create it (a forked child): `Pool`'s own `Drop`
/// sees the foreign process and releases only this process's copies of the descriptors and of
/// the mapping, sending no command and no signal to the creator's workers.
fn let_go_in_child(pool: Pool) {
    drop(pool);
}

/// A pool of worker processes over one shared memory segment.
///
/// Constructed by `ringenv.AsyncVectorEnv`; see `ringenv/_native.pyi` for the signature.
///
/// `close()` stops the workers and releases every OS resource the pool holds in this process at
/// once: the segment's descriptor, the control sockets and the pidfds.
/// The mapping itself stays while NumPy arrays over it (made from `segment()`) are alive, so such
/// arrays never point at unmapped memory; it is unmapped when the last one dies.
///
/// Only the creating process may use the pool. In another process (a fork) every call raises
/// `ringenv.errors.ForkedProcessError`, and `close()` or garbage collection lets go of the
/// inherited handle without messaging or stopping the creator's workers.
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
    /// The envs of the inline worker (the layout's last), stepped in this process; `None` when
    /// every worker is a process, or once closed. (In a mutex only because a pyclass must be
    /// `Sync`; the pool's methods take `&mut self`, so it is never contended.)
    inline: Option<Mutex<Box<dyn EnvHost>>>,
    /// Where the Python inline share leaves its messages as Python objects (not pickled; see
    /// [`crate::python_envs::Handover`]); `None` without a Python inline share.
    handover: Option<Handover>,
    /// What [`PyPool::write_actions`] checks before it writes (`set_action_bounds`).
    action_bounds: ActionBounds,
    /// A close asked for while `wait` or `recv` holds the pool ([`crate::close_request`]).
    closer: Arc<CloseRequest>,
    /// What the last `wait` returned, until the next `submit`, `send` or `close`: a `wait` with
    /// no command pending returns it again. A signal handler's exception (Ctrl-C) raised in the
    /// caller right after `wait` returned, before it recorded the results, discards them there,
    /// while here the command is complete; the caller, still waiting by its own account, gets
    /// them from its next `wait` instead of "no command is pending".
    retained: Option<Waited>,
    /// The last `recv`'s batch until the next `recv` (or `submit`, `close`, `recv_taken`): a
    /// `recv(..., again=True)` returns it instead of waiting for a new one. As for `retained`: a
    /// Ctrl-C raised in the caller right after `recv` returned (a wait that a finished batch ends
    /// is where a Ctrl-C pressed during it is raised) discards the batch there, while here its
    /// workers are no longer in flight; the caller, which knows it did not finish taking the
    /// batch, asks for it again instead of getting "0 have a command in flight" with those envs
    /// refused by `send` as not received.
    received: Option<Py<PyList>>,
}

/// `wait`'s results as Python objects: `(slot, messages, errors, restarted)`.
type Waited = (usize, Py<PyList>, Py<PyList>, Py<PyList>);

impl PyPool {
    /// The open pool, or `ForkedProcessError` in a process other than its creator, or
    /// `ClosedEnvironmentError` once closed.
    fn open(&self, py: Python<'_>) -> PyResult<&Pool> {
        let pid = current_pid();
        if pid != self.creator_pid {
            return Err(forked_error(py, self.creator_pid, pid));
        }
        self.pool.as_ref().ok_or_else(|| to_pyerr(py, PoolError::Closed))
    }

    /// As [`PyPool::open`], mutably.
    fn open_mut(&mut self, py: Python<'_>) -> PyResult<&mut Pool> {
        let pid = current_pid();
        if pid != self.creator_pid {
            return Err(forked_error(py, self.creator_pid, pid));
        }
        self.pool.as_mut().ok_or_else(|| to_pyerr(py, PoolError::Closed))
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
        let result = catch(|| match kind {
            CommandKind::Step => host.step(&mut pool.batch_mut(slot), slot, message.as_deref()),
            CommandKind::Reset => host.reset(&mut pool.batch_mut(slot), slot, message.as_deref()),
            CommandKind::Call => host.call(message.as_deref().unwrap_or_default()),
            other => Err(RemoteError {
                kind: "ValueError".into(),
                message: format!("the inline worker cannot run a {other:?} command"),
                ..Default::default()
            }),
        })
        .map_err(|message| internal_error(py, message))?;
        drop(entered);
        let busy = started.elapsed();
        pool.complete_inline(result, busy).map_err(|e| to_pyerr(py, e))?;
        // Ctrl-C (or `sys.exit` in a signal handler) in the share: raised now, not after the
        // worker processes finish (the command stays pending for them; the share's part of it
        // reports the interruption as its error when it is collected).
        if let Some(interrupt) = crate::python_envs::take_interrupt() {
            return Err(interrupt);
        }
        Ok(Some(busy))
    }

    /// Runs the inline worker's pending command ([`PyPool::run_inline`]), then returns what is left
    /// of `timeout` seconds for the wait on the worker processes (`None`: no limit). The inline
    /// share cannot be interrupted: a timeout shorter than it is noticed after it, and the
    /// command stays pending with that share done.
    ///
    /// # Errors
    /// The timeout error (`multiprocessing.TimeoutError`) when the inline share alone took
    /// `timeout` or longer: the call did not finish in time, whatever the processes did, as
    /// Gymnasium's `step_wait(timeout)` promises; the command stays pending, its inline share done.
    fn run_inline_within(&mut self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<f64>> {
        let ran = self.run_inline(py)?;
        let Some(t) = timeout else { return Ok(None) };
        let left = t - ran.unwrap_or_default().as_secs_f64();
        if ran.is_some() && left <= 0.0 {
            let waiting_for = self.pool.as_ref().and_then(Pool::inline_worker).into_iter().collect();
            return Err(to_pyerr(py, PoolError::Timeout { seconds: t.max(0.0), waiting_for }));
        }
        Ok(Some(left.max(0.0)))
    }

    /// Worker `w`'s message as Python sees it: the bytes a worker process sent, or the inline
    /// share's step or reset message itself (its [`Handover`]: the tuple those bytes would unpickle
    /// to), which the share completes with an empty payload (a pickle is never empty; a `call`'s
    /// results stay pickled).
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

    /// Closes the inline envs (in the creator process only: a fork child's copy is let go). Their
    /// `close` is one of the share's calls into Python ([`crate::exit_guard::enter`]): a daemon
    /// thread closing them when the interpreter exits is let finish, or parked, not unwound.
    /// Returns the `KeyboardInterrupt` or `SystemExit` an env's `close` raised (a Ctrl-C while
    /// it closed), for the caller to raise once the rest of the close is done; it is never left
    /// in this thread for a later call to raise.
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
        self.close(py, timeout)?;
        Err(result.err().unwrap_or_else(|| closed_while_waiting(py, call)))
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
        if let (true, Some(pool)) = (current_pid() == self.creator_pid, self.pool.as_mut()) {
            pool.request_close(); // the workers close their envs while the share's close here
        }
        if let Some(interrupt) = self.close_inline() {
            // freed, not closed: nothing to raise it to (a `__del__` closes the env first)
            Python::attach(|py| interrupt.write_unraisable(py, None));
        }
        if let Some(pool) = self.pool.take() {
            if current_pid() == self.creator_pid {
                drop(pool); // stops the workers, then releases everything
            } else {
                let_go_in_child(pool);
            }
        }
    }
}

#[pymethods]
impl PyPool {
    #[new]
    #[pyo3(signature = (num_envs, num_workers, obs_leaves, action_leaves, reward_dtype, argv, init, env=Vec::new(), depth=2, startup_timeout=60.0, spin_us=None, on_worker_failure="raise", max_restarts=3, restart_window=60.0, info_arena_bytes=None, inline=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        num_envs: usize,
        num_workers: usize,
        obs_leaves: Vec<(String, Vec<usize>)>,
        action_leaves: Vec<(String, Vec<usize>)>,
        reward_dtype: &str,
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
        let leaves = Leaves { obs: &obs_leaves, action: &action_leaves, reward: reward_dtype };
        let layout = layout_of(py, num_envs, num_workers, depth, &leaves, info_arena_bytes)?;
        let (program, args) =
            argv.split_first().ok_or_else(|| PyValueError::new_err("argv must name the worker program"))?;
        let mut command = WorkerCommand::new(program);
        command.args = args.iter().map(Into::into).collect();
        command.env = env.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        if init.is_empty() {
            return Err(PyValueError::new_err("init must hold one payload, or one per worker"));
        }
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
            cancel: Some(start_interrupted),
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
                        return Err(to_pyerr(py, PoolError::Startup { worker: w, env_ids, error: Box::new(error) }));
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
            closer: Arc::default(),
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
    #[pyo3(signature = (num_envs, num_workers, obs_leaves, action_leaves, reward_dtype, depth=2))]
    fn segment_size(
        py: Python<'_>,
        num_envs: usize,
        num_workers: usize,
        obs_leaves: Vec<(String, Vec<usize>)>,
        action_leaves: Vec<(String, Vec<usize>)>,
        reward_dtype: &str,
        depth: usize,
    ) -> PyResult<usize> {
        let leaves = Leaves { obs: &obs_leaves, action: &action_leaves, reward: reward_dtype };
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

    /// Checks `actions` (rows of actions one after the other, in C order, in the action leaf's
    /// dtype) against the bounds of `set_action_bounds` and, when every value passes, copies them
    /// into the action rows of each `(slot, start, stop)` run of `runs` in turn (envs `start..stop`
    /// of slot `slot`: the first `stop - start` rows into the first run, and so on); returns
    /// whether it wrote them. Nothing is written when a value is refused: the caller finds and
    /// names it.
    ///
    /// # Errors
    /// `ValueError` when the pool has no flat action leaf, a run's slot is not a slot or its envs
    /// are not within the pool's, `actions` is not one action per env of the runs, or a worker of
    /// those envs has a command in flight (it may be reading them); `ForkedProcessError`,
    /// `ClosedEnvironmentError` as every call.
    fn write_actions(&mut self, py: Python<'_>, actions: &[u8], runs: Vec<(usize, usize, usize)>) -> PyResult<bool> {
        let layout = &self.layout;
        let (n, depth) = (layout.num_envs, layout.depth);
        let (dtype, elements) = match layout.action.as_slice() {
            [leaf] => (leaf.dtype, leaf.elements()),
            _ => return Err(PyValueError::new_err("this pool's actions do not cross through shared memory")),
        };
        let row = elements * dtype.size();
        let mut count = 0;
        for &(slot, start, stop) in &runs {
            if slot >= depth {
                return Err(PyValueError::new_err(format!("no slot {slot}: the pool has {depth}")));
            }
            if start > stop || stop > n {
                return Err(PyValueError::new_err(format!(
                    "envs {start}..{stop} are not envs of this pool ({n} envs)"
                )));
            }
            count += stop - start;
        }
        if count * row != actions.len() {
            return Err(PyValueError::new_err(format!(
                "{} bytes of actions are not one action for each of the {count} envs of the runs ({elements} {dtype}, \
                 {row} bytes each)",
                actions.len()
            )));
        }
        self.open(py)?;
        let (Some(pool), bounds) = (self.pool.as_mut(), &self.action_bounds) else { unreachable!("open") };
        for &(_, start, stop) in &runs {
            let mut workers =
                if start == stop { 0..0 } else { layout.worker_of(start)..layout.worker_of(stop - 1) + 1 };
            if pool.is_pending() || workers.any(|w| pool.is_busy(w)) {
                return Err(PyValueError::new_err(format!(
                    "the actions of envs {start}..{stop} cannot be written while their workers have a command in flight"
                )));
            }
        }
        if bounds.first_outside(dtype, actions).is_some() {
            return Ok(false);
        }
        let mut at = 0;
        for (slot, start, stop) in runs {
            let bytes = (stop - start) * row;
            pool.batch_mut(slot).rows_mut(Array::Action(0), start..stop).copy_from_slice(&actions[at..at + bytes]);
            at += bytes;
        }
        Ok(true)
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
    fn in_flight(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.open(py)?.in_flight())
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
        let kind = match kind {
            "step" => CommandKind::Step,
            "reset" => CommandKind::Reset,
            other => return Err(PyValueError::new_err(format!("send takes 'step' or 'reset', got {other:?}"))),
        };
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
        &mut self,
        py: Python<'py>,
        num_workers: usize,
        deterministic: bool,
        timeout: Option<f64>,
        again: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        self.open(py)?;
        if let (true, Some(batch)) = (again, &self.received) {
            return Ok(batch.bind(py).clone());
        }
        self.received = None;
        let waiting = self.closer.enter();
        let result = (|| {
            let order = if deterministic { RecvOrder::Sent } else { RecvOrder::Arrival };
            // The inline share takes its turn in send order (`Pool::inline_due`): run now, it would
            // step its envs more often than those of the worker processes.
            let due = self.open(py)?.inline_due(num_workers);
            let left = if due { self.run_inline_within(py, timeout)? } else { timeout };
            let pool = self.open_mut(py)?;
            let out = wait_in_slices(py, left, timeout, &waiting, "recv", |slice| {
                pool.recv(num_workers, order, Some(slice))
            })?;
            let list = PyList::empty(py);
            for b in &out {
                let message = b.message.as_ref().map(|m| self.message(py, b.worker, m)).transpose()?;
                let error = b.error.as_ref().map(|e| remote_to_dict(py, e)).transpose()?;
                let restarted = b.restarted.as_ref().map(|f| failure_to_dict(py, b.worker, f)).transpose()?;
                list.append((b.worker, b.slot, message, error, restarted))?;
            }
            Ok(list)
        })();
        let result = self.close_if_requested(py, result, "recv"); // `waiting` held until the close is done
        if let Ok(batch) = &result {
            self.received = Some(batch.clone().unbind());
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
            Ok(())
        })?;
        if let Some(mask) = mask {
            for w in 0..pool.layout().num_workers {
                let envs = pool.layout().worker_envs(w);
                let slot = pool.next_slot_of(w);
                let mut view = pool.batch_mut(slot);
                for env in envs.filter(|&env| !mask[env]) {
                    let flags = view.seed_flags(env).with_skip_reset();
                    view.set_seed_flags(env, flags);
                }
            }
        }
        Ok(())
    }

    /// Sends `"step"` or `"reset"` to every worker, with an optional payload. Returns the slot.
    #[pyo3(signature = (kind, payload=None))]
    fn submit(&mut self, py: Python<'_>, kind: &str, payload: Option<Vec<u8>>) -> PyResult<usize> {
        let kind = match kind {
            "step" => CommandKind::Step,
            "reset" => CommandKind::Reset,
            "call" => CommandKind::Call,
            other => return Err(PyValueError::new_err(format!("unknown command {other:?}"))),
        };
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
        &mut self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<(usize, Bound<'py, PyList>, Bound<'py, PyList>, Bound<'py, PyList>)> {
        if let Some((slot, messages, errors, restarted)) = &self.retained {
            if !self.open(py)?.is_pending() {
                return Ok((*slot, messages.bind(py).clone(), errors.bind(py).clone(), restarted.bind(py).clone()));
            }
        }
        let waiting = self.closer.enter();
        let result = (|| {
            let left = self.run_inline_within(py, timeout)?;
            let pool = self.open_mut(py)?;
            let out = wait_in_slices(py, left, timeout, &waiting, "wait", |slice| pool.wait(Some(slice)))?;
            let messages = PyList::empty(py);
            for (w, bytes) in &out.messages {
                messages.append((w, self.message(py, *w, bytes)?))?;
            }
            let errors = PyList::empty(py);
            for (w, e) in &out.errors {
                errors.append((w, remote_to_dict(py, e)?))?;
            }
            let restarted = PyList::empty(py);
            for (w, f) in &out.restarted {
                restarted.append(failure_to_dict(py, *w, f)?)?;
            }
            Ok((out.slot, messages, errors, restarted))
        })();
        let result = self.close_if_requested(py, result, "wait"); // `waiting` held until the close is done
        if let Ok((slot, messages, errors, restarted)) = &result {
            let own = |list: &Bound<'py, PyList>| list.clone().unbind();
            self.retained = Some((*slot, own(messages), own(errors), own(restarted)));
        }
        result
    }

    /// Stops the workers (asks them to close their envs and exit, waits up to `timeout` seconds,
    /// kills the rest; `timeout=None`: waits as long as their envs' `close` takes, as Gymnasium's
    /// `close(timeout=None)` does, in slices of 100 ms between which signal handlers run, and a
    /// Ctrl-C there kills them), then releases every OS resource of the pool in this process: the segment's descriptor,
    /// the control sockets, the pidfds; the mapping goes with the last
    /// NumPy array over it. Idempotent.
    ///
    /// In a process other than the creator (a fork) it only lets go of this process's handle:
    /// the creator's workers are neither messaged nor stopped.
    ///
    /// # Errors
    /// The `KeyboardInterrupt` or `SystemExit` an inline env's `close` raised (a Ctrl-C while it
    /// closed), or a signal handler's exception while the workers closed theirs (with no
    /// `timeout`), once the close is complete (the pool is closed all the same); `InternalError`
    /// on a panic.
    #[pyo3(signature = (timeout=Some(1.0)), text_signature = "($self, timeout=1.0)")]
    fn close(&mut self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let bound = timeout.map(|t| seconds("timeout", t.max(0.0))).transpose()?;
        let terminate = bound == Some(Duration::ZERO); // killed at once: nothing to wait for
        let deadline = bound.map(|t| Instant::now() + t);
        (self.retained, self.received) = (None, None);
        // The worker processes go first, or close their envs while this process closes its
        // share's: a slow env close in the share neither holds them up nor adds to `timeout`.
        let owner = current_pid() == self.creator_pid;
        let mut stopped = Ok(());
        if let (true, Some(pool)) = (owner, self.pool.as_mut()) {
            self.last_pids = pool.worker_pids();
            if terminate {
                stopped =
                    py.detach(|| catch(|| pool.close(Duration::ZERO))).map_err(|message| internal_error(py, message));
            } else {
                pool.request_close();
            }
        }
        let interrupt = self.close_inline();
        let Some(mut pool) = self.pool.take() else {
            self.closer.set_closed();
            return interrupt.map_or(stopped, Err);
        };
        if !owner {
            let_go_in_child(pool);
            return Ok(());
        }
        let awaited = if terminate { Ok(()) } else { await_workers(py, &mut pool, &self.layout, timeout, deadline) };
        let closed = stopped.and(awaited).and(
            py.detach(|| {
                catch(move || {
                    pool.close(Duration::ZERO); // the workers still running (none, unless warned of) are killed
                    drop(pool);
                })
            })
            .map_err(|message| internal_error(py, message)),
        );
        self.closer.set_closed();
        // A Ctrl-C in an inline env's `close`: raised now that everything else is closed.
        interrupt.map_or(closed, Err)
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
