//! The interpreter's exit and the inline share's calls into Python envs.
//!
//! When the interpreter exits, CPython (3.10 to 3.13) ends every daemon thread that asks for the
//! GIL back from then on with `pthread_exit` (`take_gil` in `Python/ceval_gil.h`), a forced
//! unwind of that thread's stack. A daemon thread stepping the inline share (or every env, with
//! `num_workers=0`) is inside this module's Rust frames, which called the env's Python `step`;
//! the unwind cannot cross them (PyO3's `extern "C"` trampolines abort on unwinding), so glibc
//! aborts the process: exit status 134, no message, at random (a daemon thread's Python code
//! hands the GIL over every few milliseconds). Gymnasium's `SyncVectorEnv` in the same place has
//! only Python and C frames, which the unwind crosses.
//!
//! So the inline share's calls into Python (its envs' `step`, `reset`, `call` and `close`) are
//! counted ([`enter`]), and an `atexit` handler
//! (`ringenv/vector.py` registers [`hold_inline_calls_at_exit`]) runs before the interpreter
//! starts ending threads: it lets the calls under way finish (the GIL released, for at most its
//! timeout), and from then on a thread other than the exiting one that enters the share parks
//! for good, without the GIL, where the process's end finds it, as PyO3 parks a thread that asks
//! for the GIL while the interpreter finalizes. Both sides run with the GIL held, so a thread
//! either counted itself before the handler looked or sees its flag.
//!
//! A forked child has only the thread that forked: `os.register_at_fork` (also in
//! `ringenv/vector.py`) sets the child's count to that thread's own calls
//! ([`exit_guard_after_fork`]), so the child's exit never waits for the parent's other threads.

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
