// A minimal test runner for integration tests that need `harness = false` (they fork, or their
// binary doubles as a worker): runs each named test, isolating panics, honours name filters from
// the command line, prints libtest-style lines and exits 1 if any failed. Shared by
// tests/rust/process_lifetime.rs and tests/rust/sdk_worker.rs through #[path].
#![allow(dead_code)]

/// Runs `tests` (name, function) as libtest would print them; exits the process with 1 when one
/// failed.
pub fn run_tests(tests: &[(&str, fn())]) {
    let args: Vec<String> = std::env::args().collect();
    let filter: Vec<&String> = args[1..].iter().filter(|a| !a.starts_with('-')).collect();
    let mut failed = Vec::new();
    for &(name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        match std::panic::catch_unwind(test) {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(name);
            }
        }
    }
    if !failed.is_empty() {
        println!("failed: {failed:?}");
        std::process::exit(1);
    }
}
