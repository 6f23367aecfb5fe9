//! The spin phase of a wait: how long a waiter spins before it sleeps on its futex, learned from
//! how long its peers took to become ready, and how it spins when processes outnumber cores.
//!
//! A [`Spinner`] is one waiter's private state (it lives in the waiting process, never in shared
//! memory; no other process reads or writes it). Before each wait it looks at an exponentially
//! weighted moving average of its recent **peer-ready times** (how long after the start of a wait
//! its peer published what it waited for), and
//!
//! - spins for `2 * average + bound / 10` (under [`SpinPolicy::AUTO`], `2 * average +` one
//!   sleep's cost, the competitive rule's spin) when that fits within the bound
//!   ([`Spinner::bound`]), then sleeps if the wait is not over. This is glibc's adaptive mutex
//!   (`PTHREAD_MUTEX_ADAPTIVE_NP`, nptl `pthread_mutex_lock.c`): spin at most
//!   `min(MAX_ADAPTIVE_COUNT, 2 * spins + 10)` probes, then learn `spins += (cnt - spins) / 8`;
//!   here the unit is time instead of probes;
//! - sleeps at once when it does not fit (the average is above `0.45 * bound`; under AUTO ~3.5
//!   wake-up latencies): the waits are
//!   long, and spinning through their first part would cost CPU (in an oversubscribed pool, the
//!   CPU of the peers doing the work) for no gain.
//!
//! **No feedback from its own wake-up latency.** A wait that ends in a futex sleep lasts the
//! peer-ready time *plus* the time the kernel took to run the woken waiter again (tens of µs on a
//! VM, ~90 µs on some). Learning from that total traps a waiter: once asleep, its waits look long
//! because it sleeps, so it keeps sleeping. Here a producer that wakes a sleeper stamps the time
//! it did so in the [`Wakeup`] (`CLOCK_MONOTONIC`, shared by all processes), and the woken waiter
//! learns the wait *minus* the time since that stamp, its own wake-up latency, which it also
//! averages separately ([`Spinner::wake_latency`]). A sleep without a stamp (a timeout that found
//! the condition true) subtracts that average instead. Either way a learned wait is never less
//! than the time the waiter had already spun (a censored sample: the peer was not ready then).
//!
//! **The bound follows the machine** ([`SpinPolicy::AUTO`], the default): `8 *` what one of the
//! waiter's sleeps costs ([`Spinner::sleep_cost`]: its average wake-up latency plus the average
//! time its producers spent in the system call that woke it, which the producer records in the
//! [`Wakeup`]), within 200 µs..1 ms (400 µs when the pool's processes outnumber the cores), so it
//! spins through peer-ready times of up to ~3.5 sleeps' cost. That threshold is above one
//! wake-up on purpose: in a ping-pong where both sides sleep, each side's peer-ready time holds the *peer's* wake-up plus its work, so a threshold of
//! one wake-up (Karlin et al.'s competitive "spin as long as a block costs", SOSP 1991) would
//! leave both asleep for ever; with ~3.5 wake-ups the pair leaves the sleeping state whenever the
//! peer's work is below ~2.5 wake-ups, where spinning pays. A fixed bound ([`SpinPolicy`] with
//! `spin` given) keeps the bound as given.
//!
//! **And the waiter's own work.** Under AUTO the bound is also at least twice the waiter's own
//! work between two waits ([`Spinner::busy`]: the end of one wait, or of the previous command
//! taken without one ([`Spinner::mark_boundary`]), to the start of the next wait, averaged), at
//! most 1 ms, whatever the probe: a worker that steps its envs for 400 µs-1 ms per command spins
//! through waits of up to about that long. Where wake-ups are cheap (the floor's
//! 200 µs bound sleeps through waits of ~90 µs), the competitive rule would put it to sleep
//! through the main process's turnaround, but in a pool that steps every env at once one sleeping
//! worker costs the whole pool: it must be woken before it starts, the others then wait for it,
//! and their waits grow long enough to put them to sleep too (the 16-core trap of the synchronized
//! probes, below). Spinning
//! there costs the waiter at most about as much CPU as its work (a wait is spun through only while
//! the waits average under ~the work), typically a few percent (waits of ~100 µs after 1.5 ms of
//! work). Barrier-synchronised worker pools spin far longer by default: LLVM's OpenMP runtime
//! spins 200 ms at a barrier before it sleeps (`KMP_DEFAULT_BLOCKTIME`, `openmp/runtime/src/kmp.h`).
//! On a 16-core machine this took a 200 µs row of docs/WAKEUP.md (16 workers of 2 envs) to
//! 0.95-0.99 of the best fixed bound in six runs of six (the build before: 0.52-0.98 in five); a
//! bound of once the work was not enough ([`BUSY_FACTOR`]).
//!
//! **Long work.** From 1 ms of work per command on ([`LONG_WORK`]), the bound is three times the
//! work, at most 4 ms. With 1.5 ms of work per command, two workers the kernel runs on one core
//! make every other worker wait about one command's work; a bound of twice the work (or 1 ms)
//! sleeps through that wait (its threshold is about the work), and woken workers were placed two
//! to a core again: 16 workers of 2 envs of 750 µs stayed there in 7 runs of 17. At three times
//! the work the waiters spin through it, stay on their cores, and the pool spreads (19 runs of 19
//! within 6% of `spin_us=2000`, docs/WAKEUP.md). A stretch counts as long work only if this
//! thread's CPU time over it says so too ([`Spinner::record_work`]; a system call, made only
//! around stretches of 500 µs or more): other processes' turns on its core lengthen the wall
//! time, not the work.
//!
//! **Not on a crowded machine.** Under AUTO a [`Probe::Pause`] waiter also watches whether the
//! machine runs more tasks than cores ([`crate::LoadTracker`]); while it does, it sleeps at once
//! whatever the peer-ready times said: its peer may be queued behind another process, and a
//! sleeping waiter frees its core for it. A [`Probe::Yield`] waiter cannot use that count (its
//! own pool already outnumbers the cores), so it watches its yields instead: a yield after which
//! it ran again only a time slice later ([`STALL`], 1 ms) handed its core to another task's whole
//! slice (a busy neighbour), and a spinner that yielded to a CPU hog may then sit behind it while
//! its peer has long been ready. While most of its recent spinning waits had such a yield (the
//! same moving verdict, [`crate::LoadTracker::observe_over`]), its spin is cut to one sleep's
//! cost ([`Spinner::sleep_cost`]: the competitive bound; a sleeper the kernel wakes is run
//! promptly), and one wait every 100 ms spins its full budget to learn whether the stalls went
//! on. (Sleeping at once there, the first version, measured 0.77 of the best fixed bound beside a
//! busy neighbour with Rust CartPole and 2 workers on 2 cores; the cut spin 0.90-0.98 in three
//! runs of `benches/wakeup_policy.py`, docs/WAKEUP.md.)
//!
//! **Synchronized probes.** A waiter that sleeps at once cannot learn what spinning would give,
//! and in a pool whose workers all sleep between commands the waits are long *because* they sleep
//! (each must be woken, one after another, and the kernel may place woken workers beside each
//! other). Under AUTO such a waiter spins anyway through three waits in a row at every boundary of
//! a ~134 ms period of `CLOCK_MONOTONIC`, the same instants in every process, so the pool's
//! sleepers probe together, and learns from those waits with full weight; a probe that leaves it
//! sleeping doubles its period, up to ~2.1 s ([`Spinner`]'s `sync_probe_due`). On a 16-core
//! machine, 16 workers stepping 750 µs envs gave half the throughput of a fixed 2 ms bound
//! without them; with them, 0.95-0.97 of it for 4 envs per worker, but still 0.56-0.79 for 2
//! (docs/WAKEUP.md).
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
//! assert!(spinner.budget() <= spinner.bound());
//! ```

use crate::futex::{DefaultFutex, Futex};
use crate::machine_load::LoadTracker;
use crate::sync::{spin_loop, Instant};
use crate::wakeup::Wakeup;
use std::time::Duration;

/// How long a waiter may spin before it sleeps on the futex.
///
/// `spin` bounds the spin phase of every wait. A pool's waiters ([`Spinner`]) spin less, or not
/// at all, when their peers took long to become ready; [`crate::Wakeup::wait`], which keeps no
/// state, always spins the whole bound ([`SpinPolicy::fixed_bound`]). `spin: ZERO`
/// ([`SpinPolicy::NEVER`]) sleeps at once on every wait. [`SpinPolicy::AUTO`], the default, sets
/// the bound from what a sleep costs each waiter, as it measures it (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpinPolicy {
    /// Upper bound of one wait's spin phase. `Duration::ZERO` sleeps at once; `u64::MAX`
    /// nanoseconds or more ([`SpinPolicy::AUTO`]) is the machine-dependent bound.
    pub spin: Duration,
}

