//! `ringenv._native.CallGuard`: one call at a time into a vector env, entered with a `with`
//! statement so that no Ctrl-C can leave it held.
//!
//! The vector env used to take a `threading.Lock` with `lock.acquire(False)` and release it in a
//! `finally`. CPython runs a pending signal's handler at the end of a call instruction, so a
//! Ctrl-C that arrived just before or during that acquire raised `KeyboardInterrupt` after the
//! lock was taken and before the `try` began: the lock stayed held, and every later call was
//! refused as made "while another thread is sending a call" until the program restarted (a loop
//! of steps under a storm of interrupts wedged after 12 to 70 of them, 2026-11-28). A `with`
//! statement whose `__enter__` is a C function has no such gap: CPython checks for signals neither
//! inside `__enter__` nor between its return and the protected block (the fix of CPython issue
//! bpo-29988, "with statements are not ensuring that `__exit__` is called if `__enter__`
//! succeeds"), so once `__enter__` returns, `__exit__` runs whatever is raised.
//!
//! `__enter__` never blocks: when the guard is held (by another thread, or by a frame below a
//! signal handler in this one) it raises `ringenv._native.CallGuardBusy`, which the vector env
//! turns into Gymnasium's `AlreadyPendingCallError` naming the call. The guard has no owner (as a
//! `threading.Lock`): whoever entered it exits it.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};

create_exception!(
    _native,
    CallGuardBusy,
    PyException,
    "Raised by `CallGuard.__enter__` when the guard is held: another call is inside."
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

    /// Takes the guard, or raises `CallGuardBusy` when it is held (it never waits).
    fn __enter__(&self) -> PyResult<()> {
        self.held
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .map(|_| ())
            .map_err(|_| CallGuardBusy::new_err("the call guard is held: another call is inside"))
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
