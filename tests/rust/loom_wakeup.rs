//! Loom models of the spin-then-futex wake-up protocol (`runtime/src/wakeup.rs`) with the rings
//! it guards: a sleeping waiter is always woken, a spinning one costs no wake call, round trips
//! reuse the futex word safely, two workers wake the main process through one word, `wake_all`
//! reaches a sleeper, and waiters with a spin phase (`Spinner`, `runtime/src/wait.rs`) reach the
//! same handshake after it. Every waiter waits through a `Spinner`, the pool's one wait policy.
//!
//! Under `cfg(loom)` the `Wakeup` runs its own code over loom's atomics and SeqCst fences, and
//! its futex is `LocalFutex` over loom's mutex and condition variable, with timeouts not modelled:
//! a waiter sleeps until a wake addressed to its word arrives. A lost wake-up therefore leaves it
//! asleep with every other thread finished, which loom reports as a deadlock. Three deliberately
//! broken variants of the handshake (no Dekker fence; the futex word read too late; the publish
//! count read too late) are checked to fail that way, so the models are known to catch the bug
//! they are written for.
//!
//! Compiles to nothing unless built with `--cfg loom`:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p ringenv-runtime --release --test loom_ring --test loom_wakeup -- --nocapture
//! ```
#![cfg(loom)]

#[path = "loom_support.rs"]
mod support;

use loom::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;
use ringenv_runtime::{Command, CommandKind, Completion, Probe, SpinPolicy, SpinSettings, Spinner, Wakeup};
use ringenv_runtime::{Futex, LocalFutex};
use std::sync::atomic::AtomicUsize;
use std::time::Duration;
use support::*;

/// Long enough never to pass in a model (the logical clock ticks 1 µs per reading).
const FOREVER: Duration = Duration::from_secs(3600);
/// Waits on `wakeup` until `ready()` holds, sleeping at once (`SpinPolicy::NEVER`): every wait
/// exercises the announce / re-check / futex path. Timeouts are not modelled.
fn sleep_until(wakeup: &Wakeup, ready: impl FnMut() -> bool) -> bool {
    Spinner::new(SpinSettings { policy: SpinPolicy::NEVER, probe: Probe::Yield }).wait(wakeup, ready, FOREVER)
}

fn command(seq: u64) -> Command {
    Command::new(CommandKind::Step, 0, seq, false)
}