impl SpinPolicy {
    /// The bound of a stateless [`crate::Wakeup::wait`] under [`SpinPolicy::AUTO`], and the
    /// smallest bound AUTO picks: 200 µs.
    pub const DEFAULT_SPIN: Duration = Duration::from_micros(200);
    /// The bound follows the machine: `8 *` what one of each waiter's sleeps costs
    /// ([`Spinner::sleep_cost`]), within [`SpinPolicy::DEFAULT_SPIN`] and 1 ms (400 µs for
    /// [`Probe::Yield`]), and at least twice the waiter's own work between waits
    /// ([`Spinner::busy`]), at most 1 ms (from 1 ms of work on, three times it, at most 4 ms).
    /// Stored in the segment header as `u64::MAX` ns.
    pub const AUTO: SpinPolicy = SpinPolicy { spin: Duration::from_nanos(u64::MAX) };
    /// Never spin: every wait announces itself and sleeps on the futex at once.
    pub const NEVER: SpinPolicy = SpinPolicy { spin: Duration::ZERO };

    /// Whether this is [`SpinPolicy::AUTO`] (a bound of `u64::MAX` ns or more: the header stores
    /// nanoseconds in a `u64`, so any longer bound reads back as AUTO in the workers too).
    pub fn is_auto(self) -> bool {
        self.spin.as_nanos() >= u128::from(u64::MAX)
    }

    /// The bound of a wait that keeps no state: `spin`, or [`SpinPolicy::DEFAULT_SPIN`] for AUTO.
    pub fn fixed_bound(self) -> Duration {
        if self.is_auto() {
            Self::DEFAULT_SPIN
        } else {
            self.spin
        }
    }
}

impl Default for SpinPolicy {
    /// [`SpinPolicy::AUTO`].
    fn default() -> Self {
        Self::AUTO
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

/// Weight of a new sample in the moving averages: `1 / 2^EWMA_SHIFT`, glibc's 1/8.
const EWMA_SHIFT: u32 = 3;

/// A wait is counted as at most this many bounds, so one very long wait (a learner's pause of
/// seconds) cannot keep the average high for long: after it, about seventeen short waits bring
/// the waiter back to spinning (`4 * (7/8)^17 < 0.45`).
const SAMPLE_CAP_BOUNDS: u64 = 4;

/// The wake-up latency a spinner assumes before it measured one: 50 µs (a futex wake-up on the
/// KVM guests measured, docs/WAKEUP.md).
const INITIAL_WAKE: Duration = Duration::from_micros(50);

/// A wake-up latency sample counts as at most this much (a waiter kept off the CPU for a time
/// slice is not the machine's wake-up cost).
const MAX_WAKE_SAMPLE: Duration = Duration::from_millis(1);

/// [`SpinPolicy::AUTO`]'s bound: this many wake-up latencies ...
const AUTO_FACTOR: u64 = 8;
/// ... within these limits ...
const AUTO_MIN: Duration = SpinPolicy::DEFAULT_SPIN;
const AUTO_MAX: Duration = Duration::from_millis(1);
/// ... and at most this when the pool's processes outnumber the cores ([`Probe::Yield`]): a
/// waiter spinning through a long wait there holds a core a peer needs for its work (a 40 µs env,
/// 4 workers on 2 cores lost up to 18% with bounds above 300 µs, docs/WAKEUP.md).
const AUTO_MAX_OVERSUBSCRIBED: Duration = Duration::from_micros(400);
/// [`SpinPolicy::AUTO`]'s bound is at least this many times the waiter's own work between waits
/// ([`Spinner::busy`]), at most [`AUTO_MAX`] (also with [`Probe::Yield`]). Measured on a 16-core
/// machine (docs/WAKEUP.md, 2026-11-26): with 1, a 200 µs row of 16 workers came within 5% of
/// `spin_us=400` (72,888 steps/s) in 1 run of 8 (48,037-71,115); with 2, in 6 of 6
/// (69,041-71,892).
const BUSY_FACTOR: u64 = 2;
/// A waiter whose work per command averages at least this (1 ms) gets a bound of
/// [`LONG_FACTOR`] times its work instead of [`BUSY_FACTOR`] times, at most [`BUSY_MAX`] (the
/// module docs' "Long work"). Measured (docs/WAKEUP.md, 2026-11-26): on a 16-core machine, 16
/// workers of 2 envs of 750 µs below 90% of `spin_us=2000` in 7 runs of 17 before (10,814-20,195
/// steps/s), in none of 19 with this rule (19,282-20,424, against 20,272-20,428 for
/// `spin_us=2000`). From 500 µs of wall time per stretch of work, without the CPU time check and
/// with a run of commands taken without a wait counted as one stretch, it lost 3-10% on the
/// 2-core VM beside a busy loop (2 workers of 4 envs of 200 µs); as it is, within 3% there.
const LONG_WORK: Duration = Duration::from_millis(1);
/// The factor of [`LONG_WORK`]: the threshold, about half the bound, is then 1.5 times the work.
const LONG_FACTOR: u64 = 3;
/// The largest bound the waiter's own work sets (4 ms; a stretch of work counts as at most this).
const BUSY_MAX: Duration = Duration::from_millis(4);

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

/// `avg += (sample - avg) / 8`, in signed arithmetic (glibc: `spins += (cnt - spins) / 8`).
fn ewma(average: u64, sample: u64) -> u64 {
    let delta = (i128::from(sample) - i128::from(average)) >> EWMA_SHIFT;
    (i128::from(average) + delta).max(0) as u64
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the machine, so a producer's
/// stamp and a waiter's reading compare. Under loom a constant (no wall time in a model).
pub(crate) fn monotonic_ns() -> u64 {
    #[cfg(not(loom))]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        (t.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(t.tv_nsec as u64)
    }
    #[cfg(loom)]
    {
        1
    }
}

/// This thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) in nanoseconds: a system call (no vDSO
/// path), so read only around stretches of work of half a millisecond or more. Under loom a
/// constant.
fn thread_cpu_ns() -> u64 {
    #[cfg(not(loom))]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        (t.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(t.tv_nsec as u64)
    }
    #[cfg(loom)]
    {
        1
    }
}

/// A waiter's learned spin state (see the module docs). One per waiter; not shared.
#[derive(Clone, Debug)]
pub struct Spinner {
    settings: SpinSettings,
    /// The moving average of recent peer-ready times, in nanoseconds (each capped at
    /// `SAMPLE_CAP_BOUNDS` bounds).
    average_ns: u64,
    /// The moving average of this waiter's wake-up latencies (a producer's stamp to the woken
    /// waiter running), in nanoseconds.
    wake_ns: u64,
    /// The moving average of what waking this waiter cost its producers (their time in the
    /// `FUTEX_WAKE` system call, [`Wakeup`]'s `wake_cost_ns`), in nanoseconds; 0 until known.
    waker_ns: u64,
    /// The moving average of this waiter's own work between two waits (the end of one wait to
    /// the start of the next), each sample at most [`BUSY_MAX`], in nanoseconds; 0 until known.
    busy_ns: u64,
    /// The last stretch of work measured (capped as a sample), `None` before the first.
    last_busy_ns: Option<u64>,
    /// When its last wait ended (`None` before the first).
    last_end: Option<Instant>,
    /// This thread's CPU time when its last wait ended, in nanoseconds, read only when the
    /// stretch before that wait was at least half [`LONG_WORK`] (`None` otherwise).
    last_end_cpu_ns: Option<u64>,
    /// Whether the machine runs more tasks than cores ([`crate::LoadTracker`]); read only under
    /// [`SpinPolicy::AUTO`] with [`Probe::Pause`].
    load: LoadTracker,
    /// Under [`SpinPolicy::AUTO`] with [`Probe::Yield`]: whether this waiter's yields recently
    /// kept it off its core for a time slice ([`STALL`]), from one sample per wait that yielded.
    stalls: LoadTracker,
    /// While `stalls` says so, waits spin one sleep's cost at most, but one wait spins its
    /// full budget at this time (`CLOCK_MONOTONIC` ns) to take a new sample.
    next_stall_probe_ns: u64,
    /// The start (`CLOCK_MONOTONIC` ns) of the probe period of the last synchronized probe
    /// ([`Spinner::sync_probe_due`]).
    probe_period_ns: u64,
    /// Probes since the last one that ended the sleeping: the period is `2^(27 + backoff)` ns.
    probe_backoff: u32,
    /// Waits left in the synchronized probe under way (0: none).
    probe_left: u8,
    /// Whether the wait being learned is a probe's: its sample replaces the average instead of
    /// moving it by an eighth.
    probing: bool,
}

/// A yield after which a [`Probe::Yield`] waiter ran again only this much later was kept off its
/// core by a time slice of another task (a busy neighbour), not by a peer's short turn: 1 ms
/// (as [`MAX_WAKE_SAMPLE`]; the time slices of Linux's fair scheduler are 0.75-3 ms).
const STALL: Duration = Duration::from_millis(1);

/// While its yields stall, a [`Probe::Yield`] waiter spins one wait its full budget in this many
/// nanoseconds (100 ms) to learn whether they still do; the others spin one sleep's cost at most.
const STALL_PROBE_EVERY_NS: u64 = 100_000_000;

/// A sleeping [`SpinPolicy::AUTO`] waiter tries spinning again at every boundary of this
/// `CLOCK_MONOTONIC` period (2^27 ns, ~134 ms; see [`Spinner::sync_probe_due`]) ...
const SYNC_PROBE_PERIOD_SHIFT: u32 = 27;
/// ... doubled after each probe that did not end its sleeping, up to 2^4 times (~2.1 s) ...
const SYNC_PROBE_MAX_BACKOFF: u32 = 4;
/// ... for this many waits in a row ...
const SYNC_PROBE_WAITS: u8 = 3;
/// ... each spinning at least the bound and at most this long.
const SYNC_PROBE_MAX: Duration = Duration::from_millis(5);

impl Spinner {
    /// A spinner following `settings`, starting from the largest average that still spins (so
    /// its first wait spins the whole bound).
    pub fn new(settings: SpinSettings) -> Spinner {
        let mut spinner = Spinner {
            settings,
            average_ns: 0,
            wake_ns: nanos(INITIAL_WAKE),
            waker_ns: 0,
            busy_ns: 0,
            last_busy_ns: None,
            last_end: None,
            last_end_cpu_ns: None,
            load: LoadTracker::for_this_process(),
            stalls: LoadTracker::new(1),
            next_stall_probe_ns: 0,
            probe_period_ns: monotonic_ns() >> SYNC_PROBE_PERIOD_SHIFT << SYNC_PROBE_PERIOD_SHIFT,
            probe_backoff: 0,
            probe_left: 0,
            probing: false,
        };
        spinner.average_ns = spinner.edge_ns();
        spinner
    }

