//! The wait policy: how long a waiter spins before it sleeps on its futex, and how it spins.
//!
//! A [`Spinner`] is one waiter's private state (the main process waiting for completions, a
//! worker waiting for its next command); the handshake it ends in is [`Wakeup`]'s.
//!
//! - **A fixed bound `B`.** `spin_us` when the user gives one ([`SpinPolicy`]; `0` never spins),
//!   else [`SpinPolicy::AUTO`]'s: 1 ms when each of the pool's processes has a core, 400 µs when
//!   they outnumber the cores (a spinner then holds a core a peer needs). No wait spins longer.
//! - **One learned quantity: the peer-ready time.** A moving average `a` (`a += (t - a) / 8`) of
//!   how long after a wait began its peer published, each sample at most `4 B`. A wait spins for
//!   `2 a + B / 10` when that fits within `B`, else it sleeps at once. A wait that slept learns `t`
//!   *without* its own wake-up latency (the waker stamps the time in the [`Wakeup`]): learning the
//!   whole wait traps a waiter asleep on a VM with slow wake-ups (`benches/wakeup_trap.rs`).
//! - **How it spins** ([`Probe`]): the pause instruction, yielding every [`YIELD_EVERY`]th look,
//!   when the pool's processes fit the cores; `sched_yield` at every look when they outnumber
//!   them (0.16 M against 3.2-3.7 M steps/s, Rust CartPole, 2 workers on 2 cores). The main
//!   process decides both ([`SpinSettings::for_pool`]); the segment header carries them.
//! - **On a crowded machine, spins are cut** (AUTO only). A pool that fits the cores samples
//!   `/proc/loadavg` (at most every 10 ms); one that outnumbers them samples its yields (two looks
//!   [`STALL`] apart lost the core). After [`CUT_AT`] crowded samples in a row, and until two
//!   fitting ones, a pausing pool sleeps at once and a yielding pool spins at most `B / 10`
//!   (`benches/wakeup_policy.py`, loaded rows: 1.43x with the default workers).
//!
//! Concurrency: a `Spinner` is `&mut` state of one waiter in one process; nothing of it is shared.
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
//! assert!(spinner.budget() <= spinner.bound());
//! ```

use crate::futex::{DefaultFutex, Futex};
use crate::sync::{spin_loop, Instant};
use crate::wakeup::Wakeup;
use std::time::Duration;

/// The bound of every wait's spin phase: `spin`, or for [`SpinPolicy::AUTO`] (the default, which
/// also cuts spins on a crowded machine) [`SpinPolicy::AUTO_BOUND`] or
/// [`SpinPolicy::AUTO_BOUND_OVERSUBSCRIBED`]; zero sleeps at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpinPolicy {
    /// Upper bound of one wait's spin phase; `u64::MAX` ns or more is [`SpinPolicy::AUTO`] (the
    /// header stores nanoseconds in a `u64`, so any longer bound reads back as AUTO).
    pub spin: Duration,
}

impl SpinPolicy {
    /// AUTO's bound when each of the pool's processes has a core ([`Probe::Pause`]): 1 ms.
    pub const AUTO_BOUND: Duration = Duration::from_millis(1);
    /// AUTO's bound when the pool's processes outnumber the cores ([`Probe::Yield`]): 400 µs.
    pub const AUTO_BOUND_OVERSUBSCRIBED: Duration = Duration::from_micros(400);
    /// The default policy, stored in the segment header as `u64::MAX` ns.
    pub const AUTO: SpinPolicy = SpinPolicy { spin: Duration::from_nanos(u64::MAX) };
    /// Never spin: every wait announces itself and sleeps on the futex at once.
    pub const NEVER: SpinPolicy = SpinPolicy { spin: Duration::ZERO };

    /// Whether this is [`SpinPolicy::AUTO`].
    pub fn is_auto(self) -> bool {
        self.spin.as_nanos() >= u128::from(u64::MAX)
    }
}

impl Default for SpinPolicy {
    /// [`SpinPolicy::AUTO`].
    fn default() -> Self {
        Self::AUTO
    }
}

/// What a spinning waiter does between two looks at its condition; its header code is `as u32`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Probe {
    /// The CPU's pause instruction, and a `sched_yield` every [`YIELD_EVERY`]th look, so a peer
    /// that shares the core after all gets it within microseconds.
    #[default]
    Pause = 0,
    /// `sched_yield` between every two looks, for pools whose processes outnumber the cores.
    Yield = 1,
}

