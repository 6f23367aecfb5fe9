//! `ringenv._native`: the thin PyO3 layer between the Python package `ringenv` and the Rust crates.
#![warn(missing_docs, unsafe_op_in_unsafe_fn)]

mod call_guard;
mod close_request;
mod errors;
mod exit_guard;
mod infos;
mod monitor;
mod obs_copy;
mod py_pool;
mod py_segment;
mod py_staging;
mod python_envs;
mod workers;

use pyo3::prelude::*;

/// This process's id, as `os.getpid()`, cached (`ringenv_runtime::current_pid`: no system call
/// after the first; cleared in a fork child). The vector env's per-call "am I the creator" check.
#[pyfunction]
fn current_pid() -> u32 {
    ringenv_runtime::current_pid()
}

/// The cores this process may use: its CPU affinity, capped by its cgroup's CPU quota (cgroup v1
/// `cpu.cfs_quota_us / cpu.cfs_period_us` or v2 `cpu.max`, rounded down, at least 1; as a
/// container started with `--cpus` has it), as `std::thread::available_parallelism` computes
/// it; 1 when unknown.
#[pyfunction]
fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(current_pid, m)?)?;
    m.add_function(wrap_pyfunction!(available_cores, m)?)?;
    m.add_function(wrap_pyfunction!(exit_guard::hold_inline_calls_at_exit, m)?)?;
    m.add_function(wrap_pyfunction!(exit_guard::exit_guard_after_fork, m)?)?;
    m.add_class::<py_pool::PyPool>()?;
    m.add_class::<close_request::PyPoolCloser>()?;
    m.add_class::<call_guard::PyCallGuard>()?;
    m.add("Busy", m.py().get_type::<call_guard::Busy>())?;
    m.add_class::<py_segment::PySegment>()?;
    m.add_class::<py_staging::PyCudaStaging>()?;
    m.add_function(wrap_pyfunction!(py_staging::cuda_device_count, m)?)?;
    m.add_function(wrap_pyfunction!(workers::run_python_worker, m)?)?;
    m.add_function(wrap_pyfunction!(workers::run_builtin_worker, m)?)?;
    m.add_function(wrap_pyfunction!(workers::builtin_env_ids, m)?)?;
    m.add_function(wrap_pyfunction!(workers::builtin_spaces, m)?)?;
    m.add_function(wrap_pyfunction!(monitor::list_pools, m)?)?;
    m.add_function(wrap_pyfunction!(errors::panic_for_tests, m)?)?;
    m.add_function(wrap_pyfunction!(monitor::pool_snapshot, m)?)?;
    m.add_function(wrap_pyfunction!(infos::typed_columns, m)?)?;
    m.add_function(wrap_pyfunction!(infos::typed_dicts, m)?)?;
    m.add_function(wrap_pyfunction!(infos::dict_columns, m)?)?;
    m.add("LAYOUT_VERSION", ringenv_runtime::LAYOUT_VERSION)?;
    Ok(())
}
