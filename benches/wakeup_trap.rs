//! The wake-up trap, reproduced on any machine: two threads ping-pong through `Spinner`s over a
//! futex whose every sleep costs an extra, chosen wake-up latency (busy-waited after the real
//! wake-up, so the waiter is late to run as on a slow VM). First 60 rounds with a 2 ms pause on
//! one side put both waiters to sleep; then 20,000 round trips are timed, and the share of waits
//! that had a spin phase is read from the `Wakeup` counters.
//!
//! A benchmark, not a test (figures depend on the machine). A policy that learned a slept wait's
//! whole length, wake-up included, left both sides asleep for ever with a 90 µs latency and 5 µs
//! of work (~3,500 round trips/s); learning the peer-ready time from the producer's stamp
//! (`runtime/src/wait.rs`) spins again (~30,000).
//!
//! `cargo bench -p ringenv-runtime --bench wakeup_trap -- [LATENCY_US] [WORK_US]` (default 90 and
//! 5): prints one line per `spin_us` in none (the default), 0, 200, 2000.

use ringenv_runtime::{Futex, SharedFutex};
use ringenv_runtime::{Probe, SpinPolicy, SpinSettings, Spinner, Wakeup};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const PAUSED: u64 = 60;
const ROUNDS: u64 = 20_000;

fn busy(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// The simulated wake-up latency, in µs.
static LATENCY_US: AtomicU64 = AtomicU64::new(90);

/// The real futex, plus [`LATENCY_US`] after every wait that slept (took over 3 µs).
struct SlowFutex;

impl Futex for SlowFutex {
    fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
        let t = Instant::now();
        SharedFutex::wait(word, expected, timeout);
        if t.elapsed() > Duration::from_micros(3) {
            busy(Duration::from_micros(LATENCY_US.load(Ordering::Relaxed)));
        }
    }
    fn wake(word: &AtomicU32, count: u32) -> usize {
        SharedFutex::wake(word, count)
    }
}

/// Round trips per second, and the shares of the two sides' timed waits that had a spin phase.
fn run(policy: SpinPolicy, work: Duration) -> (f64, f64, f64) {
    let settings = SpinSettings { policy, probe: Probe::Pause };
    let (main_wakeup, worker_wakeup) = (Wakeup::default(), Wakeup::default());
    let (cmd, done) = (AtomicU64::new(0), AtomicU64::new(0));
    let timeout = Duration::from_secs(5);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut spinner = Spinner::new(settings);
            for r in 1..=ROUNDS + PAUSED {
                while !spinner.wait_with::<SlowFutex>(
                    &worker_wakeup,
                    &mut || u32::from(cmd.load(Ordering::Acquire) < r),
                    timeout,
                ) {}
                busy(work);
                done.store(r, Ordering::Release);
                main_wakeup.notify_with::<SlowFutex>();
            }
        });
        let mut spinner = Spinner::new(settings);
        let (mut t0, mut spins) = (Instant::now(), (0, 0));
        for r in 1..=ROUNDS + PAUSED {
            if r <= PAUSED {
                std::thread::sleep(Duration::from_millis(2));
            } else if r == PAUSED + 1 {
                t0 = Instant::now();
                spins = (main_wakeup.spins(), worker_wakeup.spins());
            }
            cmd.store(r, Ordering::Release);
            worker_wakeup.notify_with::<SlowFutex>();
            while !spinner.wait_with::<SlowFutex>(
                &main_wakeup,
                &mut || u32::from(done.load(Ordering::Acquire) < r),
                timeout,
            ) {}
            busy(Duration::from_micros(1));
        }
        let rate = ROUNDS as f64 / t0.elapsed().as_secs_f64();
        let share = |now: u32, then: u32| f64::from(now.wrapping_sub(then)) / ROUNDS as f64;
        (rate, share(main_wakeup.spins(), spins.0), share(worker_wakeup.spins(), spins.1))
    })
}

fn main() {
    let numbers: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    LATENCY_US.store(numbers.first().copied().unwrap_or(90), Ordering::Relaxed);
    let work = Duration::from_micros(numbers.get(1).copied().unwrap_or(5));
    for spin_us in [None, Some(0), Some(200), Some(2000)] {
        let policy = spin_us.map_or(SpinPolicy::default(), |us| SpinPolicy { spin: Duration::from_micros(us) });
        let (rate, main, worker) = run(policy, work);
        println!(
            "latency {} us, work {work:?}, spin_us {}: {rate:.0} round trips/s; waits with a spin phase: main {main:.2}, worker {worker:.2}",
            LATENCY_US.load(Ordering::Relaxed),
            spin_us.map_or("none".to_string(), |s| s.to_string())
        );
    }
}
