//! Whether the machine runs more tasks than it has cores: the one thing a spinning waiter cannot
//! see for itself, and the one that decides whether its spin helps or hurts.
//!
//! Linux's own sleeping locks spin only while the lock's owner is on a CPU (the kernel's
//! `mutex_spin_on_owner` in `kernel/locking/mutex.c` stops at `!owner->on_cpu`): a spinner whose
//! peer waits for a core holds a core and gains nothing. A process cannot read whether its peer
//! is on a CPU, but when the machine's runnable tasks are no more than its cores, every one of
//! them is. So a waiter reads the kernel's count of runnable tasks (the fourth field of
//! `/proc/loadavg`, `running/total`; `running` counts the reader itself) at most once every
//! [`CHECK_EVERY_NS`], only in a wait whose peer is not ready at a first look (then the waiter and
//! the peer it waits for both count as runnable, so the verdict does not depend on whether the
//! pool's own processes slept), and keeps a moving average of "more runnable tasks than cores" over its
//! samples ([`LoadTracker`]). While that average says *oversubscribed*, a pool whose own
//! processes fit the cores ([`crate::Probe::Pause`]) sleeps at once under
//! [`crate::SpinPolicy::AUTO`] ([`crate::Spinner`]): another process (a busy neighbour, another
//! user's job) holds a core, so the peer being waited for may be queued behind it, and a waiter
//! that sleeps frees its core for that peer (the kernel's idle balancing pulls a queued task onto
//! a core that goes idle). docs/WAKEUP.md has the measurements.
//!
//! The count is machine-wide while `cores` is what this process may use
//! (`std::thread::available_parallelism`: affinity and cgroup quota), so a process confined to
//! part of a busy machine counts as oversubscribed and sleeps at once: the polite side to err on.
//! Where `/proc/loadavg` cannot be read the machine counts as not oversubscribed (the spin policy
//! then learns from peer-ready times alone, as it did before this check existed).

/// The least time between two readings of `/proc/loadavg` by one waiter: 10 ms (a reading costs a
/// few µs; a waiter waits thousands of times a second).
pub(crate) const CHECK_EVERY_NS: u64 = 10_000_000;

/// Weight of a new sample in [`LoadTracker`]'s average: 1/4, so four samples in a row (40 ms)
/// turn it.
const SHIFT: u32 = 2;
/// The average is kept in 1/256ths of "oversubscribed".
const ONE: u32 = 256;
/// Oversubscribed from above this average on (hysteresis: ...)
const ENTER: u32 = ONE * 5 / 8;
/// ... back to not oversubscribed below this one, so a single odd sample does not flip it.
const LEAVE: u32 = ONE * 3 / 8;

/// A moving verdict on whether the machine runs more tasks than cores, from samples of the
/// runnable-task count. Pure arithmetic; the readings come from `/proc/loadavg` (`runnable_tasks`).
#[derive(Clone, Debug)]
pub struct LoadTracker {
    cores: u32,
    average: u32,
    oversubscribed: bool,
    next_check_ns: u64,
}

impl LoadTracker {
    /// A tracker for a process that may run on `cores` cores, starting from "not oversubscribed".
    pub fn new(cores: usize) -> LoadTracker {
        LoadTracker {
            cores: cores.clamp(1, u32::MAX as usize) as u32,
            average: 0,
            oversubscribed: false,
            next_check_ns: 0,
        }
    }

