//! Criterion benchmark: one command -> completion round trip between two processes over the
//! segment's rings, on the spin path (both sides spin, no system call) and on the futex path
//! (both sides sleep at once, every hand-off is a FUTEX_WAKE of a sleeping process), and its
//! peer in the same run: a 16-byte round trip over a Unix socket between the same two processes
//! (the blocking pipe hand-off a pipe-per-env runtime makes every step).
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
    let completions = segment.completion_ring(0).acquire_consumer().unwrap();
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

fn bench_socket(c: &mut Criterion) {
    use std::io::{Read, Write};
    let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut child = spawn_socket_echo(&theirs, &[]);
    drop(theirs);
    let mut buf = [0u8; 16];
    c.bench_function("socket_round_trip/peer", |b| {
        b.iter(|| {
            ours.write_all(&buf).unwrap();
            ours.read_exact(&mut buf).unwrap();
        })
    });
    drop(ours);
    assert!(child.wait().unwrap().success());
}

fn main() {
    if run_echo_child() || run_socket_echo_child() {
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench_path(&mut c, "ring_round_trip/spin", Duration::from_millis(1));
    bench_path(&mut c, "ring_round_trip/futex", Duration::ZERO);
    bench_socket(&mut c);
    c.final_summary();
}