    /// The settings it follows.
    pub fn settings(&self) -> SpinSettings {
        self.settings
    }

    fn bound_ns(&self) -> u64 {
        let policy = self.settings.policy;
        if policy.is_auto() {
            let max = if self.settings.probe == Probe::Yield { AUTO_MAX_OVERSUBSCRIBED } else { AUTO_MAX };
            let wake = self.sleep_cost_ns().saturating_mul(AUTO_FACTOR).clamp(nanos(AUTO_MIN), nanos(max));
            wake.max(self.work_bound_ns())
        } else {
            nanos(policy.spin)
        }
    }

    /// The least bound the waiter's own work sets under AUTO: twice [`Spinner::busy`] (at most
    /// 1 ms), or three times it (at most 4 ms) from 1 ms of work on ([`LONG_WORK`]).
    fn work_bound_ns(&self) -> u64 {
        if self.busy_ns >= nanos(LONG_WORK) {
            self.busy_ns.saturating_mul(LONG_FACTOR).min(nanos(BUSY_MAX))
        } else {
            self.busy_ns.saturating_mul(BUSY_FACTOR).min(nanos(AUTO_MAX))
        }
    }

    /// The bound of the spin phase now: the policy's, or for [`SpinPolicy::AUTO`] eight times
    /// [`Spinner::sleep_cost`] within 200 µs..1 ms (..400 µs with [`Probe::Yield`]), raised to
    /// twice [`Spinner::busy`] (at most 1 ms; from 1 ms of work on three times it, at most
    /// 4 ms) where that is longer.
    pub fn bound(&self) -> Duration {
        Duration::from_nanos(self.bound_ns())
    }

    /// The moving average of this waiter's own work between two waits: the time from the end of
    /// one [`Spinner::wait`] (or from a [`Spinner::mark_boundary`]) to the start of the next wait
    /// (or the next boundary), each stretch counted as at most 4 ms (as just under 1 ms when its
    /// CPU time is less, [`Spinner::record_work`]) and as
    /// at most the stretch before it (so that one stretch lengthened by a preemption, another
    /// process's time slice, does not count; two in a row do), zero before the second wait.
    /// Under [`SpinPolicy::AUTO`] the bound is at least twice this.
    pub fn busy(&self) -> Duration {
        Duration::from_nanos(self.busy_ns)
    }

    /// Learns one stretch of this waiter's own work between two waits (see [`Spinner::busy`]).
    pub fn record_busy(&mut self, busy: Duration) {
        let stretch = nanos(busy).min(nanos(BUSY_MAX));
        let sample = self.last_busy_ns.map_or(stretch, |last| stretch.min(last));
        self.last_busy_ns = Some(stretch);
        self.busy_ns = if self.busy_ns == 0 { sample } else { ewma(self.busy_ns, sample) };
    }

    /// Learns one stretch of work of `wall` time during which this thread used `cpu` of CPU
    /// time (`None`: not read): as [`Spinner::record_busy`], except that a stretch reaches
    /// [`LONG_WORK`] only if its CPU time does too (without a reading it counts as just under
    /// it). Other processes' turns on the waiter's core (a busy neighbour's time slices) lengthen
    /// the wall time, not the work. (A waiter used from two threads in turn, a pool stepped from
    /// several, compares two threads' clocks: the stretch then counts as just under 1 ms, or as
    /// its wall time, as it would without the check; no stretch counts as more than its wall
    /// time.)
    pub fn record_work(&mut self, wall: Duration, cpu: Option<Duration>) {
        let just_under = LONG_WORK - Duration::from_nanos(1);
        let stretch = match cpu {
            _ if wall < LONG_WORK => wall,
            Some(cpu) if cpu >= LONG_WORK => wall.min(cpu),
            _ => just_under,
        };
        self.record_busy(stretch);
    }

    /// Marks a boundary between two items of work that needed no wait between them (a worker
    /// that found its next command already queued): the stretch since the last wait or boundary
    /// is learned as one stretch of work ([`Spinner::record_work`]), so that [`Spinner::busy`] is
    /// the work per command, not the work of a run of commands taken without waiting.
    pub fn mark_boundary(&mut self) {
        if self.last_end.is_some() {
            let now = Instant::now();
            self.record_stretch(now);
            self.mark_end(now);
        }
    }

    /// Learns the stretch of work from the end of the last wait (or boundary) to `now`, with
    /// this thread's CPU time over it where it was read ([`Spinner::record_work`]).
    fn record_stretch(&mut self, now: Instant) {
        if let Some(end) = self.last_end {
            let cpu = self.last_end_cpu_ns.map(|then| Duration::from_nanos(thread_cpu_ns().saturating_sub(then)));
            self.record_work(now - end, cpu);
        }
    }

    /// Marks the end of a wait at `end`, reading this thread's CPU time there when the stretch
    /// just measured was at least half [`LONG_WORK`] (the next one may then reach it).
    fn mark_end(&mut self, end: Instant) {
        self.last_end = Some(end);
        let long_ish = self.last_busy_ns.is_some_and(|b| b >= nanos(LONG_WORK) / 2);
        self.last_end_cpu_ns = long_ish.then(thread_cpu_ns);
    }

    /// The moving average of recent peer-ready times.
    pub fn average(&self) -> Duration {
        Duration::from_nanos(self.average_ns)
    }

    /// The moving average of this waiter's measured wake-up latencies (50 µs until it slept).
    pub fn wake_latency(&self) -> Duration {
        Duration::from_nanos(self.wake_ns)
    }

    /// What one of this waiter's sleeps costs: its wake-up latency plus the time its producers
    /// spent waking it ([`Spinner::record_waker_cost`]); the unit of the AUTO bound, margin and
    /// threshold. The competitive rule spins for what a block costs, and a block costs both the
    /// sleeper, which runs later, and the producer, whose own work waits for its wake-up system
    /// call (~35-40 µs for the main process waking an idle worker on the 2-core Intel Xeon VM,
    /// against ~1 µs on the spin path; docs/WAKEUP.md).
    pub fn sleep_cost(&self) -> Duration {
        Duration::from_nanos(self.sleep_cost_ns())
    }

    fn sleep_cost_ns(&self) -> u64 {
        self.wake_ns.saturating_add(self.waker_ns)
    }

    /// Learns what waking this waiter cost a producer (its time in the wake-up system call, at
    /// most 1 ms, as a wake-up latency sample); a zero cost (none recorded yet) teaches nothing.
    pub fn record_waker_cost(&mut self, cost: Duration) {
        let sample = nanos(cost.min(MAX_WAKE_SAMPLE));
        if sample > 0 {
            self.waker_ns = if self.waker_ns == 0 { sample } else { ewma(self.waker_ns, sample) };
        }
    }

