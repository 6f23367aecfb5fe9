//! `ringenv top`'s native side: list the advertised pools and snapshot one, read-only, after
//! checking that the advertisement is a pool of this user (`ringenv_runtime::connect_to_pool`).

use pyo3::exceptions::{
    PyConnectionRefusedError, PyFileNotFoundError, PyOSError, PyPermissionError, PyTimeoutError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use ringenv_runtime::{list_pools as list_advertised, AdvertError, Monitor, MonitorError, PoolEntry, PoolView};
use std::time::Duration;

/// The pools advertised under this user's prefix: a list of `{"pid", "fd", "name"}` dicts (the main
/// process and its segment descriptor, as the name claims them, and the abstract socket name).
/// Any user can bind such a name: [`pool_snapshot`] verifies an entry before reading it.
#[pyfunction]
pub fn list_pools(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let list = PyList::empty(py);
    for e in list_advertised() {
        let d = PyDict::new(py);
        d.set_item("pid", e.pid)?;
        d.set_item("fd", e.fd)?;
        d.set_item("name", &e.name)?;
        list.append(d)?;
    }
    Ok(list)
}

fn to_pyerr(failures: &[(PoolEntry, MonitorError)]) -> PyErr {
    let text = failures.iter().map(|(e, err)| format!("{}: {err}", e.name)).collect::<Vec<_>>().join("; ");
    // The most telling failure picks the class: a refusal over a pool that is simply gone.
    let gone = |e: &MonitorError| matches!(e, MonitorError::Advert(AdvertError::Unreachable(_)));
    let (_, worst) = failures.iter().find(|(_, e)| !gone(e)).unwrap_or(&failures[0]);
    match worst {
        MonitorError::Advert(AdvertError::ForeignUser { .. } | AdvertError::WrongProcess { .. })
        | MonitorError::Advert(AdvertError::NotOwned { .. }) => PyPermissionError::new_err(text),
        MonitorError::Advert(AdvertError::NoReply { .. }) => PyTimeoutError::new_err(text),
        MonitorError::Advert(AdvertError::Unreachable(_)) => PyConnectionRefusedError::new_err(text),
        _ => PyOSError::new_err(text),
    }
}

/// A snapshot of the pool whose main process is `pid` and segment descriptor `fd` (the entry of
/// [`list_pools`] named `name`, or the first of those with this `pid` and `fd` that verifies).
///
/// The pool's listener must belong to this user and be process `pid`; it hands over its segment
/// (waiting at most `timeout` seconds), which must be a sealed memfd of this user. Returns a dict
/// with `name`, `pid`, `num_envs`, `main_pid`, `commands`, `wait_ns`, `created_unix_ns`,
/// `main_sleeps`, `main_spins` and `workers`, a list of dicts (`pid`, `env_ids`: a `range` of
/// the env indices it steps, `commands`, `env_steps`, `busy_ns`, `wait_ns`, `sleeps`, `spins`,
/// `restarts`, `last_error`: the text of its last error, or of its last words before it died and
/// was restarted, cut in its middle to 248 bytes). Times are in
/// nanoseconds; the counters come from shared memory and are not trusted: `last_error` is raw
/// text (print it without markup).
///
/// Raises `FileNotFoundError` when no such pool is advertised, `ConnectionRefusedError` when it
/// ended, `PermissionError` when the advertisement belongs to another user or process,
/// `TimeoutError` when no segment arrived in time, `OSError` for any other refusal (not a sealed
/// memfd, a header of another ringenv version, ...), `ValueError` for a negative `timeout`.
#[pyfunction]
#[pyo3(signature = (pid, fd, name=None, timeout=1.0))]
pub fn pool_snapshot<'py>(
    py: Python<'py>,
    pid: u32,
    fd: i32,
    name: Option<String>,
    timeout: f64,
) -> PyResult<Bound<'py, PyDict>> {
    let timeout = Duration::try_from_secs_f64(timeout).map_err(|_| {
        PyValueError::new_err(format!("timeout must be a non-negative number of seconds, got {timeout}"))
    })?;
    let candidates: Vec<PoolEntry> = list_advertised()
        .into_iter()
        .filter(|e| e.pid == pid && e.fd == fd && name.as_ref().is_none_or(|n| *n == e.name))
        .collect();
    if candidates.is_empty() {
        let what = name.map(|n| format!(" under the name {n}")).unwrap_or_default();
        return Err(PyFileNotFoundError::new_err(format!(
            "no pool of pid {pid} with segment fd {fd} is advertised{what}"
        )));
    }
    let found = py.detach(|| {
        let mut failures = Vec::new();
        for e in candidates {
            match Monitor::open_with_timeout(&e, timeout) {
                Ok(m) => return Ok((e, m.snapshot())),
                Err(err) => failures.push((e, err)),
            }
        }
        Err(failures)
    });
    let (entry, view) = found.map_err(|f| to_pyerr(&f))?;
    to_dict(py, &entry, &view)
}

fn to_dict<'py>(py: Python<'py>, entry: &PoolEntry, view: &PoolView) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &entry.name)?;
    d.set_item("pid", entry.pid)?;
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
