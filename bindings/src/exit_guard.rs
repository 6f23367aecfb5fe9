//! The interpreter's exit and the inline share's calls into Python envs.
//!
//! At exit CPython (3.10 to 3.13) ends daemon threads that ask for the GIL with `pthread_exit`, an
//! unwind that cannot cross PyO3's `extern "C"` frames, so glibc aborts the process. The inline
//! share's calls into Python are therefore counted ([`enter`]); an `atexit` handler
//! ([`hold_inline_calls_at_exit`]) lets those under way finish, and parks later ones for good.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// Set by [`hold_inline_calls_at_exit`]: the interpreter is exiting.
static EXITING: AtomicBool = AtomicBool::new(false);
/// The thread that runs the `atexit` handlers (it may still step envs in a later handler).
static EXITING_THREAD: OnceLock<ThreadId> = OnceLock::new();
/// Calls under way inside the inline share's Python calls, over all threads (a thread inside it
/// twice, an env that steps another vector env's share, counts twice).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's calls counted in [`IN_FLIGHT`].
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// One thread inside the inline share's Python calls; counted until dropped.
pub struct Entered(());

impl Drop for Entered {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Counts this thread into the inline share's Python calls. Once the interpreter exits, a thread
/// other than the exiting one never returns from here: it parks without the GIL (see the module).
pub fn enter(py: Python<'_>) -> Entered {
    if EXITING.load(Ordering::Acquire) && EXITING_THREAD.get() != Some(&std::thread::current().id()) {
        py.detach(|| -> () {
            loop {
                std::thread::park();
            }
        });
    }
    DEPTH.with(|d| d.set(d.get() + 1));
    IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
    Entered(())
}

/// In a forked child (registered with `os.register_at_fork(after_in_child=...)`): the count of
/// calls under way becomes the forking thread's own, the only thread the child has.
#[pyfunction]
pub fn exit_guard_after_fork() {
    IN_FLIGHT.store(DEPTH.with(Cell::get), Ordering::Release);
}

/// The `atexit` handler: lets the inline share's Python calls under way in other threads finish
/// (the GIL released meanwhile), waiting at most `timeout` seconds, and parks any thread that
/// enters the share afterwards. Returns whether none was left under way in another thread.
#[pyfunction]
pub fn hold_inline_calls_at_exit(py: Python<'_>, timeout: f64) -> bool {
    let _ = EXITING_THREAD.set(std::thread::current().id());
    EXITING.store(true, Ordering::Release);
    // (this thread's own calls, when it exits from inside an env's step, are not waited for)
    let own = DEPTH.with(Cell::get);
    let deadline = Instant::now() + Duration::from_secs_f64(timeout.max(0.0));
    py.detach(|| {
        while IN_FLIGHT.load(Ordering::Acquire) > own && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    IN_FLIGHT.load(Ordering::Acquire) <= own
}
