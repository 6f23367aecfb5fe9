//! Catching a panic inside an env with its message and source location.
//!
//! `catch_unwind` returns only the panic's message; [`catch`] installs, once per process, a hook
//! that records the location (and a backtrace when `RUST_BACKTRACE` asks) while a [`catch`] runs
//! on that thread, and stays silent then. Other panics go to the previous hook. A crate built with
//! `panic = "abort"` cannot catch panics: its worker dies.
//!
//! **Last words.** Once a worker registers its metrics record ([`LastWords::register`]), an
//! uncaught panic on its thread and a caught panic it exits on ([`last_words`]) leave their text
//! and location in the segment, and the pool reports them with the death. An uncaught panic on
//! another thread of the worker is left as its last error for `ringenv top`.
//!
//! ```
//! use ringenv_worker::panic::catch;
//! assert_eq!(catch(|| 2 + 2).unwrap(), 4);
//! let caught = catch(|| -> u32 { panic!("bad action {}", 7) }).unwrap_err();
//! assert_eq!(caught.message, "bad action 7");
//! assert!(caught.location.as_deref().unwrap().starts_with("workers/src/panic.rs:"));
//! assert!(caught.to_string().starts_with("bad action 7 (panicked at workers/src/panic.rs:"));
//! ```

use ringenv_runtime::WorkerMetrics;
use std::backtrace::{Backtrace, BacktraceStatus};
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Once;

/// A caught panic.
///
/// ```
/// let p = ringenv_worker::panic::Panic { message: "boom".into(), location: Some("src/lib.rs:3:5".into()),
///                                        backtrace: String::new() };
/// assert_eq!(p.to_string(), "boom (panicked at src/lib.rs:3:5)");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Panic {
    /// The panic message (`"a panic with a non-string payload"` when it was not a string).
    pub message: String,
    /// `file:line:column` where it panicked, when the hook saw it.
    pub location: Option<String>,
    /// A backtrace, when `RUST_BACKTRACE` or `RUST_LIB_BACKTRACE` enabled one (else empty).
    pub backtrace: String,
}

impl std::fmt::Display for Panic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.location {
            Some(at) => write!(f, "{} (panicked at {at})", self.message),
            None => f.write_str(&self.message),
        }
    }
}

thread_local! {
    /// Whether a `catch` runs on this thread (the hook then records instead of printing).
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    /// What the hook recorded of the last panic inside a `catch`: location and backtrace.
    static LAST: RefCell<Option<(String, String)>> = const { RefCell::new(None) };
    /// Whether this thread registered the record of [`LastWords`]: the worker's own thread, whose
    /// uncaught panic ends the worker. Another thread's (the env's own threads, the parent
    /// watcher) may end only that thread, so it is the worker's last error, not its last words.
    static SPEAKS: Cell<bool> = const { Cell::new(false) };
}

static HOOK: Once = Once::new();

/// The metrics record of this worker process in its segment, once registered ([`LastWords`]);
/// null otherwise (in a main process, in tests).
static LAST_WORDS: AtomicPtr<WorkerMetrics> = AtomicPtr::new(std::ptr::null_mut());

/// While alive, the worker's last words ([`last_words`], and panics no [`catch`] catches) go to
/// one metrics record of the segment. Dropping it unregisters the record.
#[must_use = "the record is unregistered when this guard drops"]
pub struct LastWords(());

impl LastWords {
    /// Registers `metrics` (this worker's record in its segment) for the process's last words.
    ///
    /// # Safety
    /// `metrics` must stay mapped and valid until the returned guard is dropped (declare the
    /// guard after the endpoint owning the mapping, so that it drops first).
    pub unsafe fn register(metrics: &WorkerMetrics) -> LastWords {
        install_hook();
        LAST_WORDS.store(std::ptr::from_ref(metrics).cast_mut(), Ordering::Release);
        SPEAKS.with(|s| s.set(true));
        LastWords(())
    }
}

