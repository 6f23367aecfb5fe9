//! The spin phase of a wait: how long a waiter spins before it sleeps on its futex, learned from
//! its own recent waits, and how it spins when processes outnumber cores.
//!
//! A [`Spinner`] is one waiter's private state (it lives in the waiting process, never in shared
//! memory; no other process reads or writes it). Before each wait it looks at an exponentially
//! weighted moving average of how long its recent waits took, and
//!
//! - spins for `2 * average + bound / 10` when that fits within the bound
//!   ([`SpinPolicy::spin`]), then sleeps if the wait is not over. This is glibc's adaptive mutex
//!   (`PTHREAD_MUTEX_ADAPTIVE_NP`, nptl `pthread_mutex_lock.c`): spin at most
//!   `min(MAX_ADAPTIVE_COUNT, 2 * spins + 10)` probes, then learn `spins += (cnt - spins) / 8`;
//!   here the unit is time instead of probes;
//! - sleeps at once when it does not fit: the waits are long, and spinning through their first
//!   part would cost CPU (in an oversubscribed pool, the CPU of the peers doing the work) for no
//!   gain. A wake-up of a sleeping process costs ~30-40 µs on a VM; a 750 µs wait is not made
//!   shorter by spinning its first 200 µs.
//!
//! The bound is a hard limit: a waiting main process or an idle worker never spins longer than
//! [`SpinPolicy::spin`] per wait, whatever it learned. Each wait counts at most four bounds in the
//! average, so after a long pause (a learner's update of seconds) about seventeen short waits bring
//! a waiter back to spinning, and one wait of four bounds or more stops it spinning. A wait that
//! slept counts its wake-up latency too; a waiter sleeping at once therefore resumes spinning when
//! its waits plus that latency average less than `0.45 * bound` (90 µs by default: waits up to
//! ~50 µs on a VM), and otherwise keeps sleeping, which is what such waits cost anyway.
//!
//! This is spin-then-block with a threshold learned from the waits' recent history, in the spirit
//! of Karlin, Li, Manasse and Owicki, "Empirical studies of competitive spinning for a
//! shared-memory multiprocessor" (SOSP 1991), whose adaptive strategies pick the spin threshold
//! from observed waiting times instead of fixing it at the cost of a block.
//!
//! How a spinner probes is its [`Probe`]: the CPU's pause instruction between looks (yielding the
//! core every [`YIELD_EVERY`]th look) when each process of the pool has a core, or `sched_yield`
//! between every two looks when the pool's processes (its workers and the main process)
//! outnumber the cores this process may run on ([`Probe::for_processes`]). The main process
//! decides both for the whole pool ([`SpinSettings::for_pool`]); the segment header carries the
//! decision to every worker. docs/WAKEUP.md has the measurements behind each choice.
//!
//! ```
//! use ringenv_runtime::{Probe, SpinPolicy, SpinSettings, Spinner, Wakeup};
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::time::Duration;
//! let wakeup = Wakeup::default();
//! let flag = AtomicBool::new(false);
//! let mut spinner = Spinner::new(SpinSettings { policy: SpinPolicy::default(), probe: Probe::Pause });
//! std::thread::scope(|s| {
//!     s.spawn(|| { flag.store(true, Ordering::Release); wakeup.notify(); });
//!     assert!(spinner.wait(&wakeup, || flag.load(Ordering::Acquire), Duration::from_secs(5)));
//! });
//! assert!(spinner.budget() <= SpinPolicy::default().spin);
//! ```

use crate::futex::{DefaultFutex, Futex};
use crate::sync::{spin_loop, Instant};
use crate::wakeup::Wakeup;
use std::time::Duration;

/// How long a waiter may spin before it sleeps on the futex.
///
/// `spin` bounds the spin phase of every wait. A pool's waiters ([`Spinner`]) spin less, or not
/// at all, when their recent waits were long; [`crate::Wakeup::wait`], which keeps no state,
/// always spins the whole bound (ringenv's behaviour before the adaptive policy). `spin: ZERO`
/// ([`SpinPolicy::NEVER`]) sleeps at once on every wait.
///
/// The default bound, 200 µs, lets a waiter spin through waits of up to 90 µs (a spinner spins
/// twice its average wait): a worker then catches the main process's turnaround between two
/// batches (the main process's own futex wake-up, ~30-40 µs on a VM, plus its Python code) without
/// a wake-up of its own, while waits longer than that, a main process waiting for a batch of
/// 750 µs envs, are slept through at once (docs/WAKEUP.md has the measurements on 2 cores and the
/// reasoning for 16).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpinPolicy {
    /// Upper bound of one wait's spin phase. `Duration::ZERO` sleeps at once.
    pub spin: Duration,
}

