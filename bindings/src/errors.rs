//! Maps runtime errors to the typed exceptions of `ringenv.errors`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use ringenv_runtime::{
    ControlError, ExitStatus, Failure, RemoteError, SpawnError, StateError, SubmitError, WaitError, WorkerFailure,
};

/// A `RemoteError` as a dict for Python.
pub fn remote_to_dict<'py>(py: Python<'py>, e: &RemoteError) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("env_id", e.env_id)?;
    d.set_item("kind", &e.kind)?;
    d.set_item("message", &e.message)?;
    d.set_item("traceback", &e.traceback)?;
    d.set_item("payload", pyo3::types::PyBytes::new(py, &e.payload))?;
    Ok(d)
}

/// A runtime error that maps to one of the exceptions of `ringenv.errors`: its kind for
/// `ringenv.errors._from_native` (`"worker_died"`, `"timeout"`, ...), with the exception's
/// attributes written into `fields`.
pub trait Native: std::error::Error {
    /// The kind, with `fields` filled in.
    fn kind(&self, py: Python<'_>, fields: &Bound<'_, PyDict>) -> PyResult<&'static str>;
}

impl Native for StateError {
    fn kind(&self, _py: Python<'_>, fields: &Bound<'_, PyDict>) -> PyResult<&'static str> {
        Ok(match self {
            StateError::NoPendingCall => "no_pending",
            StateError::AlreadyPending => "already_pending",
            StateError::Closed => "closed",
            StateError::ForkedChild { creator_pid, pid } => {
                fields.set_item("creator_pid", creator_pid)?;
                fields.set_item("pid", pid)?;
                "forked"
            }
        })
    }
}

impl Native for Failure {
    fn kind(&self, py: Python<'_>, fields: &Bound<'_, PyDict>) -> PyResult<&'static str> {
        Ok(match self {
            Failure::WorkerDied(f) => {
                failure_fields(py, fields, f)?;
                "worker_died"
            }
            Failure::Corrupt { what, failure } => {
                failure_fields(py, fields, failure)?;
                fields.set_item("what", what)?;
                "corrupt"
            }
            Failure::CrashLoop { failures, window_s, last } => {
                fields.set_item("failures", failures)?;
                fields.set_item("window_s", window_s)?;
                failure_fields(py, fields, last)?;
                "crash_loop"
            }
            Failure::Control { error: ControlError::OutOfMemory { .. }, .. } => "memory",
            Failure::Control { .. } => os_error_kind(self, fields)?,
            Failure::Restart(e) => e.kind(py, fields)?,
        })
    }
}

impl Native for SpawnError {
    fn kind(&self, py: Python<'_>, fields: &Bound<'_, PyDict>) -> PyResult<&'static str> {
        Ok(match self {
            SpawnError::InvalidArgument(_) | SpawnError::Layout(_) => "value",
            SpawnError::WorkerDied(f) => {
                failure_fields(py, fields, f)?;
                "worker_died"
            }
            SpawnError::Startup { worker, env_ids, error } => {
                fields.set_item("worker", worker)?;
                fields.set_item("env_ids", env_ids_tuple(py, env_ids)?)?;
                fields.set_item("remote", remote_to_dict(py, error)?)?;
                "startup"
            }
            SpawnError::StartupTimeout { seconds, worker, pid, env_ids, joined, program } => {
                fields.set_item("seconds", seconds)?;
                fields.set_item("worker", worker)?;
                fields.set_item("pid", pid)?;
                fields.set_item("env_ids", env_ids_tuple(py, env_ids)?)?;
                fields.set_item("building", joined)?;
                fields.set_item("program", program)?;
                "startup_timeout"
            }
            SpawnError::Cancelled { .. } => "timeout",
            SpawnError::Control { error: ControlError::OutOfMemory { .. }, .. } => "memory",
            SpawnError::Segment(_) | SpawnError::Spawn { .. } | SpawnError::Control { .. } => {
                os_error_kind(self, fields)?
            }
        })
    }
}

impl Native for SubmitError {
    fn kind(&self, py: Python<'_>, fields: &Bound<'_, PyDict>) -> PyResult<&'static str> {
        match self {
            SubmitError::State(e) => e.kind(py, fields),
            SubmitError::InvalidArgument(_) => Ok("value"),
            SubmitError::Failed(e) => e.kind(py, fields),
        }
    }
}

impl Native for WaitError {
    fn kind(&self, py: Python<'_>, fields: &Bound<'_, PyDict>) -> PyResult<&'static str> {
        match self {
            WaitError::State(e) => e.kind(py, fields),
            WaitError::InvalidArgument(_) => Ok("value"),
            WaitError::Timeout { seconds, waiting_for } => {
                fields.set_item("seconds", seconds)?;
                fields.set_item("waiting_for", waiting_for.clone())?;
                Ok("timeout")
            }
            WaitError::Cancelled => Ok("timeout"),
            WaitError::Failed(e) => e.kind(py, fields),
        }
    }
}