/// A [`Probe::Pause`] spinner yields its core once every this many looks (about every 1-2 µs).
pub const YIELD_EVERY: u32 = 32;

impl Probe {
    /// [`Probe::Yield`] when `runnable` processes (a pool's workers and its main process) are more
    /// than the cores this process may run on (`std::thread::available_parallelism`: affinity and
    /// cgroup quota; 1 if unknown), else [`Probe::Pause`].
    pub fn for_processes(runnable: usize) -> Probe {
        Probe::for_processes_on(runnable, std::thread::available_parallelism().map_or(1, |n| n.get()))
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
        self as u32
    }

    /// The probe of header code `code`, `None` for an unknown code.
    pub fn from_code(code: u32) -> Option<Probe> {
        [Probe::Pause, Probe::Yield].into_iter().find(|p| p.code() == code)
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
    /// `policy` for a pool of `num_workers` workers and its main process, probing with
    /// [`Probe::for_processes`]`(num_workers + 1)`.
    pub fn for_pool(policy: SpinPolicy, num_workers: usize) -> SpinSettings {
        SpinSettings { policy, probe: Probe::for_processes(num_workers.saturating_add(1)) }
    }
}

/// Two looks of a spin this far apart mean the waiter lost its core to another task's time slice
/// (those of Linux's fair scheduler are 0.75-3 ms), not to a peer's short turn.
pub const STALL: Duration = Duration::from_millis(1);
/// Spins are cut after this many crowded samples in a row (the crowd score: +1 for a crowded
/// sample, -1 for a fitting one, within `0..=CUT_AT + 1`).
pub const CUT_AT: u8 = 3;
/// The least time between two readings of `/proc/loadavg` by one waiter (a reading costs a few µs).
const LOAD_CHECK_EVERY: Duration = Duration::from_millis(10);
/// A peer-ready sample counts as at most this many bounds, so after one very long wait (a
/// learner's pause) about seventeen short ones bring the waiter back to spinning.
const SAMPLE_CAP_BOUNDS: u128 = 4;

/// One waiter's wait policy (see the module docs). Not shared between processes or threads.
#[derive(Clone, Debug)]
pub struct Spinner {
    settings: SpinSettings,
    /// The bound `B` in nanoseconds.
    bound_ns: u64,
    /// The moving average `a` of recent peer-ready times, in nanoseconds.
    average_ns: u64,
    /// The crowd score (see [`CUT_AT`]).
    crowd: u8,
    /// The cores this process may use, and when it may read `/proc/loadavg` next.
    cores: u32,
    next_load_check: Option<Instant>,
}

impl Spinner {
    /// A spinner following `settings`, starting from the largest average that still spins, so
    /// its first wait spins the whole bound.
    pub fn new(settings: SpinSettings) -> Spinner {
        let bound = match (settings.policy.is_auto(), settings.probe) {
            (false, _) => settings.policy.spin, // under u64::MAX ns: else AUTO
            (true, Probe::Pause) => SpinPolicy::AUTO_BOUND,
            (true, Probe::Yield) => SpinPolicy::AUTO_BOUND_OVERSUBSCRIBED,
        };
        let bound_ns = bound.as_nanos() as u64;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()).min(u32::MAX as usize) as u32;
        let average_ns = (bound_ns - bound_ns / 10) / 2;
        Spinner { settings, bound_ns, average_ns, crowd: 0, cores, next_load_check: None }
    }

    /// The settings it follows.
    pub fn settings(&self) -> SpinSettings {
        self.settings
    }

    /// The bound `B` of every spin phase.
    pub fn bound(&self) -> Duration {
        Duration::from_nanos(self.bound_ns)
    }

    /// The moving average of recent peer-ready times.
    pub fn average(&self) -> Duration {
        Duration::from_nanos(self.average_ns)
    }

    /// Whether spins are cut because the machine runs more tasks than cores (see the module docs).
    pub fn crowded(&self) -> bool {
        self.settings.policy.is_auto() && self.crowd >= CUT_AT
    }