/// The command path: the main process pushes a command and notifies; the worker, sleeping at
/// once, waits and pops it. In every interleaving the worker is woken, and if it went to sleep
/// on the futex, `notify` made the wake call (so when `notify` made none, it never slept). The
/// model must also reach the sleep path in some execution, not only find the command at the
/// first probe.
///
/// Only `SpinPolicy::NEVER` is modelled: the spin phase only probes `ready()`, which has no side
/// effect, so the one probe made before sleeping stands for any number of them; and loom
/// deprioritises a thread that yields until another makes progress, so a spinning waiter would
/// hardly ever reach the sleep path in a model.
#[test]
fn sleeping_worker_is_always_woken_for_its_command() {
    static SLEPT: AtomicUsize = AtomicUsize::new(0);
    check("sleeping_worker_is_always_woken_for_its_command", || {
        let ring = ring::<Command>(2);
        let consumer = ring.acquire_consumer().unwrap();
        let wakeup = Arc::new(Wakeup::default());
        let (producer, main_side) = (ring.clone(), wakeup.clone());
        let main = thread::spawn(move || {
            producer.push(command(1)).unwrap();
            main_side.notify()
        });
        assert!(sleep_until(&wakeup, || ring.has_ready()), "timeouts are not modelled");
        assert_eq!(consumer.pop(), Some(command(1)));
        let woke_it = main.join().unwrap();
        if wakeup.sleeps() > 0 {
            assert!(woke_it, "the waiter slept but notify made no wake call");
            SLEPT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let slept = SLEPT.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("  of which the worker slept on the futex in {slept}");
    assert!(slept > 0, "no explored execution reached the futex sleep");
}

/// Two full round trips main -> worker -> main, both sides sleeping at once, each on its own
/// word: the second round's waits start from futex words the first round already bumped.
#[test]
fn two_round_trips_never_lose_a_wakeup() {
    check("two_round_trips_never_lose_a_wakeup", || {
        let commands = ring::<Command>(2);
        let completions = ring::<Completion>(2);
        let worker_commands = commands.acquire_consumer().unwrap();
        let main_completions = completions.acquire_consumer().unwrap();
        let (worker_wakeup, main_wakeup) = (Arc::new(Wakeup::default()), Arc::new(Wakeup::default()));
        let (ww, mw) = (worker_wakeup.clone(), main_wakeup.clone());
        let worker = thread::spawn(move || {
            for _ in 0..2 {
                let ring = worker_commands.ring().clone();
                assert!(sleep_until(&ww, || ring.has_ready()));
                let c = worker_commands.pop().expect("woken with a command ready");
                completions.push(Completion::new(0, c.seq, false, false)).unwrap();
                mw.notify();
            }
        });
        for seq in 1..=2 {
            commands.push(command(seq)).unwrap();
            worker_wakeup.notify();
            let ring = main_completions.ring().clone();
            assert!(sleep_until(&main_wakeup, || ring.has_ready()));
            assert_eq!(main_completions.pop().map(|c| c.seq), Some(seq));
        }
        worker.join().unwrap();
    });
}

/// The pool's wait loop: two workers each push a completion into their own completion ring and
/// notify the main process's one word; the main process drains both rings and sleeps until both
/// completions arrived, telling the word how many it still awaits (the completions neither
/// drained nor in a ring), so only the last awaited completion's `notify` wakes it.
#[test]
fn main_process_collects_both_workers_completions() {
    check("main_process_collects_both_workers_completions", || {
        let rings = [ring::<Completion>(2), ring::<Completion>(2)];
        let consumers = rings.each_ref().map(|r| r.acquire_consumer().unwrap());
        let wakeup = Arc::new(Wakeup::default());
        let workers: Vec<_> = (0..2u32)
            .map(|w| {
                let (ring, wakeup) = (rings[w as usize].clone(), wakeup.clone());
                thread::spawn(move || {
                    ring.push(Completion::new(w, 1, false, false)).unwrap();
                    wakeup.notify();
                })
            })
            .collect();
        let mut done = [false; 2];
        while done != [true, true] {
            for (w, consumer) in consumers.iter().enumerate() {
                while let Some(c) = consumer.pop() {
                    assert!(c.worker as usize == w && !done[w], "unexpected completion {c:?}");
                    done[w] = true;
                }
            }
            if done != [true, true] {
                let missing = || (0..2).filter(|&w| !done[w] && !rings[w].has_ready()).count() as u32;
                let mut spinner = Spinner::new(SpinSettings { policy: SpinPolicy::NEVER, probe: Probe::Yield });
                assert!(spinner.wait_for(&wakeup, missing, FOREVER));
            }
        }
        for w in workers {
            w.join().unwrap();
        }
    });
}

/// `wake_all` (what the pool calls when a peer died and nothing was published) reaches a waiter
/// whatever it is doing: spinning, announcing, or asleep.
#[test]
fn wake_all_reaches_a_sleeper_without_a_publish() {
    check("wake_all_reaches_a_sleeper_without_a_publish", || {
        let wakeup = Arc::new(Wakeup::default());
        let dead = Arc::new(AtomicBool::new(false));
        let (w, d) = (wakeup.clone(), dead.clone());
        let peer = thread::spawn(move || {
            d.store(true, Ordering::Release);
            w.wake_all();
        });
        assert!(sleep_until(&wakeup, || dead.load(Ordering::Acquire)));
        peer.join().unwrap();
    });
}

/// A `Spinner` with a spin phase (here a bound of two ticks of the logical clock, so one or two
/// looks with a `sched_yield` between them, as in an oversubscribed pool), then the same
/// announce / re-check / futex sleep. Two round trips, each side with its
/// own spinner, as the main process and a worker: no wake-up is lost whether a side finds its
/// ring ready while spinning or only after sleeping. A second variant never spins.
#[test]
fn spinners_round_trips_never_lose_a_wakeup() {
    for policy in [SpinPolicy { spin: Duration::from_micros(2) }, SpinPolicy::NEVER] {
        check("spinners_round_trips_never_lose_a_wakeup", move || {
            let settings = SpinSettings { policy, probe: Probe::Yield };
            let commands = ring::<Command>(2);
            let completions = ring::<Completion>(2);
            let worker_commands = commands.acquire_consumer().unwrap();
            let main_completions = completions.acquire_consumer().unwrap();
            let (worker_wakeup, main_wakeup) = (Arc::new(Wakeup::default()), Arc::new(Wakeup::default()));
            let (ww, mw) = (worker_wakeup.clone(), main_wakeup.clone());
            let worker = thread::spawn(move || {
                let mut spinner = Spinner::new(settings);
                for _ in 0..2 {
                    let ring = worker_commands.ring().clone();
                    assert!(spinner.wait(&ww, || ring.has_ready(), FOREVER));
                    let c = worker_commands.pop().expect("woken with a command ready");
                    completions.push(Completion::new(0, c.seq, false, false)).unwrap();
                    mw.notify();
                }
            });
            let mut spinner = Spinner::new(settings);
            for seq in 1..=2 {
                commands.push(command(seq)).unwrap();
                worker_wakeup.notify();
                let ring = main_completions.ring().clone();
                assert!(spinner.wait(&main_wakeup, || ring.has_ready(), FOREVER));
                assert_eq!(main_completions.pop().map(|c| c.seq), Some(seq));
            }
            worker.join().unwrap();
        });
    }
}

/// A stand-in for `Wakeup` with the handshake broken on purpose, to show the models catch a lost
/// wake-up: `fenced: false` drops the SeqCst fences of Dekker's handshake; `late_seq: true` reads
/// the futex word after the re-check instead of before announcing; `late_count: true` reads the
/// publish count after counting the missing publishes, so a publish between the two is counted
/// twice and the sleeper awaits one publish too many.
struct Broken {
    seq: AtomicU32,
    sleepers: AtomicU32,
    published: AtomicU32,
    wake_at: AtomicU32,
    fenced: bool,
    late_seq: bool,
    late_count: bool,
}

impl Broken {
    fn notify(&self) {
        let count = self.published.fetch_add(1, Ordering::AcqRel) + 1;
        if self.fenced {
            fence(Ordering::SeqCst);
        }
        if self.sleepers.load(Ordering::Acquire) > 0 && count >= self.wake_at.load(Ordering::Relaxed) {
            self.seq.fetch_add(1, Ordering::Release);
            LocalFutex::wake(&self.seq, u32::MAX);
        }
    }

    fn wait(&self, missing: impl Fn() -> u32) {
        loop {
            let early = self.seq.load(Ordering::Acquire);
            let (counted, awaited) = if self.late_count {
                let awaited = missing();
                (self.published.load(Ordering::Acquire), awaited)
            } else {
                (self.published.load(Ordering::Acquire), missing())
            };
            if awaited == 0 {
                return;
            }
            self.wake_at.store(counted + awaited, Ordering::Relaxed);
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            if self.fenced {
                fence(Ordering::SeqCst);
                self.published.load(Ordering::Acquire);
            }
            if missing() == 0 {
                self.sleepers.fetch_sub(1, Ordering::Relaxed);
                return;
            }
            let seq = if self.late_seq { self.seq.load(Ordering::Acquire) } else { early };
            LocalFutex::wait(&self.seq, seq, FOREVER);
            self.sleepers.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// `producers` threads each set their flag and notify; the waiter awaits every flag.
fn broken_handshake(fenced: bool, late_seq: bool, late_count: bool, producers: usize) {
    loom::model(move || {
        let zero = || AtomicU32::new(0);
        let (seq, sleepers, published, wake_at) = (zero(), zero(), zero(), zero());
        let b = Arc::new(Broken { seq, sleepers, published, wake_at, fenced, late_seq, late_count });
        let flags: Arc<Vec<AtomicBool>> = Arc::new((0..producers).map(|_| AtomicBool::new(false)).collect());
        let threads: Vec<_> = (0..producers)
            .map(|p| {
                let (b, flags) = (b.clone(), flags.clone());
                thread::spawn(move || {
                    flags[p].store(true, Ordering::Relaxed);
                    b.notify();
                })
            })
            .collect();
        b.wait(|| flags.iter().filter(|f| !f.load(Ordering::Relaxed)).count() as u32);
        threads.into_iter().for_each(|t| t.join().unwrap());
    });
}

/// The environment variable naming the broken variant a control child checks.
const BROKEN: &str = "RINGENV_LOOM_BROKEN";

#[test]
#[ignore = "entry point of the child process started by the control tests"]
fn broken_handshake_child() {
    match std::env::var(BROKEN).as_deref() {
        Ok("no-fence") => broken_handshake(false, false, false, 1),
        Ok("late-seq") => broken_handshake(true, true, false, 1),
        Ok("late-count") => broken_handshake(true, false, true, 2),
        _ => panic!("run only as the child of a control test"),
    }
}

/// Checks the broken `variant` in a child process (loom aborts the process while unwinding
/// from a deadlock, so `#[should_panic]` cannot catch it): it must fail, reporting a deadlock.
fn expect_lost_wakeup(variant: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "broken_handshake_child", "--nocapture", "--test-threads", "1"])
        .env(BROKEN, variant)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the broken handshake {variant} passed the model");
    assert!(stderr.contains("deadlock"), "{variant} failed, but not with a deadlock:\n{stderr}");
}

#[test]
fn control_without_the_dekker_fences_a_wakeup_is_lost() {
    expect_lost_wakeup("no-fence");
}

#[test]
fn control_reading_the_futex_word_late_loses_a_wakeup() {
    expect_lost_wakeup("late-seq");
}

#[test]
fn control_reading_the_publish_count_late_loses_a_wakeup() {
    expect_lost_wakeup("late-count");
}
