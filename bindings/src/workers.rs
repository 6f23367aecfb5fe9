//! Worker entry points and the built-in env registry, for `python -m ringenv._worker`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use ringenv_worker::{registration, worker_loop, WorkerCli};

fn parse(argv: Vec<String>) -> PyResult<WorkerCli> {
    use clap::Parser;
    WorkerCli::try_parse_from(std::iter::once("ringenv-worker".to_string()).chain(argv))
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Runs a worker hosting Python envs (built from the cloudpickled init payload) until the pool
/// closes it; returns the process exit code.
#[pyfunction]
pub fn run_python_worker(py: Python<'_>, argv: Vec<String>) -> PyResult<i32> {
    let args = parse(argv)?.endpoint_args();
    Ok(worker_loop::run(&args, |init, endpoint| crate::python_envs::build(py, init, endpoint)))
}

/// Runs a worker hosting built-in Rust envs (the init payload is JSON), with the GIL released
/// for its whole life; returns the process exit code.
#[pyfunction]
pub fn run_builtin_worker(py: Python<'_>, argv: Vec<String>) -> PyResult<i32> {
    let args = parse(argv)?.endpoint_args();
    Ok(py.detach(|| worker_loop::run(&args, registration::build_host)))
}

/// The ids of the built-in Rust envs.
#[pyfunction]
pub fn builtin_env_ids() -> Vec<&'static str> {
    registration::ids().to_vec()
}

fn json_to_py<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyDict>> {
    let loads = py.import("json")?.getattr("loads")?;
    Ok(loads.call1((value.to_string(),))?.cast_into::<PyDict>()?)
}

/// The `(observation_space, action_space)` of built-in env `id` with `kwargs_json`, as
/// dicts in `ringenv_worker::Space::to_json` form (`{"kind": "box", "dtype", "shape", "low",
/// "high"}`, `{"kind": "discrete", "n", "start"}`, ...; read by `ringenv._layout.from_dict`), the
/// same form a worker binary's `describe` prints.
///
/// Raises `ValueError` naming an unknown id or a bad argument.
#[pyfunction]
pub fn builtin_spaces<'py>(
    py: Python<'py>,
    id: &str,
    kwargs_json: &str,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    let kwargs: serde_json::Value =
        serde_json::from_str(kwargs_json).map_err(|e| PyValueError::new_err(format!("kwargs are not JSON: {e}")))?;
    let (obs, act) = registration::spaces(id, &kwargs).map_err(|e| PyValueError::new_err(e.message))?;
    Ok((json_to_py(py, &obs.to_json())?, json_to_py(py, &act.to_json())?))
}