    /// What a wait spins beyond twice the average: a tenth of the bound, and under
    /// [`SpinPolicy::AUTO`] at least one sleep's cost ([`Spinner::sleep_cost`]; the competitive
    /// rule: a wait that ends up asleep anyway has then spun no more than the sleep costs), in
    /// nanoseconds.
    fn margin_ns(&self) -> u64 {
        let bound = self.bound_ns();
        if self.settings.policy.is_auto() {
            (bound / 10).max(self.sleep_cost_ns().min(bound))
        } else {
            bound / 10
        }
    }

    /// The spin the average asks for: `2 * average + margin`, in nanoseconds.
    fn wanted_ns(&self) -> u64 {
        self.average_ns.saturating_mul(2).saturating_add(self.margin_ns())
    }

    /// The largest average whose wanted spin fits within the bound.
    fn edge_ns(&self) -> u64 {
        (self.bound_ns() - self.margin_ns()) / 2
    }

    /// Whether the next wait sleeps at once: the spin the recent peer-ready times ask for does
    /// not fit within the bound (their average is above `0.45 * bound`; under AUTO
    /// `(bound - sleep's cost) / 2`, ~3.5 sleeps' cost), or the bound is zero.
    pub fn sleeps_at_once(&self) -> bool {
        let bound = self.bound_ns();
        bound == 0 || self.wanted_ns() > bound
    }

    /// How long the next wait spins at most: `2 * average + bound / 10` (under AUTO, plus at least
    /// one sleep's cost) when that fits within the bound, else zero.
    pub fn budget(&self) -> Duration {
        if self.sleeps_at_once() {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.wanted_ns())
    }

    /// The spin phase of the next wait: [`Spinner::budget`]; none while the machine is crowded
    /// ([`Probe::Pause`]: the peer may be queued behind another process, so this core is freed
    /// at once); at most one sleep's cost while the yields stall ([`Probe::Yield`]: a yield may
    /// hand the core to another task's time slice, so the spin is cut to the competitive bound,
    /// what a sleep would cost; Karlin et al., SOSP 1991).
    fn spin_budget(&self, crowded: bool, stalled: bool) -> Duration {
        match (crowded, stalled) {
            (true, _) => Duration::ZERO,
            (false, true) => self.budget().min(self.sleep_cost()),
            (false, false) => self.budget(),
        }
    }

    /// Whether the policy watches the machine's load: [`SpinPolicy::AUTO`] in a pool whose
    /// processes fit the cores ([`Probe::Pause`]). A fixed bound is the user's to keep, and a pool
    /// that outnumbers the cores already yields its core at every probe ([`Probe::Yield`]).
    fn watches_load(&self) -> bool {
        self.settings.policy.is_auto() && self.settings.probe == Probe::Pause
    }

    /// Whether the policy watches its yields for time slices lost to other tasks:
    /// [`SpinPolicy::AUTO`] in a pool that outnumbers the cores ([`Probe::Yield`]), where the
    /// machine-wide count of runnable tasks includes the pool's own surplus and cannot tell.
    fn watches_stalls(&self) -> bool {
        self.settings.policy.is_auto() && self.settings.probe == Probe::Yield
    }

    /// Whether a waiter whose yields stall should spin this wait anyway, to take a new sample
    /// (once every [`STALL_PROBE_EVERY_NS`]).
    fn stall_probe_due(&mut self) -> bool {
        let now = monotonic_ns();
        if now < self.next_stall_probe_ns {
            return false;
        }
        self.next_stall_probe_ns = now.saturating_add(STALL_PROBE_EVERY_NS);
        true
    }

    /// Whether the last waits found the machine running more tasks than cores, so that they slept
    /// at once whatever the peer-ready times said (only under [`SpinPolicy::AUTO`] with
    /// [`Probe::Pause`]; see [`crate::LoadTracker`]).
    pub fn yields_to_load(&self) -> bool {
        self.watches_load() && self.load.oversubscribed()
    }

    /// Learns one peer-ready time: how long after the start of a wait the peer's publish came
    /// (or, for a wait that timed out, the whole wait).
    pub fn record(&mut self, ready_after: Duration) {
        let bound = self.bound_ns();
        if bound == 0 {
            return;
        }
        let sample = nanos(ready_after).min(bound.saturating_mul(SAMPLE_CAP_BOUNDS));
        self.average_ns = if self.probing { sample } else { ewma(self.average_ns, sample) };
    }

    /// Whether this wait is part of a **synchronized probe**, and if so starts or continues it.
    ///
    /// A waiter that sleeps at once learns nothing about what spinning would have given: its waits
    /// may be long *because* its peers sleep too. In a pool stepping every env at once, each
    /// worker that sleeps between commands must be woken, one `FUTEX_WAKE` after another by the
    /// main process, and a woken worker may be placed beside another on one core by the
    /// scheduler, so the workers start, and finish, apart; the first done then wait for the last,
    /// their waits look long, and they keep sleeping. On a 16-core machine (docs/WAKEUP.md, run of
    /// 2026-11-26, 16 workers of 2 envs of 750 µs) that halved the pool's throughput against a
    /// fixed bound that spun through the start-up: 10,680 steps/s and 8.2 busy cores against
    /// 20,270 and 15.8 with `spin_us=2000`; no single waiter's learning can leave that state.
    /// (The probes below took a pool of 4 such envs per worker out of it, 13,993 -> 19,691 steps/s;
    /// with 2 envs per worker, in one run of four.)
    ///
    /// So under [`SpinPolicy::AUTO`] a waiter that would sleep at once spins anyway through
    /// [`SYNC_PROBE_WAITS`] waits in a row (each up to twice its average, at least the bound and
    /// at most [`SYNC_PROBE_MAX`]), once per period of `CLOCK_MONOTONIC`, and learns from each
    /// with full weight. The periods' boundaries are the same instants in every process of the
    /// machine, so the pool's sleeping waiters probe together: the commands then find them
    /// spinning, no wake-up staggers them, and if the short waits were only held back by the
    /// sleeping, the last probe's sample says so and the waiter goes on spinning. A probe that
    /// ends with the waiter still sleeping at once doubles its period (~134 ms up to ~2.1 s),
    /// so waits that are long in truth (a learner's long update) cost at most three spins of
    /// at most 5 ms every 2.1 s; one that ends it resets the period. Never while the machine is
    /// crowded (`crowded`: this wait's reading or the standing verdict of
    /// [`crate::LoadTracker`]; the peers may be queued behind other processes).
    /// Sets `probing` for the wait about to start and returns it; `now_ns` (`CLOCK_MONOTONIC`)
    /// is read only when a new probe could start, not on every wait.
    fn sync_probe_due(&mut self, crowded: bool, now_ns: impl FnOnce() -> u64) -> bool {
        self.probing = self.starts_or_continues_probe(crowded, now_ns);
        self.probing
    }

    fn starts_or_continues_probe(&mut self, crowded: bool, now_ns: impl FnOnce() -> u64) -> bool {
        if !self.settings.policy.is_auto() || crowded {
            return false;
        }
        if self.probe_left == 0 {
            if !self.sleeps_at_once() {
                self.probe_backoff = 0;
                return false;
            }
            let shift = SYNC_PROBE_PERIOD_SHIFT + self.probe_backoff;
            let period = now_ns() >> shift << shift;
            if period <= self.probe_period_ns {
                return false;
            }
            self.probe_period_ns = period;
            self.probe_left = SYNC_PROBE_WAITS;
        }
        self.probe_left -= 1;
        true
    }

    /// What a probe's wait spins: twice the average plus the margin, within the bound and
    /// [`SYNC_PROBE_MAX`].
    fn probe_budget(&self) -> Duration {
        let bound = self.bound_ns();
        Duration::from_nanos(self.wanted_ns().clamp(bound, nanos(SYNC_PROBE_MAX).max(bound)))
    }

    /// Ends the learning of a probe's wait; after its last wait, doubles the probe period if
    /// the waiter still sleeps at once, else resets it.
    fn end_probe_wait(&mut self) {
        if !self.probing {
            return;
        }
        self.probing = false;
        if self.probe_left == 0 {
            self.probe_backoff =
                if self.sleeps_at_once() { (self.probe_backoff + 1).min(SYNC_PROBE_MAX_BACKOFF) } else { 0 };
        }
    }

