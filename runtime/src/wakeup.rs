//! The wake-up handshake between one waiter and its producers: a futex word, the waiter's
//! announcement that it sleeps, and the producer's wake.
//!
//! A waiter that stops spinning ([`crate::Spinner`]) announces that it sleeps and sleeps on the
//! futex word `seq`; a producer issues `FUTEX_WAKE` only when a sleeper announced itself, so a busy
//! pipeline makes no system call. Every sleep has a deadline.
//!
//! A waiter may await several publishes (the main process awaits every worker's completion of a
//! step). It tells how many are `missing`; every `notify` counts itself in `published`, and the
//! sleeper announces the count `wake_at` at which it can go on, so only the producer that reaches
//! it wakes the sleeper: at most one sleep and one wake per batch instead of one per worker that
//! finishes while it sleeps (`benches/main_cost.py` counts them).
//! A count too low only wakes the waiter early, to count again; it is never too high: a publish
//! the waiter did not see is counted after the `published` it read.
//!
//! The handshake is Dekker's: the waiter writes `sleepers` then reads the rings, the producer
//! writes a ring then reads `sleepers`, with a SeqCst fence on each side, so a wake is never
//! lost; `seq` is read *before* announcing. A producer that misses the announcement has counted
//! itself before its fence, and the waiter acquires `published` after its own, so the re-check
//! sees that producer's publish and every one counted before it. `tests/rust/loom_wakeup.rs`
//! model-checks it.
//!
//! Concurrency: one waiter per word, any number of producers.
//!
//! ```
//! use ringenv_runtime::Wakeup;
//! let wakeup = Wakeup::default();
//! assert!(!wakeup.notify(), "nobody asleep: no system call");
//! assert_eq!((wakeup.sleeps(), wakeup.spins()), (0, 0));
//! ```

use crate::futex::{DefaultFutex, Futex};
use crate::sync::{fence, AtomicU32, AtomicU64, Instant, Ordering};
use std::time::Duration;

/// A futex word and a sleeper count, one cache-line pair, placed in shared memory.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct Wakeup {
    /// The futex word: a counter bumped by every wake, so a stale wait returns at once.
    seq: AtomicU32,
    /// Number of waiters that announced they sleep (0 or 1 in ringenv: one waiter per word).
    sleepers: AtomicU32,
    /// How many times producers notified (wrapping).
    published: AtomicU32,
    /// The `published` count at which the announced sleeper can go on (wrapping).
    wake_at: AtomicU32,
    /// How many times the waiter went to sleep on the futex (wrapping; for monitoring).
    sleeps: AtomicU32,
    /// `CLOCK_MONOTONIC` ns at which a producer woke the sleeping waiter (0: none since the waiter
    /// last took it); the first producer's stamp stays. Lets the waiter learn its peer's ready
    /// time without its own wake-up latency (`wait.rs`).
    ready_ns: AtomicU64,
    /// Waits with a spin phase, on its own cache line: written by the waiter on its fast path,
    /// which must not take the line producers read.
    spins: SpinCount,
}

/// A counter alone on its cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
struct SpinCount(AtomicU32);

// The block is two cache lines of the segment layout.
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Wakeup>() == 128);

impl Wakeup {
    /// Bytes this struct occupies in the segment.
    pub const MEM_SIZE: usize = std::mem::size_of::<Wakeup>();

    /// Producer side: call after publishing. Wakes the waiter if, and only if, it sleeps and this
    /// publish is the last it awaits. Returns whether a wake system call was made.
    pub fn notify(&self) -> bool {
        self.notify_with::<DefaultFutex>()
    }

    /// [`Wakeup::notify`] over any [`Futex`] implementation.
    #[inline]
    pub fn notify_with<F: Futex>(&self) -> bool {
        // SYNC POINT: pairs with the Acquire loads of `published` in `announce_and_sleep` (and
        // carries the earlier producers' publishes to a waiter this one wakes).
        let count = self.published.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
        // SYNC POINT: pairs with the fence after `sleepers.fetch_add` in `announce_and_sleep`:
        // either the waiter's re-check sees what we published, or we see its announcement here.
        fence(Ordering::SeqCst);
        // SYNC POINT: pairs with the announcement's `fetch_add`: its `wake_at` is read below.
        if self.sleepers.load(Ordering::Acquire) == 0 {
            return false;
        }
        if (count.wrapping_sub(self.wake_at.load(Ordering::Relaxed)) as i32) < 0 {
            return false; // the sleeper awaits later publishes
        }
        // A hint for the waiter's learning, not a sync point: any value is safe.
        let _ = self.ready_ns.compare_exchange(0, monotonic_ns(), Ordering::Relaxed, Ordering::Relaxed);
        self.wake_all_with::<F>();
        true
    }

    /// How many times the waiter of this word has slept on the futex (wraps at 2^32); a
    /// monitoring figure, read by any process mapping the segment.
    pub fn sleeps(&self) -> u32 {
        self.sleeps.load(Ordering::Relaxed)
    }

    /// How many waits of this word's waiter had a spin phase (wraps at 2^32); a monitoring
    /// figure. Zero for ever under [`crate::SpinPolicy::NEVER`].
    pub fn spins(&self) -> u32 {
        self.spins.0.load(Ordering::Relaxed)
    }

