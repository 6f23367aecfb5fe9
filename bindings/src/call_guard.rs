//! `ringenv._native.CallGuard`: one call at a time into a vector env, entered with a `with`
//! statement so that no Ctrl-C can leave it held; and `ringenv._native.Busy`, what a call finds
//! when another is inside (the guard held, or the pool borrowed by a call that waits).
//!
//! Not a `threading.Lock`: a `KeyboardInterrupt` can land between its `acquire` and the `try`,
//! leaving it held. A `with` whose `__enter__` is a C function has no such gap (bpo-29988).
//! `__enter__` never blocks: a held guard raises [`Busy`].

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