    /// Learns from a wait that slept on the futex and was woken: it lasted `waited` in all, of
    /// which it spun `spun` first, and the producer stamped its wake `latency` before this
    /// waiter ran again (`None`: no stamp; the average latency is assumed). Learns the latency,
    /// and the peer-ready time `waited - latency`, never less than `spun`.
    pub fn record_woken(&mut self, waited: Duration, spun: Duration, latency: Option<Duration>) {
        let slept = waited.saturating_sub(spun);
        let latency = match latency {
            // A stamp older than the sleep is a late producer's of an earlier wait: unknown.
            Some(d) if d <= slept => {
                self.wake_ns = ewma(self.wake_ns, nanos(d.min(MAX_WAKE_SAMPLE)));
                d
            }
            _ => self.wake_latency(),
        };
        self.record(waited.saturating_sub(latency).max(spun));
    }

    /// Waits on `wakeup` until `ready()` holds (`true`) or `timeout` passed (`false`): spins for
    /// the learned budget, probing per the settings, then sleeps on the futex; then learns when
    /// its peer became ready.
    pub fn wait(&mut self, wakeup: &Wakeup, mut ready: impl FnMut() -> bool, timeout: Duration) -> bool {
        self.wait_with::<DefaultFutex>(wakeup, &mut ready, timeout)
    }

    /// Waits as [`Spinner::wait`] does, for a waiter whose previous wait timed out with nothing
    /// ready: no peer is at work for it (an idle pool: the main process is not stepping), so it
    /// sleeps at once, with no spin phase and no synchronized probe, and learns nothing from the
    /// wait; the stretch of work that follows counts from its end. Without it, a worker idle for
    /// minutes spun three synchronized probes of up to 5 ms every ~2.1 s, about 0.6% of a core
    /// each, for as long as its pool stayed open (an outside audit, 2026-11-28; docs/WAKEUP.md).
    pub fn wait_idle(&mut self, wakeup: &Wakeup, mut ready: impl FnMut() -> bool, timeout: Duration) -> bool {
        self.wait_idle_with::<DefaultFutex>(wakeup, &mut ready, timeout)
    }

    /// [`Spinner::wait_idle`] over any [`Futex`] implementation.
    pub fn wait_idle_with<F: Futex>(
        &mut self,
        wakeup: &Wakeup,
        ready: &mut dyn FnMut() -> bool,
        timeout: Duration,
    ) -> bool {
        let start = Instant::now();
        wakeup.take_ready_stamp(); // a late producer's stamp of an earlier wait
        let woke = wakeup.sleep_with::<F>(ready, start + timeout);
        wakeup.take_ready_stamp();
        self.mark_end(Instant::now());
        woke
    }

