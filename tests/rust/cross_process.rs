//! Two-process tests of the ring and the futex wake-up: a child process (this test binary,
//! re-executed) attaches the same memfd segment and echoes commands back.

#[path = "support/echo.rs"]
mod echo;

use echo::*;
use ringenv_runtime::{Probe, SpinPolicy, SpinSettings, Spinner};
use std::time::{Duration, Instant};

const CHILD: [&str; 4] = ["--ignored", "--exact", "echo_child_entry", "--nocapture"];

#[test]
#[ignore = "entry point of the child process started by the other tests"]
fn echo_child_entry() {
    assert!(run_echo_child(), "run only as the child of a cross-process test");
}

#[test]
fn ring_between_two_processes_keeps_order_across_laps() {
    let segment = echo_segment();
    let commands = segment.command_ring(0);
    let completions = segment.completion_ring(0).acquire_consumer().unwrap();
    let child = spawn_echo(&segment, &CHILD, Duration::from_micros(50));
    // Many more round trips than cells: every lap of both rings is exercised.
    for seq in 1..=5_000u64 {
        assert_eq!(round_trip(&segment, &commands, &completions, seq, SpinPolicy::default()), seq);
    }
    close_echo(&segment, &commands, child);
    assert!(completions.pop().is_none(), "no stray completion");
}

#[test]
fn futex_wakes_a_sleeping_process() {
    let segment = echo_segment();
    let commands = segment.command_ring(0);
    let completions = segment.completion_ring(0).acquire_consumer().unwrap();
    // The child never spins: it always sleeps on the futex.
    let child = spawn_echo(&segment, &CHILD, Duration::ZERO);
    let wakeup = segment.command_wakeup(0).unwrap();
    let mut slept = 0; // the child's sleeps, counted when it was last seen asleep
    for seq in 1..=20u64 {
        // Until the child has gone to sleep again (it announces itself, then counts the sleep,
        // then waits on the futex), however long a busy machine keeps it from getting there: the
        // push must then wake it through the futex. No fixed pause, which a loaded machine outlasts.
        let deadline = Instant::now() + Duration::from_secs(60);
        while wakeup.sleeps() == slept {
            assert!(Instant::now() < deadline, "the echo child did not go to sleep in 60 s");
            std::thread::sleep(Duration::from_micros(50));
        }
        slept = wakeup.sleeps();
        commands.push(ringenv_runtime::Command::new(ringenv_runtime::CommandKind::Step, 0, seq, false)).unwrap();
        assert!(wakeup.notify(), "the child announced its sleep, so notify must wake it");
        let ring = completions.ring();
        let mut zero = Spinner::new(SpinSettings { policy: SpinPolicy::NEVER, probe: Probe::Pause });
        assert!(zero.wait(segment.completion_wakeup(), || ring.has_ready(), Duration::from_secs(10)));
        assert_eq!(completions.pop().map(|c| c.seq), Some(seq));
    }
    close_echo(&segment, &commands, child);
}