impl SpinPolicy {
    /// The default bound of the spin phase: 200 µs.
    pub const DEFAULT_SPIN: Duration = Duration::from_micros(200);
    /// Never spin: every wait announces itself and sleeps on the futex at once.
    pub const NEVER: SpinPolicy = SpinPolicy { spin: Duration::ZERO };
}

impl Default for SpinPolicy {
    fn default() -> Self {
        SpinPolicy { spin: Self::DEFAULT_SPIN }
    }
}

/// What a spinning waiter does between two looks at its condition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Probe {
    /// The CPU's pause instruction (`spin_loop`), and every [`YIELD_EVERY`]th time a
    /// `sched_yield`: the lowest latency for a waiter that has a core to itself, and a bound on
    /// what it withholds from a peer that shares its core after all (a learner's threads, another
    /// pool): a hand-off within about a microsecond instead of a whole time slice.
    #[default]
    Pause,
    /// `sched_yield` between every two looks: the core goes to another runnable process, if any.
    /// For pools whose processes outnumber the cores, where a waiter's peer is often queued
    /// behind it on its own core.
    Yield,
}

/// A [`Probe::Pause`] spinner yields its core once every this many probes (one probe is a look
/// at the condition, a clock reading and a pause: 30-60 ns on the VMs measured, so about every
/// 1-2 µs).
pub const YIELD_EVERY: u32 = 32;

impl Probe {
    /// [`Probe::Yield`] when `runnable` processes (a pool's workers plus its main process) are
    /// more than the cores this process may run on (its CPU affinity and cgroup quota, as
    /// `std::thread::available_parallelism` reports them; 1 if unknown), else [`Probe::Pause`].
    pub fn for_processes(runnable: usize) -> Probe {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        Probe::for_processes_on(runnable, cores)
    }

    /// [`Probe::for_processes`] with the core count given.
    pub fn for_processes_on(runnable: usize, cores: usize) -> Probe {
        if runnable > cores {
            Probe::Yield
        } else {
            Probe::Pause
        }
    }

    /// The code of this probe in the segment header (0 pause, 1 yield).
    pub fn code(self) -> u32 {
        match self {
            Probe::Pause => 0,
            Probe::Yield => 1,
        }
    }

    /// The probe of header code `code`, `None` for an unknown code.
    pub fn from_code(code: u32) -> Option<Probe> {
        match code {
            0 => Some(Probe::Pause),
            1 => Some(Probe::Yield),
            _ => None,
        }
    }
}

/// The wait policy of a whole pool: decided by the main process, written into the segment header,
/// followed by every worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpinSettings {
    /// The bound of every wait's spin phase.
    pub policy: SpinPolicy,
    /// How spinning waiters probe.
    pub probe: Probe,
}

impl SpinSettings {
    /// The settings of a pool of `num_workers` workers waited on by one main process:
    /// `policy`, probing with [`Probe::for_processes`]`(num_workers + 1)`.
    pub fn for_pool(policy: SpinPolicy, num_workers: usize) -> SpinSettings {
        SpinSettings { policy, probe: Probe::for_processes(num_workers.saturating_add(1)) }
    }
}

/// Weight of a new wait in the moving average: `1 / 2^EWMA_SHIFT`, glibc's 1/8.
const EWMA_SHIFT: u32 = 3;

/// A wait is counted as at most this many bounds, so one very long wait (a learner's pause of
/// seconds) cannot keep the average high for long: after it, about seventeen short waits bring
/// the waiter back to spinning (`4 * (7/8)^17 < 0.45`).
const SAMPLE_CAP_BOUNDS: u64 = 4;

/// A waiter's learned spin state (see the module docs). One per waiter; not shared.
#[derive(Clone, Debug)]
pub struct Spinner {
    settings: SpinSettings,
    /// The moving average of recent waits, in nanoseconds (each wait capped at
    /// `SAMPLE_CAP_BOUNDS` bounds).
    average_ns: u64,
}

impl Spinner {
    /// A spinner following `settings`, starting from the largest average that still spins (so
    /// its first wait spins the whole bound).
    pub fn new(settings: SpinSettings) -> Spinner {
        let mut spinner = Spinner { settings, average_ns: 0 };
        spinner.average_ns = spinner.edge_ns();
        spinner
    }