    /// A tracker for this process's cores (`std::thread::available_parallelism`, 1 if unknown).
    pub fn for_this_process() -> LoadTracker {
        LoadTracker::new(std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
    }

    /// A tracker that never reads the machine and keeps the verdict `oversubscribed` (tests).
    #[cfg(test)]
    pub(crate) fn settled(oversubscribed: bool) -> LoadTracker {
        let average = if oversubscribed { ONE } else { 0 };
        LoadTracker { cores: 1, average, oversubscribed, next_check_ns: u64::MAX }
    }

    /// Learns one sample: `runnable` tasks on the machine (the reader included), `None` where the
    /// count could not be read (counts as not oversubscribed).
    pub fn observe(&mut self, runnable: Option<u32>) {
        self.observe_over(runnable.is_some_and(|r| r > self.cores));
    }

    /// Learns one sample that says directly whether the machine looked oversubscribed (`over`):
    /// a [`crate::Probe::Yield`] spinner's yield that kept it off its core for a time slice.
    pub fn observe_over(&mut self, over: bool) {
        let sample = if over { ONE } else { 0 };
        let delta = (i64::from(sample) - i64::from(self.average)) >> SHIFT;
        self.average = (i64::from(self.average) + delta).clamp(0, i64::from(ONE)) as u32;
        if self.oversubscribed {
            self.oversubscribed = self.average >= LEAVE;
        } else {
            self.oversubscribed = self.average > ENTER;
        }
    }

    /// Whether the samples so far say the machine runs more tasks than cores.
    pub fn oversubscribed(&self) -> bool {
        self.oversubscribed
    }

    /// [`LoadTracker::oversubscribed`], first reading the count again when 10 ms (`CHECK_EVERY_NS`)
    /// passed since the last reading (`now_ns`: `CLOCK_MONOTONIC` nanoseconds).
    pub fn check(&mut self, now_ns: u64) -> bool {
        if now_ns >= self.next_check_ns {
            self.next_check_ns = now_ns.saturating_add(CHECK_EVERY_NS);
            self.observe(runnable_tasks());
        }
        self.oversubscribed
    }
}

/// The machine's runnable tasks now, the caller included: the `running` of `/proc/loadavg`'s
/// fourth field (`running/total`; proc(5)). `None` where it cannot be read or parsed (not Linux,
/// no `/proc`, and always under loom, whose models have no machine).
pub(crate) fn runnable_tasks() -> Option<u32> {
    #[cfg(loom)]
    {
        None
    }
    #[cfg(not(loom))]
    {
        use std::io::Read;
        let mut buf = [0u8; 128];
        let mut file = std::fs::File::open("/proc/loadavg").ok()?;
        let n = file.read(&mut buf).ok()?;
        parse_running(&buf[..n])
    }
}

/// `running` from the text of `/proc/loadavg` (`"0.52 0.58 0.59 3/467 12345\n"`).
#[cfg_attr(loom, allow(dead_code))] // read only where /proc is (not in loom models)
pub(crate) fn parse_running(text: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(text).ok()?;
    let field = text.split_ascii_whitespace().nth(3)?;
    let (running, _total) = field.split_once('/')?;
    running.parse().ok()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn parses_the_running_count_and_refuses_anything_else() {
        assert_eq!(parse_running(b"0.52 0.58 0.59 3/467 12345\n"), Some(3));
        assert_eq!(parse_running(b"12.00 9.10 8.00 17/2048 99"), Some(17));
        for bad in [&b""[..], b"0.5 0.5 0.5", b"0.5 0.5 0.5 x/10 1", b"0.5 0.5 0.5 310 1", b"\xff\xfe"] {
            assert_eq!(parse_running(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn this_machine_reports_at_least_the_reader() {
        // Linux test machines have /proc; the reader itself is running while it reads.
        let running = runnable_tasks().expect("/proc/loadavg readable");
        assert!(running >= 1, "{running}");
    }

    #[test]
    fn a_steady_excess_turns_it_on_and_a_steady_fit_turns_it_off() {
        let mut t = LoadTracker::new(2);
        assert!(!t.oversubscribed());
        t.observe(Some(3));
        assert!(!t.oversubscribed(), "one sample does not turn it");
        for _ in 0..4 {
            t.observe(Some(3));
        }
        assert!(t.oversubscribed(), "five samples of 3 runnable on 2 cores");
        t.observe(Some(2));
        assert!(t.oversubscribed(), "one fitting sample does not turn it back");
        for _ in 0..4 {
            t.observe(Some(2));
        }
        assert!(!t.oversubscribed(), "back after a run of fitting samples");
    }

    #[test]
    fn as_many_runnable_as_cores_is_not_oversubscribed_nor_is_an_unreadable_count() {
        let mut t = LoadTracker::new(4);
        for _ in 0..50 {
            t.observe(Some(4));
        }
        assert!(!t.oversubscribed());
        let mut u = LoadTracker::new(1);
        for _ in 0..50 {
            u.observe(Some(2));
        }
        assert!(u.oversubscribed());
        for _ in 0..50 {
            u.observe(None);
        }
        assert!(!u.oversubscribed(), "unreadable samples count as fitting");
    }

    #[test]
    fn alternating_samples_do_not_flap() {
        let mut t = LoadTracker::new(2);
        let mut flips = 0;
        let mut last = t.oversubscribed();
        for i in 0..200 {
            t.observe(Some(if i % 2 == 0 { 3 } else { 2 }));
            if t.oversubscribed() != last {
                flips += 1;
                last = t.oversubscribed();
            }
        }
        assert!(flips <= 1, "flipped {flips} times on a 50% mix");
    }

    #[test]
    fn check_reads_at_most_once_per_interval() {
        let mut t = LoadTracker::new(1);
        // Force a known state, then check that a check within the interval does not read again.
        for _ in 0..10 {
            t.observe(Some(5));
        }
        assert!(t.oversubscribed());
        t.next_check_ns = 1_000 + CHECK_EVERY_NS;
        assert!(t.check(1_000), "within the interval: the last verdict, no reading");
        assert_eq!(t.next_check_ns, 1_000 + CHECK_EVERY_NS);
        let _ = t.check(1_000 + CHECK_EVERY_NS);
        assert_eq!(t.next_check_ns, 1_000 + 2 * CHECK_EVERY_NS, "a reading at the interval's end");
    }
}