    /// Counts a wait with a spin phase (the waiter only).
    pub(crate) fn count_spin(&self) {
        self.spins.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Wakes every sleeper unconditionally (used when a peer died and nothing was published).
    pub fn wake_all(&self) {
        self.wake_all_with::<DefaultFutex>();
    }

    /// [`Wakeup::wake_all`] over any [`Futex`] implementation.
    pub fn wake_all_with<F: Futex>(&self) {
        // SYNC POINT: pairs with the Acquire load of `seq` in `sleep_with`: a waiter that read
        // the old value sleeps on it and the kernel (or LocalFutex) sees the new one and returns.
        self.seq.fetch_add(1, Ordering::Release);
        F::wake(&self.seq, u32::MAX);
    }

    /// Waiter side, after its spin: announce, re-check `missing()` (how many publishes the waiter
    /// still awaits, 0: none), sleep on the futex until woken, until `deadline`. Returns whether
    /// `missing()` reached 0, and how long ago the producer that woke the waiter stamped its wake
    /// (`None`: no stamp; the waiter's wake-up latency otherwise).
    pub(crate) fn sleep_with<F: Futex>(
        &self,
        missing: &mut dyn FnMut() -> u32,
        deadline: Instant,
    ) -> (bool, Option<Duration>) {
        self.ready_ns.store(0, Ordering::Relaxed); // a late producer's stamp of an earlier wait
        let woke = self.announce_and_sleep::<F>(missing, deadline);
        let stamp = self.ready_ns.swap(0, Ordering::Relaxed);
        (woke, (stamp != 0).then(|| Duration::from_nanos(monotonic_ns().saturating_sub(stamp))))
    }

    fn announce_and_sleep<F: Futex>(&self, missing: &mut dyn FnMut() -> u32, deadline: Instant) -> bool {
        loop {
            // SYNC POINT: pairs with the Release `fetch_add` in `wake_all_with`.
            let seq = self.seq.load(Ordering::Acquire);
            // SYNC POINT: pairs with `notify`'s `fetch_add`: a publish counted here is seen below,
            // so every publish `missing()` counts comes later in the count.
            let counted = self.published.load(Ordering::Acquire);
            let awaited = missing();
            if awaited == 0 {
                return true;
            }
            self.wake_at.store(counted.wrapping_add(awaited), Ordering::Relaxed);
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            // SYNC POINT: pairs with the fence in `notify` (Dekker: announce, then re-check), and
            // the load with the `fetch_add` of every producer that missed the announcement.
            fence(Ordering::SeqCst);
            self.published.load(Ordering::Acquire);
            let now = Instant::now();
            let woke = if missing() == 0 {
                true
            } else if now >= deadline {
                false
            } else {
                self.sleeps.fetch_add(1, Ordering::Relaxed);
                F::wait(&self.seq, seq, deadline - now);
                missing() == 0
            };
            self.sleepers.fetch_sub(1, Ordering::Relaxed);
            if woke {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
        }
    }
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn a_sleeper_is_woken_and_stamped_and_nobody_asleep_costs_no_syscall() {
        let (w, flag) = (Wakeup::default(), AtomicBool::new(false));
        assert!(!w.notify(), "nobody waits: no wake call");
        let deadline = Instant::now() + Duration::from_millis(20);
        assert_eq!(w.sleep_with::<DefaultFutex>(&mut || 1, deadline), (false, None), "timed out");
        assert!(Instant::now() >= deadline);
        std::thread::scope(|s| {
            s.spawn(|| {
                let deadline = Instant::now() + Duration::from_secs(10);
                let mut missing = || u32::from(!flag.load(Ordering::Acquire));
                let (woke, stamped) = w.sleep_with::<DefaultFutex>(&mut missing, deadline);
                assert!(woke && stamped.is_some(), "the producer stamped the wake of a sleeper");
            });
            while w.sleepers.load(Ordering::SeqCst) == 0 {
                std::thread::yield_now(); // until the waiter announced its sleep
            }
            flag.store(true, Ordering::Release);
            assert!(w.notify());
        });
        assert_eq!(w.sleeps(), 2, "the waiter slept once in each wait");
    }

    #[test]
    fn a_sleeper_awaiting_two_publishes_is_woken_by_the_second_only() {
        let (w, published) = (Wakeup::default(), AtomicU32::new(0));
        std::thread::scope(|s| {
            s.spawn(|| {
                let deadline = Instant::now() + Duration::from_secs(30);
                assert!(w.sleep_with::<DefaultFutex>(&mut || 2 - published.load(Ordering::Acquire), deadline).0);
            });
            while w.sleeps() == 0 {
                std::thread::yield_now(); // until the waiter re-checked and went to sleep
            }
            published.fetch_add(1, Ordering::Release);
            assert!(!w.notify(), "the sleeper awaits one more publish: no wake call");
            published.fetch_add(1, Ordering::Release);
            assert!(w.notify(), "the last awaited publish wakes it");
        });
        assert_eq!(w.sleeps(), 1, "one sleep for both publishes");
    }

    #[test]
    fn handshake_over_the_local_futex_wakes_a_sleeper_in_every_round() {
        use crate::futex::LocalFutex;
        const ROUNDS: u32 = if cfg!(miri) { 5 } else { 200 };
        let (w, published) = (Wakeup::default(), AtomicU32::new(0));
        std::thread::scope(|s| {
            s.spawn(|| {
                for round in 1..=ROUNDS {
                    let mut missing = || u32::from(published.load(Ordering::Acquire) < round);
                    let deadline = Instant::now() + Duration::from_secs(30);
                    assert!(w.sleep_with::<LocalFutex>(&mut missing, deadline).0, "round {round}");
                }
            });
            for _ in 0..ROUNDS {
                published.fetch_add(1, Ordering::Release);
                w.notify_with::<LocalFutex>();
                std::thread::yield_now();
            }
        });
    }
}