    /// How long the next wait spins at most: `2 a + B / 10` when that fits within `B`, else zero;
    /// while [`Spinner::crowded`], zero ([`Probe::Pause`]) or at most `B / 10` ([`Probe::Yield`]).
    pub fn budget(&self) -> Duration {
        let margin = self.bound_ns / 10;
        let wanted = self.average_ns.saturating_mul(2).saturating_add(margin);
        let cut = if self.settings.probe == Probe::Yield { margin } else { 0 };
        let spin = if self.crowded() { cut } else { wanted };
        Duration::from_nanos(if self.bound_ns == 0 || wanted > self.bound_ns { 0 } else { spin })
    }

    /// Learns one peer-ready time: how long after the start of a wait the peer published (for a
    /// wait that timed out, the whole wait).
    pub fn record(&mut self, ready_after: Duration) {
        let sample = ready_after.as_nanos().min(u128::from(self.bound_ns) * SAMPLE_CAP_BOUNDS) as u64;
        let delta = (i128::from(sample) - i128::from(self.average_ns)) >> 3;
        self.average_ns = (i128::from(self.average_ns) + delta).max(0) as u64;
    }

    /// Learns a wait that slept: it lasted `waited`, spun `spun` first, and the producer that
    /// woke it stamped its wake `latency` before it ran again (`None`: no stamp). A stamp older
    /// than the sleep (a late producer's of an earlier wait) is ignored: the time learned is
    /// never less than what the waiter spun.
    fn record_slept(&mut self, waited: Duration, spun: Duration, latency: Option<Duration>) {
        let latency = latency.filter(|&l| l <= waited.saturating_sub(spun)).unwrap_or_default();
        self.record(waited - latency);
    }

    /// Learns one sample of whether the machine is crowded: the crowd score moves by one.
    fn record_crowd(&mut self, crowded: Option<bool>) {
        self.crowd = match crowded {
            Some(true) => (self.crowd + 1).min(CUT_AT + 1),
            Some(false) => self.crowd.saturating_sub(1),
            None => self.crowd,
        };
    }

    /// A pausing AUTO waiter's sample of `/proc/loadavg`, taken at most every 10 ms in a wait whose
    /// peer is not ready at a first look (the waiter and its peer then both count as runnable).
    fn sample_load(&mut self, ready: &mut dyn FnMut() -> bool, now: Instant) {
        let due = self.next_load_check.is_none_or(|t| now >= t);
        if due && self.settings.policy.is_auto() && self.settings.probe == Probe::Pause && !ready() {
            self.next_load_check = Some(now + LOAD_CHECK_EVERY);
            self.record_crowd(Some(runnable_tasks().is_some_and(|r| r > self.cores)));
        }
    }

    /// Waits on `wakeup` until `ready()` holds (`true`) or `timeout` passed (`false`): spins for
    /// [`Spinner::budget`] with the settings' probe, then sleeps on the futex, then learns when
    /// its peer became ready.
    pub fn wait(&mut self, wakeup: &Wakeup, mut ready: impl FnMut() -> bool, timeout: Duration) -> bool {
        self.wait_with::<DefaultFutex>(wakeup, &mut || u32::from(!ready()), timeout)
    }

    /// [`Spinner::wait`] for several publishes: until `missing()` (how many the waiter still
    /// awaits, each notified on `wakeup`) is 0. A sleeping waiter is woken by the last of them
    /// only ([`Wakeup`]).
    pub fn wait_for(&mut self, wakeup: &Wakeup, mut missing: impl FnMut() -> u32, timeout: Duration) -> bool {
        self.wait_with::<DefaultFutex>(wakeup, &mut missing, timeout)
    }

    /// [`Spinner::wait_for`] over any [`Futex`] implementation.
    pub fn wait_with<F: Futex>(
        &mut self,
        wakeup: &Wakeup,
        missing: &mut dyn FnMut() -> u32,
        timeout: Duration,
    ) -> bool {
        let start = Instant::now();
        self.sample_load(&mut || missing() == 0, start);
        let budget = self.budget().min(timeout);
        if budget > Duration::ZERO {
            wakeup.count_spin();
        }
        let (ready_in_spin, stalled) = spin(&mut || missing() == 0, start + budget, self.settings.probe);
        self.record_crowd(stalled);
        if ready_in_spin {
            self.record(Instant::now() - start);
            return true;
        }
        let spun = Instant::now() - start;
        let (woke, latency) = wakeup.sleep_with::<F>(missing, start + timeout);
        self.record_slept(Instant::now() - start, spun, latency);
        woke
    }
}

