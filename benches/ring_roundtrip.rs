//! Criterion benchmark: one command -> completion round trip between two processes over the
//! segment's rings, on the spin path (both sides spin, no system call) and on the futex path
//! (both sides sleep at once, every hand-off is a FUTEX_WAKE of a sleeping process).
//! Figures: benches/RESULTS.md.

#[path = "../tests/rust/support/echo.rs"]
mod echo;

use criterion::Criterion;
use echo::*;
use ringenv_runtime::SpinPolicy;
use std::time::Duration;

fn bench_path(c: &mut Criterion, name: &str, spin: Duration) {
    let segment = echo_segment();
    let commands = segment.command_ring(0);
    let completions = segment.completion_ring().acquire_consumer().unwrap();
    let child = spawn_echo(&segment, &[], spin);
    let policy = SpinPolicy { spin };
    let mut seq = 0u64;
    c.bench_function(name, |b| {
        b.iter(|| {
            seq += 1;
            assert_eq!(round_trip(&segment, &commands, &completions, seq, policy), seq);
        })
    });
    close_echo(&segment, &commands, child);
}

fn main() {
    if run_echo_child() {
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench_path(&mut c, "ring_round_trip/spin", Duration::from_millis(1));
    bench_path(&mut c, "ring_round_trip/futex", Duration::ZERO);
    c.final_summary();
}