    /// The settings it follows.
    pub fn settings(&self) -> SpinSettings {
        self.settings
    }

    fn bound_ns(&self) -> u64 {
        self.settings.policy.spin.as_nanos().min(u128::from(u64::MAX)) as u64
    }

    /// The moving average of recent waits.
    pub fn average(&self) -> Duration {
        Duration::from_nanos(self.average_ns)
    }

    /// The spin the average asks for: `2 * average + bound / 10`, in nanoseconds.
    fn wanted_ns(&self) -> u64 {
        self.average_ns.saturating_mul(2).saturating_add(self.bound_ns() / 10)
    }

    /// The largest average whose wanted spin fits within the bound.
    fn edge_ns(&self) -> u64 {
        let bound = self.bound_ns();
        (bound - bound / 10) / 2
    }

    /// Whether the next wait sleeps at once: the spin the recent waits ask for does not fit
    /// within the bound (their average is above `0.45 * bound`), or the bound is zero.
    pub fn sleeps_at_once(&self) -> bool {
        let bound = self.bound_ns();
        bound == 0 || self.wanted_ns() > bound
    }

    /// How long the next wait spins at most: `2 * average + bound / 10` when that fits within the
    /// bound, else zero.
    pub fn budget(&self) -> Duration {
        if self.sleeps_at_once() {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.wanted_ns())
    }

    /// Learns from one wait that took `waited` (from its start until `ready()` held or it timed
    /// out, spin and sleep together).
    pub fn record(&mut self, waited: Duration) {
        let bound = self.bound_ns();
        if bound == 0 {
            return;
        }
        let sample = (waited.as_nanos().min(u128::from(u64::MAX)) as u64).min(bound.saturating_mul(SAMPLE_CAP_BOUNDS));
        // glibc: spins += (cnt - spins) / 8, in signed arithmetic.
        let delta = (i128::from(sample) - i128::from(self.average_ns)) >> EWMA_SHIFT;
        self.average_ns = (i128::from(self.average_ns) + delta).max(0) as u64;
    }

    /// Waits on `wakeup` until `ready()` holds (`true`) or `timeout` passed (`false`): spins for
    /// the learned budget, probing per the settings, then sleeps on the futex; then learns from
    /// how long the wait took.
    pub fn wait(&mut self, wakeup: &Wakeup, mut ready: impl FnMut() -> bool, timeout: Duration) -> bool {
        self.wait_with::<DefaultFutex>(wakeup, &mut ready, timeout)
    }

    /// [`Spinner::wait`] over any [`Futex`] implementation.
    pub fn wait_with<F: Futex>(&mut self, wakeup: &Wakeup, ready: &mut dyn FnMut() -> bool, timeout: Duration) -> bool {
        let start = Instant::now();
        let spun = spin(ready, start + self.budget().min(timeout), self.settings.probe);
        let woke = spun || wakeup.sleep_with::<F>(ready, start + timeout);
        self.record(Instant::now() - start);
        woke
    }
}

/// Looks at `ready()` until it holds (`true`) or `until` passed (`false`), probing with `probe`.
/// Looks at least once.
pub(crate) fn spin(ready: &mut dyn FnMut() -> bool, until: Instant, probe: Probe) -> bool {
    let mut probes = 0u32;
    loop {
        if ready() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        probes = probes.wrapping_add(1);
        match probe {
            Probe::Pause if probes % YIELD_EVERY != 0 => spin_loop(),
            Probe::Pause | Probe::Yield => yield_now(),
        }
    }
}

