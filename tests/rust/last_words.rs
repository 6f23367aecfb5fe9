//! A worker's last words ([`ringenv_worker::panic::LastWords`]): only an uncaught panic of the
//! thread that registered the record (the worker's own) is the reason the worker dies; another
//! thread's panic ends that thread only, so it is the worker's last error, naming the thread.
//! One test in this binary: the record is the process's, and any other test's panic would
//! write to it.

use ringenv_runtime::WorkerMetrics;
use ringenv_worker::panic::LastWords;

#[test]
fn only_an_uncaught_panic_of_the_registering_thread_is_last_words() {
    let metrics: &'static WorkerMetrics = Box::leak(Box::default());
    // SAFETY: leaked, so valid for ever.
    let guard = unsafe { LastWords::register(metrics) };
    let helper = std::thread::Builder::new().name("env-helper".into()).spawn(|| panic!("the helper's")).unwrap();
    assert!(helper.join().is_err());
    // The worker outlives its helper: no last words, and the panic is its last error.
    assert_eq!(metrics.take_last_words(), None);
    let error = metrics.snapshot().last_error;
    assert!(error.starts_with("panic: the helper's") && error.ends_with("(on thread env-helper)"), "{error}");
    assert!(std::panic::catch_unwind(|| panic!("the worker's")).is_err());
    let words = metrics.take_last_words().expect("the registering thread's panic is last words");
    assert!(words.starts_with("panic: the worker's (panicked at ") && words.contains("last_words.rs:"), "{words}");
    drop(guard);
    // Unregistered: a panic writes nothing.
    assert!(std::panic::catch_unwind(|| panic!("after")).is_err());
    assert_eq!(metrics.take_last_words(), None);
    assert!(metrics.snapshot().last_error.starts_with("panic: the worker's"));
}
