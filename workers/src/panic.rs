//! Catching a panic inside an env with its message and source location.
//!
//! `catch_unwind` returns only the panic's payload (its message); the location
//! (`file:line:column`) is known only to the panic hook. [`catch`] installs, once per process, a
//! hook that records the location (and a backtrace when `RUST_BACKTRACE` asks for one) in a
//! thread-local while a [`catch`] is running on that thread, and stays silent then: the panic is
//! reported to the caller instead of printed. Panics outside a [`catch`] go to the previous hook
//! (by default, printed on stderr). A crate built with `panic = "abort"` cannot catch panics; its
//! worker dies and the pool reports a dead worker.
//!
//! ```
//! use ringenv_worker::panic::catch;
//! assert_eq!(catch(|| 2 + 2).unwrap(), 4);
//! let caught = catch(|| -> u32 { panic!("bad action {}", 7) }).unwrap_err();
//! assert_eq!(caught.message, "bad action 7");
//! assert!(caught.location.as_deref().unwrap().starts_with("workers/src/panic.rs:"));
//! assert!(caught.to_string().starts_with("bad action 7 (panicked at workers/src/panic.rs:"));
//! ```

use std::backtrace::{Backtrace, BacktraceStatus};
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
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
}

static HOOK: Once = Once::new();

fn install_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CATCHING.with(Cell::get) {
                let location = info.location().map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
                let backtrace = Backtrace::capture();
                let backtrace =
                    if backtrace.status() == BacktraceStatus::Captured { backtrace.to_string() } else { String::new() };
                LAST.with(|last| *last.borrow_mut() = Some((location.unwrap_or_default(), backtrace)));
            } else {
                previous(info);
            }
        }));
    });
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