/// `sched_yield`, or a yield to loom's scheduler.
fn yield_now() {
    #[cfg(not(loom))]
    std::thread::yield_now();
    #[cfg(loom)]
    loom::thread::yield_now();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_micros(200);

    fn spinner() -> Spinner {
        Spinner::new(SpinSettings { policy: SpinPolicy { spin: BOUND }, probe: Probe::Pause })
    }

    #[test]
    fn short_waits_spin_less_than_the_bound_and_long_ones_not_at_all() {
        let mut s = spinner();
        assert_eq!(s.budget(), BOUND, "a fresh spinner spins the whole bound");
        for _ in 0..100 {
            s.record(Duration::from_micros(2));
        }
        let short = s.budget();
        assert!(s.average() < Duration::from_micros(3), "converged down: {:?}", s.average());
        assert!(short > Duration::from_micros(20) && short < Duration::from_micros(30), "budget {short:?}");
        s.record(Duration::from_micros(750));
        assert!(s.sleeps_at_once(), "one 750 us wait stops the spinning: average {:?}", s.average());
        assert_eq!(s.budget(), Duration::ZERO);
        for _ in 0..100 {
            s.record(Duration::from_micros(60));
        }
        assert!(!s.sleeps_at_once(), "waits of 60 us are spun through: average {:?}", s.average());
        let long = s.budget();
        assert!(long > Duration::from_micros(120) && long <= BOUND, "converged up: budget {long:?}");
    }

    #[test]
    fn the_average_stays_within_the_cap_and_recovers_after_a_long_pause() {
        let mut s = spinner();
        s.record(Duration::from_secs(3600));
        assert!(s.average() <= BOUND * 4);
        for _ in 0..1000 {
            s.record(Duration::MAX);
        }
        let below = BOUND * 4 - s.average();
        assert!(below < Duration::from_nanos(8), "capped at four bounds (within the 1/8 rounding): {below:?}");
        let mut waits = 0;
        while s.sleeps_at_once() {
            s.record(Duration::from_micros(5));
            waits += 1;
        }
        assert!(waits <= 18, "back to spinning after {waits} short waits");
        for _ in 0..1000 {
            s.record(Duration::ZERO);
            assert!(s.budget() <= BOUND);
        }
        assert_eq!(s.budget(), BOUND / 10, "the floor of the budget is a tenth of the bound");
    }

    #[test]
    fn slept_waits_with_a_wake_up_latency_still_resume_spinning_when_short() {
        let mut s = spinner();
        for _ in 0..20 {
            s.record(Duration::from_millis(1));
        }
        assert!(s.sleeps_at_once());
        // Waits of 10 us, each measured with a 40 us wake-up on top since the waiter slept.
        for _ in 0..30 {
            s.record(Duration::from_micros(10 + 40));
        }
        assert!(!s.sleeps_at_once(), "average {:?}", s.average());
    }

    #[test]
    fn never_spin_and_zero_timeouts() {
        let mut s = Spinner::new(SpinSettings { policy: SpinPolicy::NEVER, probe: Probe::Yield });
        for _ in 0..100 {
            assert_eq!(s.budget(), Duration::ZERO);
            s.record(Duration::from_micros(1));
        }
        assert!(s.sleeps_at_once());
        let w = Wakeup::default();
        assert!(s.wait(&w, || true, Duration::ZERO), "a ready condition is seen even with no time left");
        assert!(!s.wait(&w, || false, Duration::ZERO));
        assert_eq!(w.sleeps(), 0, "no time left: no sleep");
    }

    #[test]
    fn oversubscribed_pools_yield() {
        assert_eq!(Probe::for_processes_on(3, 2), Probe::Yield, "main + 2 workers on 2 cores");
        assert_eq!(Probe::for_processes_on(2, 2), Probe::Pause, "main + 1 worker on 2 cores");
        assert_eq!(Probe::for_processes_on(17, 16), Probe::Yield);
        assert_eq!(Probe::for_processes_on(9, 16), Probe::Pause);
        for p in [Probe::Pause, Probe::Yield] {
            assert_eq!(Probe::from_code(p.code()), Some(p));
        }
        assert_eq!(Probe::from_code(7), None);
    }

    #[test]
    fn spinners_of_either_probe_are_woken_by_a_publish() {
        use std::sync::atomic::{AtomicU32, Ordering};
        const ROUNDS: u32 = if cfg!(miri) { 5 } else { 200 };
        for probe in [Probe::Pause, Probe::Yield] {
            let w = Wakeup::default();
            let published = AtomicU32::new(0);
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    let mut s = Spinner::new(SpinSettings { policy: SpinPolicy { spin: BOUND }, probe });
                    for round in 1..=ROUNDS {
                        let ready = || published.load(Ordering::Acquire) >= round;
                        assert!(s.wait(&w, ready, Duration::from_secs(30)), "{probe:?} round {round}");
                        assert!(s.budget() <= BOUND);
                    }
                });
                for round in 0..ROUNDS {
                    if round % 8 == 0 {
                        std::thread::sleep(Duration::from_micros(300)); // some waits outlast the spin
                    }
                    published.fetch_add(1, Ordering::Release);
                    w.notify();
                }
            });
        }
    }
}
