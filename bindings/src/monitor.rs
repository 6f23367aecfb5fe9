//! `ringenv top`'s native side: list this user's pools and snapshot one, read-only, after
//! checking that the descriptor is a sealed memfd of this user holding a segment of this build
//! (`ringenv_runtime::Monitor`).

use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyPermissionError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use ringenv_runtime::{list_pools as find_pools, Monitor, MonitorError, PoolEntry, PoolView};
use std::io::ErrorKind;

/// The pools of this user's processes: a list of `{"pid", "fd"}` dicts, one per segment (the
/// pool's main process and its segment descriptor there). Entries are found by the name of the
/// memfd, which any process can give a file: [`pool_snapshot`] checks one before reading it.
#[pyfunction]
pub fn list_pools(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let list = PyList::empty(py);
    for e in py.detach(find_pools) {
        let d = PyDict::new(py);
        d.set_item("pid", e.pid)?;
        d.set_item("fd", e.fd)?;
        list.append(d)?;
    }
    Ok(list)
}

fn to_pyerr(e: MonitorError) -> PyErr {
    let text = e.to_string();
    match &e {
        MonitorError::Unreachable { source, .. } if source.kind() == ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(text)
        }
        MonitorError::Unreachable { source, .. } if source.kind() == ErrorKind::PermissionDenied => {
            PyPermissionError::new_err(text)
        }
        MonitorError::NotOwned { .. } => PyPermissionError::new_err(text),
        _ => PyOSError::new_err(text),
    }
}

/// A snapshot of the pool whose segment is descriptor `fd` of process `pid` (an entry of
/// [`list_pools`]). Never blocks.
///
/// The descriptor must be a sealed memfd of this user holding a segment this ringenv reads.
/// Returns a dict with `pid`, `fd`, `num_envs`, `main_pid` (the main process the header
/// records), `commands`, `wait_ns`, `created_unix_ns`, `main_sleeps`, `main_spins` and
/// `workers`, a list of dicts (`pid`, `env_ids`: a `range` of the env indices it steps,
/// `commands`, `env_steps`, `busy_ns`, `wait_ns`, `sleeps`, `spins`, `restarts`, `last_error`:
/// the text of its last error, or of its last words before it died and was restarted, cut in
/// its middle to 248 bytes). Times are in nanoseconds; the counters come from shared memory and
/// are not trusted: `last_error` is raw text (print it without markup).
///
/// Raises `FileNotFoundError` when there is no such process or descriptor, `PermissionError`
/// when the process or the file belongs to another user, `OSError` for any other refusal (not a
/// sealed memfd, a header of another ringenv version, ...).
#[pyfunction]
pub fn pool_snapshot(py: Python<'_>, pid: u32, fd: i32) -> PyResult<Bound<'_, PyDict>> {
    let entry = PoolEntry { pid, fd };
    let view = py.detach(|| Monitor::open(&entry).map(|m| m.snapshot())).map_err(to_pyerr)?;
    to_dict(py, &entry, &view)
}

fn to_dict<'py>(py: Python<'py>, entry: &PoolEntry, view: &PoolView) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("pid", entry.pid)?;
    d.set_item("fd", entry.fd)?;
    d.set_item("num_envs", view.num_envs)?;
    d.set_item("main_pid", view.pool.main_pid)?;
    d.set_item("commands", view.pool.commands)?;
    d.set_item("wait_ns", view.pool.wait_ns)?;
    d.set_item("created_unix_ns", view.pool.created_unix_ns)?;
    d.set_item("main_sleeps", view.main_sleeps)?;
    d.set_item("main_spins", view.main_spins)?;
    let workers = PyList::empty(py);
    for w in &view.workers {
        let wd = PyDict::new(py);
        wd.set_item("pid", w.metrics.pid)?;
        // A `range` of env indices: constant size whatever the (untrusted) header declares.
        let index = |v: usize| isize::try_from(v).unwrap_or(isize::MAX);
        let (start, end) = (index(w.env_ids.start), index(w.env_ids.end));
        wd.set_item("env_ids", pyo3::types::PyRange::new(py, start, end.max(start))?)?;
        wd.set_item("commands", w.metrics.commands)?;
        wd.set_item("env_steps", w.metrics.env_steps)?;
        wd.set_item("busy_ns", w.metrics.busy_ns)?;
        wd.set_item("wait_ns", w.metrics.wait_ns)?;
        wd.set_item("sleeps", w.sleeps)?;
        wd.set_item("spins", w.spins)?;
        wd.set_item("restarts", w.metrics.restarts)?;
        wd.set_item("last_error", &w.metrics.last_error)?;
        workers.append(wd)?;
    }
    d.set_item("workers", workers)?;
    Ok(d)
}
