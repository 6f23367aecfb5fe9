//! A close asked for while a call is inside the pool: `ringenv._native.PoolCloser`.
//!
//! A `Pool`'s methods take `&mut self`, and `wait` and `recv` hold that borrow for as long as they
//! wait (the GIL released, in slices of 100 ms). A `close()` from another thread, or from a signal
//! handler that runs inside such a wait (a SIGTERM handler that closes the env), cannot borrow the
//! pool then: PyO3 refuses with `RuntimeError: Already borrowed`. So each pool shares a
//! [`CloseRequest`] with a small frozen object, [`PyPoolCloser`], that needs no borrow of the
//! pool: the closing side records the request there, and the waiting call, which checks it
//! between slices, stops waiting, closes the pool itself (with the requested timeout) and raises
//! `ClosedEnvironmentError`. The closing side knows from [`PyPoolCloser::request`] whether the
//! call it waits for runs in its own thread (a signal handler's frame sits on top of the wait,
//! which can only go on once the handler returns) or in another one (it waits for that call).

use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::ThreadId;

/// What a pool and its closer share.
#[derive(Debug, Default)]
pub struct CloseRequest {
    /// A close was asked for while a call held the pool.
    requested: AtomicBool,
    /// Its `timeout` (seconds), for the workers to exit.
    timeout: Mutex<f64>,
    /// The pool is closed (set by `Pool.close`, whoever called it).
    closed: AtomicBool,
    /// The thread inside `wait` or `recv`, if any.
    waiter: Mutex<Option<ThreadId>>,
}

impl CloseRequest {
    /// Whether a close was asked for.
    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }

    /// The requested close's timeout in seconds.
    pub fn timeout(&self) -> f64 {
        *self.timeout.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that the pool is closed.
    pub fn set_closed(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Marks the current thread as inside a waiting call until the guard drops.
    pub fn enter(self: &Arc<Self>) -> WaiterGuard {
        *self.waiter.lock().unwrap_or_else(PoisonError::into_inner) = Some(std::thread::current().id());
        WaiterGuard(Arc::clone(self))
    }
}

/// Clears [`CloseRequest`]'s waiter when the waiting call returns.
pub struct WaiterGuard(Arc<CloseRequest>);

impl Drop for WaiterGuard {
    fn drop(&mut self) {
        *self.0.waiter.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// `ringenv.errors.ClosedEnvironmentError` (Gymnasium's) for a call that was waiting when the
/// env was closed.
pub fn closed_while_waiting(py: Python<'_>, call: &str) -> PyErr {
    let message = format!(
        "the vector env was closed (by another thread, or by a signal handler that ran during this call) while \
         `{call}` waited for its workers; the workers were stopped and this call's results are lost"
    );
    let built = py
        .import("ringenv.errors")
        .and_then(|m| m.getattr("_from_native")?.call1(("closed", message.clone(), PyDict::new(py))))
        .map(PyErr::from_value);
    built.unwrap_or_else(|e| e)
}

/// The close side of a pool, usable while a call holds the pool (`Pool.closer()`).
#[pyclass(name = "PoolCloser", module = "ringenv._native", frozen)]
pub struct PyPoolCloser {
    pub(crate) shared: Arc<CloseRequest>,
}

#[pymethods]
impl PyPoolCloser {
    /// Asks the call inside the pool to close it, giving the workers `timeout` seconds to exit.
    /// Returns True when that call runs in this thread (a signal handler interrupted it: it closes
    /// the pool once the handler returns), False otherwise (the caller waits for `closed`).
    fn request(&self, timeout: f64) -> bool {
        *self.shared.timeout.lock().unwrap_or_else(PoisonError::into_inner) = timeout.max(0.0);
        self.shared.requested.store(true, Ordering::Release);
        *self.shared.waiter.lock().unwrap_or_else(PoisonError::into_inner) == Some(std::thread::current().id())
    }

    /// Whether a thread is inside the pool's `wait` or `recv` now.
    #[getter]
    fn waiting(&self) -> bool {
        self.shared.waiter.lock().unwrap_or_else(PoisonError::into_inner).is_some()
    }

    /// Whether the pool is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }
}
