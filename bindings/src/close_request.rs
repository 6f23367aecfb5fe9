//! A close asked for while a call is inside the pool: `ringenv._native.PoolCloser`.
//!
//! `wait` and `recv` hold the pool's `&mut` borrow while they wait, so a `close()` from another
//! thread or a signal handler records a [`CloseRequest`] instead; the waiting call checks it
//! between slices, closes the pool and raises `ClosedEnvironmentError`.

use crate::errors::from_native;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// What a pool and its closer share.
#[derive(Debug, Default)]
pub struct CloseRequest {
    /// A close was asked for while a call held the pool.
    requested: AtomicBool,
    /// Its `timeout` (seconds) for the workers to exit; `None`: as long as their envs' `close`
    /// takes.
    timeout: Mutex<Option<f64>>,
    /// The pool is closed (set by `Pool.close`, whoever called it).
    closed: AtomicBool,
    /// The thread inside `wait` or `recv` ([`thread_token`]), 0 if none.
    waiter: AtomicUsize,
}

impl CloseRequest {
    /// Whether a close was asked for.
    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }

    /// The requested close's timeout in seconds (`None`: no bound).
    pub fn timeout(&self) -> Option<f64> {
        *self.timeout.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a thread is inside the pool's `wait` or `recv` now.
    pub fn waiting(&self) -> bool {
        self.waiter.load(Ordering::Acquire) != 0
    }

    /// Records that the pool is closed.
    pub fn set_closed(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Marks the current thread as inside a waiting call until the guard drops (one atomic store:
    /// this is on every step's path).
    pub fn enter(self: &Arc<Self>) -> WaiterGuard {
        self.waiter.store(thread_token(), Ordering::Release);
        WaiterGuard(Arc::clone(self))
    }
}

/// A nonzero number for the current thread, distinct between threads alive at once: the address
/// of a thread-local (a `ThreadId` has no stable integer form to keep in an atomic).
fn thread_token() -> usize {
    thread_local!(static TOKEN: u8 = const { 0 });
    TOKEN.with(|t| t as *const u8 as usize)
}

/// Clears [`CloseRequest`]'s waiter when the waiting call returns; the request it guards is
/// reachable through it while the call borrows the pool.
pub struct WaiterGuard(Arc<CloseRequest>);

impl std::ops::Deref for WaiterGuard {
    type Target = CloseRequest;

    fn deref(&self) -> &CloseRequest {
        &self.0
    }
}

impl Drop for WaiterGuard {
    fn drop(&mut self) {
        self.0.waiter.store(0, Ordering::Release);
    }
}

/// `ringenv.errors.ClosedEnvironmentError` (Gymnasium's) for a call that was waiting when the
/// env was closed.
pub fn closed_while_waiting(py: Python<'_>, call: &str) -> PyErr {
    let message = format!(
        "the vector env was closed (by another thread, or by a signal handler that ran during this call) while \
         `{call}` waited for its workers; the workers were stopped and this call's results are lost"
    );
    from_native(py, "closed", message)
}

/// The close side of a pool, usable while a call holds the pool (`Pool.closer()`).
#[pyclass(name = "PoolCloser", module = "ringenv._native", frozen)]
pub struct PyPoolCloser {
    pub(crate) shared: Arc<CloseRequest>,
}

#[pymethods]
impl PyPoolCloser {
    /// Asks the call inside the pool to close it, giving the workers `timeout` seconds to exit
    /// (`None`: as long as their envs' `close` takes, as `Pool.close`).
    /// Returns True when that call runs in this thread (under a signal handler), else False.
    #[pyo3(signature = (timeout))]
    fn request(&self, timeout: Option<f64>) -> bool {
        *self.shared.timeout.lock().unwrap_or_else(PoisonError::into_inner) = timeout.map(|t| t.max(0.0));
        self.shared.requested.store(true, Ordering::Release);
        self.shared.waiter.load(Ordering::Acquire) == thread_token()
    }

    /// Whether a thread is inside the pool's `wait` or `recv` now.
    #[getter]
    fn waiting(&self) -> bool {
        self.shared.waiting()
    }

    /// Whether the pool is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }
}
