//! `ringenv top`'s native side: list the advertised pools and snapshot one, read-only.

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use ringenv_runtime::advert::{self, PoolEntry};
use ringenv_runtime::monitor::Monitor;

/// The live pools of this user: a list of `{"pid", "fd"}` dicts (the main process and its segment
/// descriptor).
#[pyfunction]
pub fn list_pools(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let list = PyList::empty(py);
    for e in advert::list() {
        let d = PyDict::new(py);
        d.set_item("pid", e.pid)?;
        d.set_item("fd", e.fd)?;
        list.append(d)?;
    }
    Ok(list)
}

/// A snapshot of the pool whose main process is `pid` and segment descriptor `fd`: a dict with
/// `num_envs`, `main_pid`, `commands`, `wait_ns`, `created_unix_ns`, `main_sleeps`, `main_spins` and `workers`,
/// a list of dicts (`pid`, `env_ids`, `commands`, `env_steps`, `busy_ns`, `wait_ns`, `sleeps`, `spins`,
/// `restarts`, `last_error`). Times are in nanoseconds.
///
/// Raises `OSError` when the pool is gone or cannot be read.
#[pyfunction]
pub fn pool_snapshot(py: Python<'_>, pid: u32, fd: i32) -> PyResult<Bound<'_, PyDict>> {
    let entry = PoolEntry { pid, fd };
    let view = Monitor::open(&entry).map_err(|e| PyOSError::new_err(format!("pool of pid {pid}: {e}")))?.snapshot();
    let d = PyDict::new(py);
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
        wd.set_item("env_ids", w.env_ids)?;
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