impl Drop for LastWords {
    fn drop(&mut self) {
        LAST_WORDS.store(std::ptr::null_mut(), Ordering::Release);
        SPEAKS.with(|s| s.set(false));
    }
}

/// Leaves `text` (`"<kind>: <message>"`, e.g. `"panic: boom (panicked at src/lib.rs:3:5) (env 1)"`)
/// as this worker's last words, for the pool to report with its death; does nothing when no
/// record is registered. Call it right before the process exits. Lock-free and allocation-free.
pub fn last_words(text: &str) {
    let metrics = LAST_WORDS.load(Ordering::Acquire);
    // SAFETY: a non-null pointer is a registered record, valid until its guard unregisters it
    // (the contract of `LastWords::register`).
    if let Some(metrics) = unsafe { metrics.as_ref() } {
        metrics.set_last_words(text);
    }
}

fn install_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let location = info.location().map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
            if CATCHING.with(Cell::get) {
                let backtrace = Backtrace::capture();
                let backtrace =
                    if backtrace.status() == BacktraceStatus::Captured { backtrace.to_string() } else { String::new() };
                LAST.with(|last| *last.borrow_mut() = Some((location.unwrap_or_default(), backtrace)));
            } else {
                // Nothing catches it: the thread unwinds out or the process aborts. Leave its
                // text for the pool first: the worker's last words when it ends the worker (its
                // own thread, or any thread where a panic aborts), else its last error (`top`
                // shows it; a later death of the worker for another cause is not blamed on it).
                let metrics = LAST_WORDS.load(Ordering::Acquire);
                // SAFETY: as in `last_words`: a registered record, valid until its guard drops.
                if let Some(metrics) = unsafe { metrics.as_ref() } {
                    let p = Panic { message: message_of(info.payload()), location, backtrace: String::new() };
                    let text = format!("panic: {p}");
                    if SPEAKS.with(Cell::get) || cfg!(panic = "abort") {
                        metrics.set_last_words(&text);
                    } else {
                        metrics.set_last_error(&format!("{text} (on thread {})", thread_name()));
                    }
                }
                previous(info);
            }
        }));
    });
}

/// The current thread's name, or its id when it has none.
fn thread_name() -> String {
    let thread = std::thread::current();
    thread.name().map_or_else(|| format!("{:?}", thread.id()), str::to_owned)
}

fn message_of(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".into())
}

/// Runs `f`, returning its value, or the panic it raised with message and location.
///
/// ```
/// let err = ringenv_worker::panic::catch(|| [1, 2][std::hint::black_box(5)]).unwrap_err();
/// assert!(err.message.contains("index out of bounds"));
/// ```
///
/// # Errors
/// The [`Panic`] that unwound out of `f`.
pub fn catch<R>(f: impl FnOnce() -> R) -> Result<R, Panic> {
    install_hook();
    let outer = CATCHING.with(|c| c.replace(true));
    // Cleared so that a location is never one of an earlier panic (should another hook replace
    // this one, a panic is reported without a location rather than with a wrong one).
    LAST.with(|last| last.borrow_mut().take());
    let result = catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(outer));
    result.map_err(|payload| {
        let (location, backtrace) = LAST.with(|last| last.borrow_mut().take()).unwrap_or_default();
        Panic { message: message_of(payload.as_ref()), location: (!location.is_empty()).then_some(location), backtrace }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_catches_report_their_own_panic() {
        let outer = catch(|| {
            let inner = catch(|| panic!("inner")).unwrap_err();
            assert_eq!(inner.message, "inner");
            std::panic::panic_any(17u32);
        })
        .unwrap_err();
        assert_eq!(outer.message, "a panic with a non-string payload");
        let line = outer.location.unwrap();
        assert!(line.starts_with("workers/src/panic.rs:"), "{line}");
        // After the catches, the flag is down again.
        assert!(!CATCHING.with(Cell::get));
    }
}
