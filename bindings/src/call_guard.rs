//! `ringenv._native.CallGuard`: one call at a time into a vector env, entered with a `with`
//! statement so that no Ctrl-C can leave it held; and `ringenv._native.Busy`, what a call finds
//! when another is inside (the guard held, or the pool borrowed by a call that waits).
//!
//! A `threading.Lock` taken with `acquire(False)` and released in a `finally` can stay held: CPython
//! runs a pending signal's handler at the end of a call instruction, so a `KeyboardInterrupt` can
//! be raised after the acquire and before the `try`. A `with` statement whose `__enter__` is a C
//! function has no such gap: CPython checks for signals neither inside `__enter__` nor between its
//! return and the protected block (bpo-29988), so once `__enter__` returns, `__exit__` runs
//! whatever is raised.
//!
//! `__enter__` never blocks: when the guard is held (by another thread, or by a frame below a
//! signal handler in this one) it raises [`Busy`], which the vector env turns into Gymnasium's
//! `AlreadyPendingCallError` naming the call. The guard has no owner (as a `threading.Lock`):
//! whoever entered it exits it.

use pyo3::create_exception;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};

create_exception!(
    _native,
    Busy,
    PyRuntimeError,
    "Another call is inside: the call guard is held, or the pool is held by a call that waits."
);

/// A non-blocking mutual exclusion entered with `with` (see the module's documentation).
#[pyclass(name = "CallGuard", module = "ringenv._native", frozen)]
#[derive(Default)]
pub struct PyCallGuard {
    held: AtomicBool,
}

#[pymethods]
impl PyCallGuard {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// Takes the guard, or raises `Busy` when it is held (it never waits).
    fn __enter__(&self) -> PyResult<()> {
        self.held
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .map(|_| ())
            .map_err(|_| Busy::new_err("the call guard is held: another call is inside"))
    }

    /// Lets the guard go; returns False (an exception raised inside propagates).
    fn __exit__(
        &self,
        _kind: Option<&Bound<'_, PyAny>>,
        _value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.held.store(false, Ordering::Release);
        false
    }
}
