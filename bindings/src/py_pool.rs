//! `ringenv._native.Pool`: the runtime's pool for Python, with the GIL released while it waits.

use crate::errors::{catch, guard, internal_error, remote_to_dict, to_pyerr};
use crate::py_segment::PySegment;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use ringenv_runtime::{
    Array, ArraySpec, CommandKind, DType, ExitStatus, FailurePolicy, Layout, Pool, PoolConfig, PoolError, RecvOrder,
    RestartPolicy, SpinPolicy, WorkerCommand, WorkerFailure,
};
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

fn seconds(what: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| PyValueError::new_err(format!("{what} must be a non-negative number of seconds, got {s}")))
}

/// Runs `wait(slice)` in slices of at most 100 ms with the GIL released, checking for signals
/// (Ctrl-C) between slices, until it returns or `timeout` seconds (`None`: forever) passed.
fn wait_in_slices<T: Send>(
    py: Python<'_>,
    timeout: Option<f64>,
    mut wait: impl FnMut(Duration) -> Result<T, PoolError> + Send,
) -> PyResult<T> {
    let timeout = timeout.map(|t| seconds("timeout", t.max(0.0))).transpose()?;
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let slice = left.map_or(SIGNAL_CHECK, |l| l.min(SIGNAL_CHECK));
        // A panic in the runtime becomes `InternalError`, never `PanicException`.
        match py.detach(|| catch(|| wait(slice))).map_err(|message| internal_error(py, message))? {
            Err(PoolError::Timeout { .. }) if left.is_none_or(|l| l > slice) => py.check_signals()?,
            Err(PoolError::Timeout { waiting_for, .. }) => {
                let seconds = timeout.unwrap_or_default().as_secs_f64();
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
    d.set_item("env_ids", (f.env_ids.start, f.env_ids.end))?;
    d.set_item("exitcode", if let ExitStatus::Exited(c) = f.status { Some(c) } else { None })?;
    d.set_item("signal", if let ExitStatus::Signaled(s) = f.status { Some(s) } else { None })?;
    d.set_item("status", f.status.to_string())?;
    // Why it was replaced when it did not simply die (a protocol error, a corrupt segment).
    d.set_item("last_error", f.last_error.as_deref().map(|e| remote_to_dict(py, e)).transpose()?)?;
    Ok(d)
}

/// A pool of worker processes over one shared memory segment.
///
/// Constructed by `ringenv.AsyncVectorEnv`; see `ringenv/_native.pyi` for the signature.
#[pyclass(name = "Pool", module = "ringenv._native")]
pub struct PyPool {
    pool: Pool,
}

impl PyPool {
    fn check_worker(&self, worker: usize) -> PyResult<()> {
        let n = self.pool.layout().num_workers;
        if worker >= n {
            return Err(PyValueError::new_err(format!("no worker {worker}: the pool has {n}")));
        }
        Ok(())
    }
}

#[pymethods]
impl PyPool {
    #[new]
    #[pyo3(signature = (num_envs, num_workers, obs_leaves, action_leaves, reward_dtype, argv, init, env=Vec::new(), depth=2, startup_timeout=60.0, spin_us=None, on_worker_failure="raise", max_restarts=3, restart_window=60.0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        num_envs: usize,
        num_workers: usize,
        obs_leaves: Vec<(String, Vec<usize>)>,
        action_leaves: Vec<(String, Vec<usize>)>,
        reward_dtype: &str,
        argv: Vec<String>,
        init: Vec<Vec<u8>>,
        env: Vec<(String, String)>,
        depth: usize,
        startup_timeout: f64,
        spin_us: Option<f64>,
        on_worker_failure: &str,
        max_restarts: u32,
        restart_window: f64,
    ) -> PyResult<PyPool> {
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
        let layout = Layout::new(
            num_envs,
            num_workers,
            depth,
            specs("observation", &obs_leaves)?,
            specs("action", &action_leaves)?,
            dtype("reward", reward_dtype)?,
        )
        .map_err(|e| to_pyerr(py, PoolError::Layout(e)))?;
        let (program, args) =
            argv.split_first().ok_or_else(|| PyValueError::new_err("argv must name the worker program"))?;
        let mut command = WorkerCommand::new(program);
        command.args = args.iter().map(Into::into).collect();
        command.env = env.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        let config = PoolConfig {
            layout,
            command,
            init,
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
        };
        let spawned = py.detach(|| catch(|| Pool::spawn(config))).map_err(|message| internal_error(py, message))?;
        let pool = spawned.map_err(|e| to_pyerr(py, e))?;
        Ok(PyPool { pool })
    }

    /// The segment, as a buffer for `numpy.frombuffer`.
    fn segment(&self) -> PySegment {
        PySegment::new(self.pool.segment().memory())
    }

    /// Byte offset of `array` (`"obs"`, `"reward"`, `"terminated"`, `"truncated"`, `"action"`,
    /// `"seed"`, `"seed_flags"`; `leaf` picks an observation or action leaf) of slot `slot` in
    /// the segment.
    #[pyo3(signature = (slot, array_name, leaf=0))]
    fn offset(&self, slot: usize, array_name: &str, leaf: usize) -> PyResult<usize> {
        let layout = self.pool.layout();
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
        let view = self.pool.batch(slot);
        let base = self.pool.segment().memory().as_ptr() as usize;
        Ok(view.address(array(array_name, leaf)?) - base)
    }

    #[getter]
    fn depth(&self) -> usize {
        self.pool.layout().depth
    }

    #[getter]
    fn num_workers(&self) -> usize {
        self.pool.layout().num_workers
    }

    /// The env ids `(start, stop)` of worker `worker`.
    fn env_ids(&self, worker: usize) -> PyResult<(usize, usize)> {
        self.check_worker(worker)?;
        let r = self.pool.layout().worker_envs(worker);
        Ok((r.start, r.end))
    }

    /// Process ids of the workers.
    fn worker_pids(&self) -> Vec<u32> {
        self.pool.worker_pids()
    }

    /// The slot the next command uses.
    #[getter]
    fn next_slot(&self) -> usize {
        self.pool.next_slot()
    }

    #[getter]
    fn pending(&self) -> bool {
        self.pool.is_pending()
    }

    /// The slot worker `worker`'s next command uses (write its actions there before `send`).
    fn next_slot_of(&self, worker: usize) -> PyResult<usize> {
        self.check_worker(worker)?;
        Ok(self.pool.next_slot_of(worker))
    }

    /// How many workers have a command in flight.
    #[getter]
    fn in_flight(&self) -> usize {
        self.pool.in_flight()
    }

    /// Whether worker `worker` has a command in flight.
    fn is_busy(&self, worker: usize) -> PyResult<bool> {
        self.check_worker(worker)?;
        Ok(self.pool.is_busy(worker))
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
        // GIL released: a worker whose command ring is corrupt is restarted here.
        let pool = &mut self.pool;
        let sent = py.detach(|| catch(|| pool.send(&workers, kind, payload.as_deref())));
        sent.map_err(|message| internal_error(py, message))?.map_err(|e| to_pyerr(py, e))
    }

    /// Waits (GIL released, checking for Ctrl-C every 100 ms) until `num_workers` workers
    /// finished what `send` sent them: the first to finish, or with `deterministic` the earliest
    /// sent. Returns a list of `(worker, slot, message, error, restarted)`: message bytes or
    /// None, error a dict or None, restarted a dict or None (as in `wait`).
    #[pyo3(signature = (num_workers, deterministic=false, timeout=None))]
    #[allow(clippy::type_complexity)]
    fn recv<'py>(
        &mut self,
        py: Python<'py>,
        num_workers: usize,
        deterministic: bool,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyList>> {
        let order = if deterministic { RecvOrder::Sent } else { RecvOrder::Arrival };
        let pool = &mut self.pool;
        let out = wait_in_slices(py, timeout, |slice| pool.recv(num_workers, order, Some(slice)))?;
        let list = PyList::empty(py);
        for b in &out {
            let message = b.message.as_ref().map(|m| PyBytes::new(py, m));
            let error = b.error.as_ref().map(|e| remote_to_dict(py, e)).transpose()?;
            let restarted = b.restarted.as_ref().map(|f| failure_to_dict(py, b.worker, f)).transpose()?;
            list.append((b.worker, b.slot, message, error, restarted))?;
        }
        Ok(list)
    }

    /// Writes one reset seed per env (`None`: no seed) into its worker's next slot, and the reset mask
    /// (`None`: reset every env; else envs whose entry is false are not reset).
    #[pyo3(signature = (seeds, mask=None))]
    fn write_seeds(&mut self, py: Python<'_>, seeds: Vec<Option<u64>>, mask: Option<Vec<bool>>) -> PyResult<()> {
        let n = self.pool.layout().num_envs;
        if seeds.len() != n || mask.as_ref().is_some_and(|m| m.len() != n) {
            return Err(PyValueError::new_err(format!("one seed and one mask entry per env ({n}) are needed")));
        }
        guard(py, || {
            self.pool.write_seeds(&seeds);
            Ok(())
        })?;
        if let Some(mask) = mask {
            for w in 0..self.pool.layout().num_workers {
                let envs = self.pool.layout().worker_envs(w);
                let slot = self.pool.next_slot_of(w);
                let mut view = self.pool.batch_mut(slot);
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
        // GIL released: a worker whose command ring is corrupt is restarted here.
        let pool = &mut self.pool;
        let sent = py.detach(|| catch(|| pool.submit(kind, payload.as_deref())));
        sent.map_err(|message| internal_error(py, message))?.map_err(|e| to_pyerr(py, e))
    }

    /// Waits for the pending command (GIL released, checking for Ctrl-C every 100 ms). Returns
    /// `(slot, messages, errors, restarted)`: messages a list of `(worker, bytes)`, errors a list
    /// of `(worker, dict)`, restarted a list of dicts (`worker`, `pid`, `env_ids`, `exitcode`,
    /// `signal`) of workers that died during the command and were restarted.
    #[pyo3(signature = (timeout=None))]
    #[allow(clippy::type_complexity)]
    fn wait<'py>(
        &mut self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<(usize, Bound<'py, PyList>, Bound<'py, PyList>, Bound<'py, PyList>)> {
        let pool = &mut self.pool;
        let out = wait_in_slices(py, timeout, |slice| pool.wait(Some(slice)))?;
        let messages = PyList::empty(py);
        for (w, bytes) in &out.messages {
            messages.append((w, PyBytes::new(py, bytes)))?;
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
    }

    /// Stops the workers: asks them to exit, waits up to `timeout` seconds, kills the rest.
    #[pyo3(signature = (timeout=1.0))]
    fn close(&mut self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let t = seconds("timeout", timeout.max(0.0))?;
        let pool = &mut self.pool;
        py.detach(|| catch(|| pool.close(t))).map_err(|message| internal_error(py, message))
    }

    fn __repr__(&self) -> String {
        let l = self.pool.layout();
        let (obs, action) = (l.obs.len(), l.action.len());
        format!(
            "Pool(num_envs={}, num_workers={}, obs_leaves={obs}, action_leaves={action})",
            l.num_envs, l.num_workers
        )
    }

    /// A dict describing the layout (for debugging and tests).
    fn layout<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let l = self.pool.layout();
        let d = PyDict::new(py);
        d.set_item("num_envs", l.num_envs)?;
        d.set_item("num_workers", l.num_workers)?;
        d.set_item("depth", l.depth)?;
        d.set_item("total_size", l.total_size())?;
        // Byte offsets of each worker's command and completion rings (for tests that corrupt them).
        let rings: Vec<(usize, usize)> =
            (0..l.num_workers).map(|w| (l.command_ring_offset(w), l.completion_ring_offset(w))).collect();
        d.set_item("ring_offsets", rings)?;
        d.set_item("ring_bytes", l.completion_ring_offset(0) - l.command_ring_offset(0))?;
        Ok(d)
    }
}