/// Looks at `ready()` until it holds or `until` passed (at least once), probing with `probe`.
/// Returns whether it held and, for [`Probe::Yield`], whether the spin stalled: `Some(true)` when
/// two looks were [`STALL`] or more apart (the waiter was off its core for a time slice),
/// `Some(false)` when it yielded without that, `None` when it did not yield.
fn spin(ready: &mut dyn FnMut() -> bool, until: Instant, probe: Probe) -> (bool, Option<bool>) {
    let mut looks = 0u32;
    let mut last: Option<Instant> = None;
    let mut longest = Duration::ZERO;
    loop {
        let is_ready = ready();
        let now = Instant::now();
        longest = longest.max(last.map_or(Duration::ZERO, |l| now - l));
        last = Some(now);
        if is_ready || now >= until {
            return (is_ready, (probe == Probe::Yield && looks >= 1).then_some(longest >= STALL));
        }
        looks = looks.wrapping_add(1);
        if probe == Probe::Pause && !looks.is_multiple_of(YIELD_EVERY) {
            spin_loop();
        } else {
            yield_now();
        }
    }
}

/// The machine's runnable tasks now, the caller included: `running` of `/proc/loadavg`'s fourth
/// field (`running/total`, proc(5)); `None` where it cannot be read, and always under loom and
/// Miri (no machine to read).
fn runnable_tasks() -> Option<u32> {
    #[cfg(any(loom, miri))]
    return None;
    #[cfg(not(any(loom, miri)))]
    parse_running(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// `running` from the text of `/proc/loadavg` (`"0.52 0.58 0.59 3/467 12345"`).
#[cfg_attr(any(loom, miri), allow(dead_code))]
fn parse_running(text: &str) -> Option<u32> {
    text.split_ascii_whitespace().nth(3)?.split_once('/')?.0.parse().ok()
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

    const US: Duration = Duration::from_micros(1);
    const BOUND: Duration = Duration::from_micros(200);

    fn spinner(policy: SpinPolicy, probe: Probe) -> Spinner {
        Spinner::new(SpinSettings { policy, probe })
    }

    #[test]
    fn short_waits_spin_twice_the_average_and_long_ones_sleep_at_once() {
        let mut s = spinner(SpinPolicy { spin: BOUND }, Probe::Pause);
        assert_eq!(s.budget(), BOUND, "a fresh spinner spins the whole bound");
        (0..100).for_each(|_| s.record(10 * US));
        assert_eq!(s.budget(), 2 * s.average() + BOUND / 10);
        (0..100).for_each(|_| s.record(Duration::from_secs(3))); // each counts as four bounds
        assert_eq!(s.average(), 4 * BOUND - Duration::from_nanos(7), "within the 1/8 rounding");
        assert_eq!(s.budget(), Duration::ZERO, "waits above 0.45 of the bound sleep at once");
        let asleep = (0..).take_while(|_| {
            s.record(10 * US);
            s.budget().is_zero()
        });
        assert_eq!(asleep.count(), 17, "the eighteenth short wait spins again");
        assert_eq!(spinner(SpinPolicy::AUTO, Probe::Pause).bound(), SpinPolicy::AUTO_BOUND);
        assert_eq!(spinner(SpinPolicy::AUTO, Probe::Yield).bound(), SpinPolicy::AUTO_BOUND_OVERSUBSCRIBED);
        for p in [Probe::Pause, Probe::Yield] {
            assert_eq!(Probe::from_code(p.code()), Some(p));
        }
        assert_eq!((Probe::for_processes_on(3, 2), Probe::for_processes_on(2, 2)), (Probe::Yield, Probe::Pause));
    }

    #[test]
    fn a_slept_wait_learns_the_peers_ready_time_without_its_own_wake_up() {
        let mut s = spinner(SpinPolicy { spin: BOUND }, Probe::Pause);
        // Waited 150 µs, spun 20, and the last 90 were the wake-up: the peer was ready at 60 µs.
        s.average_ns = 0;
        s.record_slept(150 * US, 20 * US, Some(90 * US));
        assert_eq!(s.average(), 60 * US / 8);
        // A stamp older than the sleep (it slept 50 µs), or none, teaches the whole wait.
        for latency in [Some(90 * US), None] {
            s.average_ns = 0;
            s.record_slept(150 * US, 100 * US, latency);
            assert_eq!(s.average(), 150 * US / 8, "{latency:?}");
        }
    }

    #[test]
    fn never_spin_zero_timeouts_and_a_wait_after_a_timeout_sleeps_at_once() {
        let mut s = spinner(SpinPolicy::NEVER, Probe::Yield);
        (0..10).for_each(|_| s.record(US));
        assert_eq!(s.budget(), Duration::ZERO);
        let w = Wakeup::default();
        assert!(s.wait(&w, || true, Duration::ZERO), "a ready condition is seen with no time left");
        assert!(!s.wait(&w, || false, Duration::ZERO));
        // A wait that timed out (an idle pool) puts the next one to sleep at once.
        let mut auto = spinner(SpinPolicy::AUTO, Probe::Pause);
        assert!(!auto.wait(&w, || false, Duration::from_millis(1)), "nothing ready: timed out");
        assert_eq!(auto.budget(), Duration::ZERO);
    }

    /// Not ready at the first look; the second look comes 2 ms later (as if another task took the
    /// core for a time slice); ready from the third on.
    fn stalling_ready() -> impl FnMut() -> bool {
        let mut looks = 0u32;
        move || {
            looks += 1;
            if looks == 2 {
                std::thread::sleep(2 * STALL);
            }
            looks > 2
        }
    }

    #[test]
    fn crowded_samples_in_a_row_cut_an_auto_waiters_spin_until_fitting_ones_restore_it() {
        assert_eq!(
            spin(&mut stalling_ready(), Instant::now() + Duration::from_secs(5), Probe::Yield),
            (true, Some(true))
        );
        assert_eq!(spin(&mut stalling_ready(), Instant::now() + Duration::from_secs(5), Probe::Pause), (true, None));
        assert_eq!(spin(&mut || true, Instant::now(), Probe::Yield), (true, None), "one look: no evidence");
        let mut s = spinner(SpinPolicy::AUTO, Probe::Yield);
        assert!(s.wait(&Wakeup::default(), stalling_ready(), Duration::from_secs(5)));
        assert_eq!(s.crowd, 1, "a yielding wait learns its spin's stall");
        for (probe, cut) in [(Probe::Yield, SpinPolicy::AUTO_BOUND_OVERSUBSCRIBED / 10), (Probe::Pause, Duration::ZERO)]
        {
            let mut s = spinner(SpinPolicy::AUTO, probe);
            s.average_ns = 50_000;
            let full = s.budget();
            s.record_crowd(None); // no evidence either way
            (0..CUT_AT - 1).for_each(|_| s.record_crowd(Some(true)));
            assert_eq!(s.budget(), full, "{probe:?}");
            (0..5).for_each(|_| s.record_crowd(Some(true)));
            assert_eq!(s.budget(), cut, "{probe:?}: {CUT_AT} in a row cut it");
            s.record_crowd(Some(false));
            assert!(s.crowded(), "{probe:?}: one fitting sample does not end the cut");
            s.record_crowd(Some(false));
            assert_eq!(s.budget(), full, "{probe:?}: two do");
        }
        let mut fixed = spinner(SpinPolicy { spin: BOUND }, Probe::Pause);
        (0..5).for_each(|_| fixed.record_crowd(Some(true)));
        assert!(!fixed.crowded(), "a fixed bound is the user's");
        assert_eq!(parse_running("0.52 0.58 0.59 3/467 12345\n"), Some(3));
        assert_eq!(parse_running("0.5 0.5 0.5 x/10 1"), None);
        assert!(cfg!(miri) || runnable_tasks().is_some_and(|r| r >= 1), "the reader itself runs");
    }

    #[test]
    fn spinners_of_either_probe_are_woken_by_a_publish() {
        use std::sync::atomic::{AtomicU32, Ordering};
        const ROUNDS: u32 = if cfg!(miri) { 5 } else { 200 };
        for (probe, policy) in [(Probe::Pause, SpinPolicy { spin: BOUND }), (Probe::Yield, SpinPolicy::AUTO)] {
            let w = Wakeup::default();
            let published = AtomicU32::new(0);
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    let mut s = spinner(policy, probe);
                    for round in 1..=ROUNDS {
                        let ready = || published.load(Ordering::Acquire) >= round;
                        assert!(s.wait(&w, ready, Duration::from_secs(30)), "{probe:?} round {round}");
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
            assert!(w.spins() >= 1, "the first wait of a fresh spinner has a spin phase");
        }
    }
}