/// Converts a runtime error to the matching Python exception.
pub fn to_pyerr(py: Python<'_>, e: impl Native) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let fields = PyDict::new(py);
        let kind = e.kind(py, &fields)?;
        let exc = py.import("ringenv.errors")?.getattr("_from_native")?.call1((kind, e.to_string(), fields))?;
        Ok(PyErr::from_value(exc))
    };
    build().unwrap_or_else(|err| err)
}

/// A worker's env ids (a contiguous block) as the tuple of its env indices, as Python sees them.
pub fn env_ids_tuple<'py>(py: Python<'py>, env_ids: &std::ops::Range<usize>) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, env_ids.clone())
}

/// The fields of `WorkerDiedError` (and `CrashLoopError`'s last death), which are also those of
/// the dict of a restarted worker (`Pool.wait`): `worker`, `pid`, `env_ids`, `exitcode`,
/// `signal`, `last_error` (a dict or None: why it was replaced, when it did not simply die).
pub fn failure_fields(py: Python<'_>, fields: &Bound<'_, PyDict>, f: &WorkerFailure) -> PyResult<()> {
    fields.set_item("worker", f.worker)?;
    fields.set_item("pid", f.pid)?;
    fields.set_item("env_ids", env_ids_tuple(py, &f.env_ids)?)?;
    fields.set_item("exitcode", if let ExitStatus::Exited(c) = f.status { Some(c) } else { None })?;
    fields.set_item("signal", if let ExitStatus::Signaled(s) = f.status { Some(s) } else { None })?;
    fields.set_item("last_error", f.last_error.as_deref().map(|e| remote_to_dict(py, e)).transpose()?)
}

/// `"runtime"` (a `RingenvError`), with `errno` set to the OS error number of the first
/// `io::Error` in `e`'s chain of sources, if any.
fn os_error_kind(e: &dyn std::error::Error, fields: &Bound<'_, PyDict>) -> PyResult<&'static str> {
    let mut source = e.source();
    while let Some(s) = source {
        if let Some(code) = s.downcast_ref::<std::io::Error>().and_then(std::io::Error::raw_os_error) {
            fields.set_item("errno", code)?;
            break;
        }
        source = s.source();
    }
    Ok("runtime")
}

/// Runs `f`, returning the text (and location, which the panic hook printed) of a panic instead
/// of unwinding: no panic may reach Python as `pyo3_runtime.PanicException`, which is not an
/// `Exception`. Usable with the GIL released (inside `py.detach`).
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        let text = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic with a non-text payload".into());
        format!("internal error in ringenv's native code (please report it): {text}")
    })
}

/// `ringenv.errors._from_native(kind, message, {})`: the typed exception of `kind` (`"internal"`,
/// `"closed"`, ...), or a plain `RuntimeError(message)` if it cannot be built.
pub fn from_native(py: Python<'_>, kind: &str, message: String) -> PyErr {
    let built = py
        .import("ringenv.errors")
        .and_then(|m| m.getattr("_from_native")?.call1((kind, message.clone(), PyDict::new(py))))
        .map(PyErr::from_value);
    built.unwrap_or_else(|_| pyo3::exceptions::PyRuntimeError::new_err(message))
}

/// `ringenv.errors.InternalError(message)` (a `RingenvError`, so a `RuntimeError`).
pub fn internal_error(py: Python<'_>, message: String) -> PyErr {
    from_native(py, "internal", message)
}

/// Runs a method body `f`, raising [`internal_error`] for a panic inside it.
pub fn guard<T>(py: Python<'_>, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    catch(f).unwrap_or_else(|message| Err(internal_error(py, message)))
}

/// `_native._panic_for_tests(message)`: panics with `message` inside [`guard`], as a bug in any
/// method would, so the tests can prove a native panic reaches Python as
/// `ringenv.errors.InternalError`, never as `PanicException`.
#[pyfunction(name = "_panic_for_tests")]
pub fn panic_for_tests(py: Python<'_>, message: &str) -> PyResult<()> {
    guard(py, || panic!("{message}"))
}

/// A GPU staging error: `CudaUnavailableError` (no driver, no such device), `CudaError` (a
/// driver call failed), `ValueError` (bad argument).
impl Native for ringenv_runtime::StagingError {
    fn kind(&self, _py: Python<'_>, fields: &Bound<'_, PyDict>) -> PyResult<&'static str> {
        use ringenv_runtime::StagingError;
        Ok(match self {
            StagingError::NoDriver => {
                fields.set_item("reason", "no_driver")?;
                "cuda_unavailable"
            }
            StagingError::NoDevice { ordinal, count } => {
                fields.set_item("reason", "no_device")?;
                fields.set_item("ordinal", ordinal)?;
                fields.set_item("count", count)?;
                "cuda_unavailable"
            }
            StagingError::Driver { call, code, name, .. } => {
                fields.set_item("call", call)?;
                fields.set_item("code", code)?;
                fields.set_item("name", name)?;
                "cuda"
            }
            StagingError::InvalidArgument(_) => "value",
        })
    }
}