    /// [`Spinner::wait`] over any [`Futex`] implementation.
    pub fn wait_with<F: Futex>(&mut self, wakeup: &Wakeup, ready: &mut dyn FnMut() -> bool, timeout: Duration) -> bool {
        let start = Instant::now();
        self.record_stretch(start);
        // Under AUTO, a machine with more runnable tasks than cores means the peer may be queued
        // behind another process: sleep at once, freeing this core for it (machine_load.rs). The
        // count is read only while the peer is still at work (not ready at a first look), when
        // this waiter and its peer both count as runnable whether or not they slept before.
        let crowded = self.watches_load() && !ready() && self.load.check(monotonic_ns());
        let budget = if self.sync_probe_due(crowded || self.yields_to_load(), monotonic_ns) {
            self.probe_budget().min(timeout)
        } else {
            let stalled = self.watches_stalls() && self.stalls.oversubscribed() && !self.stall_probe_due();
            self.spin_budget(crowded, stalled).min(timeout)
        };
        if budget > Duration::ZERO {
            wakeup.count_spin();
        }
        let mut longest_yield = Duration::ZERO;
        let ready_in_spin = spin(ready, start + budget, self.settings.probe, &mut longest_yield);
        if self.watches_stalls() && longest_yield > Duration::ZERO {
            self.stalls.observe_over(longest_yield >= STALL);
        }
        if ready_in_spin {
            let end = Instant::now();
            self.record(end - start);
            self.end_probe_wait();
            self.mark_end(end);
            return true;
        }
        let spun = Instant::now() - start;
        let sleeps = wakeup.sleeps();
        wakeup.take_ready_stamp(); // a late producer's stamp of an earlier wait
        let woke = wakeup.sleep_with::<F>(ready, start + timeout);
        let stamp = wakeup.take_ready_stamp();
        let now_ns = if stamp == 0 { 0 } else { monotonic_ns() };
        let end = Instant::now();
        let waited = end - start;
        if woke && wakeup.sleeps() != sleeps {
            let latency = (stamp != 0).then(|| Duration::from_nanos(now_ns.saturating_sub(stamp)));
            self.record_waker_cost(Duration::from_nanos(wakeup.wake_cost()));
            self.record_woken(waited, spun, latency);
        } else {
            // Ready at the re-check before sleeping (no wake-up in it), or timed out.
            self.record(waited);
        }
        self.end_probe_wait();
        self.mark_end(end);
        woke
    }
}

/// Looks at `ready()` until it holds (`true`) or `until` passed (`false`), probing with `probe`.
/// Looks at least once.
/// With [`Probe::Yield`], `longest_yield` becomes the longest time from before a yield to the
/// look after it (the look is one atomic load in a pool's waits, so this is how long the yield
/// kept the caller off its core); it stays zero if the caller never yielded.
pub(crate) fn spin(
    ready: &mut dyn FnMut() -> bool,
    until: Instant,
    probe: Probe,
    longest_yield: &mut Duration,
) -> bool {
    let mut probes = 0u32;
    let mut yielded_at: Option<Instant> = None;
    loop {
        let is_ready = ready();
        if let Some(before) = yielded_at.take() {
            *longest_yield = (*longest_yield).max(Instant::now() - before);
        }
        if is_ready {
            return true;
        }
        let now = Instant::now();
        if now >= until {
            return false;
        }
        probes = probes.wrapping_add(1);
        match probe {
            Probe::Pause if !probes.is_multiple_of(YIELD_EVERY) => spin_loop(),
            Probe::Pause => yield_now(),
            Probe::Yield => {
                yield_now();
                yielded_at = Some(now);
            }
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

    const PERIOD: u64 = 1 << SYNC_PROBE_PERIOD_SHIFT;

    /// One wait as `wait_with` learns it at `now_ns`, whose peer was ready after `ready_after`:
    /// whether it was a probe's.
    fn probe_wait(s: &mut Spinner, now_ns: u64, ready_after: Duration) -> bool {
        let probed = s.sync_probe_due(false, || now_ns);
        s.record(ready_after);
        s.end_probe_wait();
        probed
    }

    fn sleeping_auto(period_start: u64) -> Spinner {
        let mut s = auto();
        s.probe_period_ns = period_start;
        for _ in 0..50 {
            s.record(Duration::from_millis(2));
        }
        assert!(s.sleeps_at_once(), "2 ms waits put an AUTO waiter to sleep at once");
        s
    }

    #[test]
    fn a_sleeping_auto_waiter_probes_three_waits_at_each_period_boundary_and_keeps_spinning_if_they_were_short() {
        let mut s = sleeping_auto(10 * PERIOD);
        // Within the period of its last probe: no probe, however many waits.
        for k in 0..5 {
            assert!(!s.sync_probe_due(false, || 10 * PERIOD + k * 1000), "no probe before the next boundary");
        }
        // The next boundary: three waits probe, each spinning at least the bound, at most 5 ms.
        let at = 11 * PERIOD + 5;
        for (i, sample) in
            [Duration::from_millis(2), Duration::from_micros(30), Duration::from_micros(20)].into_iter().enumerate()
        {
            assert!(s.sync_probe_due(false, || at + i as u64), "wait {i} of the probe");
            let budget = s.probe_budget();
            assert!(budget >= s.bound() && budget <= SYNC_PROBE_MAX, "probe budget {budget:?}, bound {:?}", s.bound());
            s.record(sample);
            s.end_probe_wait();
        }
        assert_eq!(s.average(), Duration::from_micros(20), "a probe's sample replaces the average");
        assert!(!s.sleeps_at_once(), "short probe waits end the sleeping");
        assert_eq!(s.probe_backoff, 0);
        assert!(!s.sync_probe_due(false, || at + 10), "a spinning waiter does not probe");
    }

    #[test]
    fn probes_that_find_long_waits_double_their_period_up_to_16_periods() {
        let mut s = sleeping_auto(0);
        let mut probes = Vec::new();
        for p in 1..=64u64 {
            // one wait at each base boundary, then the rest of a probe's waits right after
            let now = p * PERIOD + 1;
            if probe_wait(&mut s, now, Duration::from_millis(2)) {
                probes.push(p);
                for _ in 1..SYNC_PROBE_WAITS {
                    assert!(probe_wait(&mut s, now + 1, Duration::from_millis(2)), "a probe runs its waits in a row");
                }
                assert!(s.sleeps_at_once());
            }
        }
        // Periods of 1, 2, 4, 8, then 16 base periods, each probe at a boundary of its own period.
        assert_eq!(probes, vec![1, 2, 4, 8, 16, 32, 48, 64], "probes at {probes:?}");
        assert_eq!(s.probe_backoff, SYNC_PROBE_MAX_BACKOFF);
    }

    #[test]
    fn no_probe_under_a_fixed_bound_or_on_a_crowded_machine() {
        let mut fixed = spinner();
        for _ in 0..50 {
            fixed.record(Duration::from_millis(2));
        }
        assert!(fixed.sleeps_at_once());
        assert!(!fixed.sync_probe_due(false, || u64::MAX / 2), "a fixed bound is the user's to keep");
        let mut s = sleeping_auto(0);
        assert!(!s.sync_probe_due(true, || 5 * PERIOD), "crowded: the peers may wait for a core");
        assert!(s.sync_probe_due(false, || 5 * PERIOD), "not crowded: the probe runs");
        assert!(
            !sleeping_auto(0).sync_probe_due(false, || PERIOD - 1),
            "no boundary passed since its last probe period"
        );
    }

    const BOUND: Duration = Duration::from_micros(200);
    const US: Duration = Duration::from_micros(1);

    fn spinner() -> Spinner {
        Spinner::new(SpinSettings { policy: SpinPolicy { spin: BOUND }, probe: Probe::Pause })
    }

    fn auto() -> Spinner {
        Spinner::new(SpinSettings { policy: SpinPolicy::AUTO, probe: Probe::Pause })
    }

    #[test]
    fn short_waits_spin_less_than_the_bound_and_long_ones_not_at_all() {
        let mut s = spinner();
        assert_eq!(s.budget(), BOUND, "a fresh spinner spins the whole bound");
        for _ in 0..100 {
            s.record(2 * US);
        }
        let short = s.budget();
        assert!(s.average() < 3 * US, "converged down: {:?}", s.average());
        assert!(short > 20 * US && short < 30 * US, "budget {short:?}");
        s.record(750 * US);
        assert!(s.sleeps_at_once(), "one 750 us wait stops the spinning: average {:?}", s.average());
        assert_eq!(s.budget(), Duration::ZERO);
        for _ in 0..100 {
            s.record(60 * US);
        }
        assert!(!s.sleeps_at_once(), "waits of 60 us are spun through: average {:?}", s.average());
        let long = s.budget();
        assert!(long > 120 * US && long <= BOUND, "converged up: budget {long:?}");
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
            s.record(5 * US);
            waits += 1;
        }
        assert!(waits <= 18, "back to spinning after {waits} short waits");
        for _ in 0..1000 {
            s.record(Duration::ZERO);
            assert!(s.budget() <= BOUND);
        }
        assert_eq!(s.budget(), BOUND / 10, "the floor of the budget is a tenth of the bound");
    }

    /// The trap of issue 12: on a machine whose wake-up takes ~90 us, a waiter that learned from
    /// the whole length of its slept waits (peer ready after 5 us, plus 90 us to run again) never
    /// spun again. Learning the peer-ready time, it does after a few waits, whatever the bound.
    #[test]
    fn after_a_long_series_of_slept_waits_short_peer_ready_times_bring_spinning_back() {
        let latency = 90 * US;
        for mut s in [spinner(), auto()] {
            for _ in 0..1000 {
                s.record_woken(Duration::from_millis(1) + latency, Duration::ZERO, Some(latency));
            }
            assert!(s.sleeps_at_once(), "1 ms waits sleep at once: average {:?}", s.average());
            let mut waits = 0;
            while s.sleeps_at_once() {
                s.record_woken(5 * US + latency, Duration::ZERO, Some(latency));
                waits += 1;
                assert!(
                    waits <= 20,
                    "still asleep after {waits} waits: average {:?}, bound {:?}",
                    s.average(),
                    s.bound()
                );
            }
            for _ in 0..100 {
                s.record(5 * US); // now spun through: no wake-up in them
            }
            assert!(s.average() < 6 * US && !s.sleeps_at_once(), "average {:?}", s.average());
        }
        // The learning this replaced: the same slept waits, taken whole, keep a 200 us bound asleep.
        let mut old = spinner();
        for _ in 0..1000 {
            old.record(Duration::from_millis(1) + latency);
        }
        for _ in 0..1000 {
            old.record(5 * US + latency);
        }
        assert!(old.sleeps_at_once(), "the trap: average {:?}", old.average());
    }

    #[test]
    fn a_slept_wait_with_a_big_wake_up_latency_does_not_keep_the_average_high() {
        for mut s in [spinner(), auto()] {
            for _ in 0..200 {
                // Peer ready after 2 us; the waiter ran again 500 us later (a loaded machine).
                s.record_woken(502 * US, Duration::ZERO, Some(500 * US));
            }
            assert!(s.average() < 3 * US, "average {:?}", s.average());
            assert!(!s.sleeps_at_once());
            // Without a stamp (a timed-out sleep that found the condition true) the waiter
            // subtracts the latency it learned.
            assert!(s.wake_latency() > 400 * US, "learned latency {:?}", s.wake_latency());
            for _ in 0..200 {
                s.record_woken(s.wake_latency() + 2 * US, Duration::ZERO, None);
            }
            assert!(s.average() < 3 * US, "average {:?}", s.average());
        }
    }

    #[test]
    fn a_slept_wait_is_never_learned_shorter_than_its_spin() {
        let mut s = spinner();
        for _ in 0..1000 {
            s.record(Duration::ZERO);
        }
        assert_eq!(s.average(), Duration::ZERO);
        // Spun 150 us without the peer ready, slept, woken with a 100 us latency after 200 us:
        // the peer was not ready before 150 us, whatever the latency says.
        s.record_woken(200 * US, 150 * US, Some(100 * US));
        assert_eq!(s.average(), 150 * US / 8);
        // A stamp older than the sleep (a late producer's, from an earlier wait) is no latency.
        let before = s.wake_latency();
        s.record_woken(200 * US, 150 * US, Some(120 * US));
        assert_eq!(s.wake_latency(), before);
    }

    #[test]
    fn the_automatic_bound_counts_what_waking_the_waiter_cost_its_producer() {
        // 25 us wake-ups: the floor's threshold, ~88 us, sleeps through peer-ready times of 150 us.
        let mut s = auto();
        for _ in 0..200 {
            s.record_woken(175 * US, Duration::ZERO, Some(25 * US));
        }
        assert_eq!(s.bound(), AUTO_MIN);
        assert!(s.sleeps_at_once(), "150 us waits, 25 us wake-ups: average {:?}", s.average());
        // The producers spent 40 us in each wake-up system call: a sleep costs 65 us, the bound
        // is eight of them and the same waits are spun through.
        for _ in 0..200 {
            s.record_waker_cost(40 * US);
            s.record_woken(175 * US, Duration::ZERO, Some(25 * US));
        }
        assert_eq!(s.wake_latency(), 25 * US, "the latency alone is still what a slept wait subtracts");
        assert_eq!(s.sleep_cost(), 65 * US);
        assert_eq!(s.bound(), 8 * 65 * US);
        assert!(!s.sleeps_at_once(), "average {:?}, bound {:?}", s.average(), s.bound());
        // A fixed bound keeps its bound whatever the wake-ups cost.
        let mut f = spinner();
        f.record_waker_cost(Duration::from_millis(5));
        assert_eq!(f.bound(), BOUND);
        // A producer that records no cost (0: an older worker binary) teaches nothing.
        let before = s.sleep_cost();
        s.record_waker_cost(Duration::ZERO);
        assert_eq!(s.sleep_cost(), before);
        // Whatever a producer (a worker process: its word is in shared memory) writes there, a
        // sample counts at most MAX_WAKE_SAMPLE, and the bound stays within its ceiling.
        for _ in 0..200 {
            s.record_waker_cost(Duration::from_nanos(u64::MAX));
        }
        assert!(s.sleep_cost() <= 25 * US + MAX_WAKE_SAMPLE, "{:?}", s.sleep_cost());
        assert_eq!(s.bound(), AUTO_MAX);
    }

    #[test]
    fn the_automatic_bound_follows_the_measured_wake_up_latency() {
        let mut s = auto();
        assert!(
            SpinPolicy::default().is_auto() && !SpinPolicy::NEVER.is_auto() && !SpinPolicy { spin: BOUND }.is_auto()
        );
        assert_eq!(SpinPolicy::AUTO.fixed_bound(), SpinPolicy::DEFAULT_SPIN);
        assert_eq!(s.bound(), 8 * INITIAL_WAKE, "eight wake-ups of the assumed 50 us");
        assert_eq!(s.budget(), s.bound(), "a fresh spinner spins the whole bound");
        for _ in 0..200 {
            s.record_woken(100 * US, Duration::ZERO, Some(90 * US));
        }
        let b = s.bound();
        assert!(b > 700 * US && b <= 720 * US, "90 us wake-ups: bound {b:?}");
        for _ in 0..200 {
            s.record_woken(20 * US, Duration::ZERO, Some(10 * US));
        }
        assert_eq!(s.bound(), AUTO_MIN, "fast wake-ups: the floor");
        for _ in 0..200 {
            s.record_woken(Duration::from_secs(1), Duration::ZERO, Some(Duration::from_millis(900)));
        }
        assert_eq!(s.bound(), AUTO_MAX, "slow wake-ups: the ceiling");
        let mut y = Spinner::new(SpinSettings { policy: SpinPolicy::AUTO, probe: Probe::Yield });
        for _ in 0..200 {
            y.record_woken(Duration::from_secs(1), Duration::ZERO, Some(Duration::from_millis(900)));
        }
        assert_eq!(y.bound(), AUTO_MAX_OVERSUBSCRIBED, "oversubscribed: a lower ceiling");
        // A fixed bound does not move.
        let mut f = spinner();
        f.record_woken(Duration::from_secs(1), Duration::ZERO, Some(Duration::from_millis(900)));
        assert_eq!(f.bound(), BOUND);
    }

    /// The 16-core trap of docs/WAKEUP.md: fast wake-ups (20 µs) give the floor's bound, whose
    /// threshold (~90 µs) sleeps through waits of 130 µs, the main process's turnaround in a pool
    /// of 16 workers each working 1.5 ms per command; sleeping there staggers the whole pool. A
    /// waiter that works that long between its waits gets a bound of twice its work (at most
    /// 1 ms; from 1 ms of work on three times it, at most 4 ms; also when the pool outnumbers
    /// the cores) and spins through them.
    #[test]
    fn the_automatic_bound_is_at_least_the_waiters_own_work_between_waits() {
        for (probe, cap) in [(Probe::Pause, AUTO_MAX), (Probe::Yield, AUTO_MAX_OVERSUBSCRIBED)] {
            let mut s = Spinner::new(SpinSettings { policy: SpinPolicy::AUTO, probe });
            for _ in 0..200 {
                s.record_woken(150 * US, Duration::ZERO, Some(20 * US));
            }
            assert_eq!(s.bound(), AUTO_MIN, "{probe:?}: 20 us wake-ups, no work known: the floor");
            assert!(s.sleeps_at_once(), "{probe:?}: 130 us waits sleep at once: average {:?}", s.average());
            for _ in 0..200 {
                s.record_busy(300 * US);
            }
            assert_eq!(s.busy(), 300 * US);
            assert_eq!(s.bound(), 600 * US, "{probe:?}: the bound is twice the work between waits");
            for _ in 0..200 {
                s.record_busy(450 * US);
            }
            let off = s.bound().abs_diff(900 * US);
            assert!(off < Duration::from_nanos(16), "{probe:?}: below 1 ms of work, twice it: {:?}", s.bound());
            for _ in 0..200 {
                s.record_busy(900 * US);
            }
            assert_eq!(s.bound(), AUTO_MAX, "{probe:?}: 900 us of work: twice it, at most 1 ms (not three times it)");
            for _ in 0..200 {
                s.record_busy(Duration::from_micros(1500));
            }
            let off = s.busy().abs_diff(Duration::from_micros(1500));
            assert!(off < Duration::from_nanos(8), "{probe:?}: 1.5 ms of work (within the 1/8 rounding): {off:?}");
            assert!(
                s.bound().abs_diff(Duration::from_micros(4500).min(BUSY_MAX)) < Duration::from_nanos(24),
                "{probe:?}: from 1 ms of work on, three times it, at most 4 ms, beyond the wake-up term's ceiling {cap:?}: {:?}",
                s.bound()
            );
            assert!(!s.sleeps_at_once(), "{probe:?}: 130 us waits are spun through: bound {:?}", s.bound());
            // The trap of 16 workers of 1.5 ms each: waits as long as the work are spun through
            // (a bound of twice the work would sleep at once there).
            for _ in 0..200 {
                s.record(Duration::from_micros(1500));
            }
            assert!(!s.sleeps_at_once(), "{probe:?}: waits of one command's work are spun through");
            for _ in 0..200 {
                s.record(Duration::from_millis(3));
            }
            assert!(s.sleeps_at_once(), "{probe:?}: waits of twice the work sleep at once");
            for _ in 0..200 {
                s.record_busy(Duration::from_millis(10));
            }
            let below = BUSY_MAX - s.busy();
            assert!(
                below < Duration::from_nanos(8),
                "{probe:?}: a stretch counts at most 4 ms (within the 1/8 rounding): {below:?}"
            );
            assert_eq!(s.bound(), BUSY_MAX);
            for _ in 0..200 {
                s.record(130 * US);
            }
            for _ in 0..200 {
                s.record_busy(50 * US);
            }
            assert_eq!(s.bound(), AUTO_MIN, "{probe:?}: 50 us of work between waits: the wake-up term again");
            // One stretch lengthened by a preemption (a neighbour's time slice) does not count;
            // two in a row do.
            let before = s.busy();
            s.record_busy(Duration::from_millis(3));
            assert_eq!(s.busy(), before, "{probe:?}: one long stretch among short ones");
            s.record_busy(Duration::from_millis(3));
            assert!(s.busy() > before, "{probe:?}: two long stretches in a row");
        }
        // A fixed bound is the user's whatever the waiter's work.
        let mut f = spinner();
        f.record_busy(Duration::from_millis(5));
        assert_eq!(f.bound(), BOUND);
    }

    /// Busy for `ns` nanoseconds of this thread's CPU time.
    fn cpu_work(ns: u64) {
        let from = thread_cpu_ns();
        while thread_cpu_ns() - from < ns {
            std::hint::black_box(0u64);
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads the thread CPU clock, which miri does not model")]
    fn a_waiters_work_is_the_time_between_the_end_of_one_wait_and_the_start_of_the_next() {
        let mut s = auto();
        let w = Wakeup::default();
        assert!(s.wait(&w, || true, Duration::from_secs(1)));
        assert_eq!(s.busy(), Duration::ZERO, "nothing known before the second wait");
        std::thread::sleep(Duration::from_millis(2)); // 2 ms or more of wall time, no CPU time
        assert!(s.wait(&w, || true, Duration::from_secs(1)));
        let just_under = LONG_WORK - Duration::from_nanos(1);
        assert_eq!(s.busy(), just_under, "a long stretch of wall time without a CPU reading: just under 1 ms");
        assert_eq!(s.bound(), AUTO_MAX, "twice the work, at most 1 ms");
        // Now the CPU time is read at each wait's end: a stretch of sleeping is not long work ...
        std::thread::sleep(Duration::from_millis(2));
        assert!(s.wait(&w, || true, Duration::from_secs(1)));
        assert_eq!(s.busy(), just_under, "2 ms asleep: under 1 ms of CPU time");
        // ... two stretches of 2 ms of CPU time in a row are (the first counts as at most the one
        // before it).
        for _ in 0..2 {
            cpu_work(2_000_000);
            assert!(s.wait(&w, || true, Duration::from_secs(1)));
        }
        let busy = s.busy();
        assert!(busy > LONG_WORK && busy <= BUSY_MAX, "2 ms of CPU work: long work: {busy:?}");
        assert!(s.bound() >= busy * 3 || s.bound() == BUSY_MAX, "three times the work, at most 4 ms: {:?}", s.bound());
        assert!(s.bound() > AUTO_MAX);
    }

    /// A worker that finds its next command already queued takes it without a wait; its work
    /// per command, not per run of commands, is what it learns, and wall time lengthened by
    /// other processes' turns on its core does not make a stretch long work.
    #[test]
    #[cfg_attr(miri, ignore = "reads the thread CPU clock, which miri does not model")]
    fn work_is_learned_per_command_and_long_work_needs_cpu_time() {
        let mut s = auto();
        let w = Wakeup::default();
        assert!(s.wait(&w, || true, Duration::from_secs(1)));
        s.mark_boundary(); // a command taken without waiting: no work yet (a stretch of ~0)
        assert!(s.busy() < 500 * US, "a stretch of almost nothing: {:?}", s.busy());
        // 300 us of CPU work per command, each command taken without a wait: stretches of
        // 300 us, not one stretch of all of them.
        for _ in 0..40 {
            cpu_work(300_000);
            s.mark_boundary();
        }
        let busy = s.busy();
        assert!(busy >= 280 * US && busy < LONG_WORK, "about 300 us per command: {busy:?}");
        assert!(s.bound() < AUTO_MAX + US, "below 1 ms of work: twice it, at most 1 ms: {:?}", s.bound());
        // Long stretches of wall time with little CPU time (asleep, or queued behind a neighbour)
        // count as just under LONG_WORK ...
        for _ in 0..40 {
            std::thread::sleep(Duration::from_millis(2));
            s.mark_boundary();
        }
        let busy = s.busy();
        assert!(
            busy > 980 * US && busy < LONG_WORK,
            "2 ms asleep per command: just under 1 ms (the average's approach): {busy:?}"
        );
        assert_eq!(s.bound(), AUTO_MAX);
        // ... long stretches of CPU time are long work: three times it, at most 4 ms.
        for _ in 0..40 {
            cpu_work(1_500_000);
            s.mark_boundary();
        }
        let busy = s.busy();
        assert!(busy >= Duration::from_micros(1450) && busy <= BUSY_MAX, "1.5 ms of CPU per command: {busy:?}");
        assert_eq!(s.bound(), BUSY_MAX, "three times 1.5 ms: the 4 ms ceiling");
    }

    #[test]
    fn never_spin_and_zero_timeouts() {
        let mut s = Spinner::new(SpinSettings { policy: SpinPolicy::NEVER, probe: Probe::Yield });
        for _ in 0..100 {
            assert_eq!(s.budget(), Duration::ZERO);
            s.record(US);
            s.record_woken(100 * US, Duration::ZERO, Some(90 * US));
        }
        assert!(s.sleeps_at_once());
        let w = Wakeup::default();
        assert!(s.wait(&w, || true, Duration::ZERO), "a ready condition is seen even with no time left");
        assert!(!s.wait(&w, || false, Duration::ZERO));
        assert_eq!(w.sleeps(), 0, "no time left: no sleep");
        assert_eq!(w.spins(), 0, "never a spin phase");
    }

    /// A machine with more runnable tasks than cores (a busy neighbour) makes an AUTO waiter of a
    /// pool that fits the cores sleep at once; a fixed bound and a yielding pool keep spinning.
    #[test]
    fn a_crowded_machine_makes_auto_waiters_sleep_at_once() {
        let crowded = |settings: SpinSettings| {
            let mut s = Spinner::new(settings);
            s.load = LoadTracker::settled(true);
            s
        };
        // Not ready at the first look (the peer still at work: when the load is read), then ready.
        let looks = std::cell::Cell::new(0u32);
        let ready = || {
            looks.set(looks.get() + 1);
            looks.get() > 1
        };
        let cases = [
            (SpinSettings { policy: SpinPolicy::AUTO, probe: Probe::Pause }, 0),
            (SpinSettings { policy: SpinPolicy { spin: BOUND }, probe: Probe::Pause }, 1),
            (SpinSettings { policy: SpinPolicy::AUTO, probe: Probe::Yield }, 1),
        ];
        for (settings, spins) in cases {
            let mut s = crowded(settings);
            let w = Wakeup::default();
            looks.set(0);
            assert!(s.wait(&w, ready, Duration::from_secs(1)));
            assert_eq!(w.spins(), spins, "{settings:?}");
            assert_eq!(s.yields_to_load(), spins == 0, "{settings:?}");
        }
        // The same AUTO waiter on a machine that fits spins as before.
        let mut s = Spinner::new(SpinSettings { policy: SpinPolicy::AUTO, probe: Probe::Pause });
        s.load = LoadTracker::settled(false);
        let w = Wakeup::default();
        looks.set(0);
        assert!(s.wait(&w, ready, Duration::from_secs(1)));
        assert_eq!(w.spins(), 1);
        assert!(!s.yields_to_load());
    }

    /// A condition not ready at the first look, whose second look (after the first yield) takes
    /// 2 ms, the time slice another task took, and ready from the third look on.
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

    /// A waiter of a pool that outnumbers the cores (AUTO, [`Probe::Yield`]) whose yields keep
    /// losing a time slice (here: the look after each yield takes 2 ms) spins one sleep's cost
    /// at most from then on, except for one probing wait every [`STALL_PROBE_EVERY_NS`]; a fixed
    /// bound keeps spinning, and a pool that fits the cores never samples its yields.
    #[test]
    fn yields_that_lose_a_time_slice_cut_a_yielding_auto_waiters_spin_to_one_wake_up() {
        // One wait; the spin phases it had. The learned peer-ready times are reset first
        // (`average_ns = 0`), so that only the yields decide whether a wait spins.
        let wait_once = |s: &mut Spinner| {
            let w = Wakeup::default();
            s.average_ns = 0;
            assert!(s.wait(&w, stalling_ready(), Duration::from_secs(5)));
            w.spins()
        };
        let mut s = Spinner::new(SpinSettings { policy: SpinPolicy::AUTO, probe: Probe::Yield });
        for round in 0..5 {
            assert_eq!(wait_once(&mut s), 1, "round {round}: spins while its yields are not known to stall");
        }
        assert!(s.stalls.oversubscribed(), "five stalled yields in a row");
        // While stalled, a wait spins one sleep's cost at most, however long the learned
        // peer-ready times would have it spin.
        s.wake_ns = 30_000;
        s.average_ns = 40_000;
        assert_eq!(s.budget(), Duration::from_micros(110), "2 x 40 µs + one 30 µs wake-up, within 240 µs");
        assert_eq!(s.spin_budget(false, true), Duration::from_micros(30));
        assert_eq!(s.spin_budget(false, false), Duration::from_micros(110));
        assert_eq!(s.spin_budget(true, false), Duration::ZERO);
        s.average_ns = 200_000; // asks for more than the bound: no spin, stalled or not
        assert_eq!(s.spin_budget(false, true), Duration::ZERO);
        s.next_stall_probe_ns = 0; // a probe is due: this wait spins its full budget and samples again
        assert_eq!(wait_once(&mut s), 1, "the probing wait spins");
        assert!(s.next_stall_probe_ns > 0, "the next probe is scheduled");

        for settings in [
            SpinSettings { policy: SpinPolicy { spin: BOUND }, probe: Probe::Yield },
            SpinSettings { policy: SpinPolicy::AUTO, probe: Probe::Pause },
        ] {
            let mut s = Spinner::new(settings);
            s.load = LoadTracker::settled(false);
            for _ in 0..6 {
                assert_eq!(wait_once(&mut s), 1, "{settings:?} keeps spinning");
            }
            assert!(!s.stalls.oversubscribed(), "{settings:?} does not sample its yields");
        }
    }

    #[test]
    fn the_longest_yield_is_measured_only_when_yielding() {
        for (probe, yields) in [(Probe::Yield, true), (Probe::Pause, false)] {
            let mut ready = stalling_ready();
            let mut longest = Duration::ZERO;
            assert!(spin(&mut ready, Instant::now() + Duration::from_secs(5), probe, &mut longest));
            assert_eq!(longest >= 2 * STALL, yields, "{probe:?}: {longest:?}");
        }
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
    fn an_idle_wait_neither_spins_nor_probes_where_a_wait_would_probe() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let timeout = Duration::from_millis(1);
        // A sleeping AUTO waiter whose last probe period is long past: its next wait probes...
        let w = Wakeup::default();
        let mut probing = sleeping_auto(0);
        assert!(!probing.wait(&w, || false, timeout), "nothing ready: timed out");
        assert_eq!(w.spins(), 1, "a plain wait past a period boundary spins a probe");
        // ... and an idle one does not, however many periods pass.
        let w = Wakeup::default();
        let mut idle = sleeping_auto(0);
        for _ in 0..3 {
            assert!(!idle.wait_idle(&w, || false, timeout), "nothing ready: timed out");
        }
        assert_eq!(w.spins(), 0, "an idle wait has no spin phase");
        assert_eq!((idle.probe_left, idle.probe_period_ns), (0, 0), "no probe started");
        // It returns as soon as a publish makes it ready, and the next stretch counts from there.
        let published = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(2));
                published.store(true, Ordering::Release);
                w.notify();
            });
            assert!(idle.wait_idle(&w, || published.load(Ordering::Acquire), Duration::from_secs(30)));
        });
        assert!(idle.last_end.is_some(), "the next stretch of work counts from the end of the idle wait");
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
                    let mut s = Spinner::new(SpinSettings { policy, probe });
                    for round in 1..=ROUNDS {
                        let ready = || published.load(Ordering::Acquire) >= round;
                        assert!(s.wait(&w, ready, Duration::from_secs(30)), "{probe:?} round {round}");
                        assert!(s.budget() <= s.bound() && s.bound() <= BUSY_MAX);
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
