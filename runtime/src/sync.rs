//! The one place the lock-free data path takes its atomics, cells, locks, spin hints and clock
//! from: the standard library normally, [loom](https://docs.rs/loom)'s model-checked twins when
//! the crate is built with `RUSTFLAGS="--cfg loom"`.
//!
//! [`crate::ring`], [`crate::wakeup`] and [`crate::futex`] use nothing else, so a loom model
//! (`tests/rust/loom_*.rs`) runs the very code the pool runs. In a normal build every item is a
//! re-export or a `#[repr(transparent)]` `#[inline]` wrapper over `std`. Under `cfg(loom)`,
//! [`spin_loop`] yields to loom's scheduler and [`Instant`] is a logical clock (each reading
//! advances `LOGICAL_TICK`, 1 µs), so every model run is deterministic.
//!
//! The module is private; its users import from it instead of `std`:
//!
//! ```text
//! use crate::sync::{fence, AtomicU32, Instant, Ordering, UnsafeCell};
//! ```

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex};
#[cfg(not(loom))]
pub(crate) use std::time::Instant;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex};

/// A busy-wait hint: the CPU's pause instruction, or a yield to loom's scheduler.
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(not(loom))]
    std::hint::spin_loop();
    #[cfg(loom)]
    loom::hint::spin_loop();
}

/// A cell whose value is read and written through raw copies under an external protocol (a
/// ring cell's stamp). `#[repr(transparent)]` over `std::cell::UnsafeCell`, so it has the same
/// size and layout in shared memory; under loom every read and write is recorded and a pair not
/// ordered by happens-before fails the model as a data race.
#[cfg(not(loom))]
#[repr(transparent)]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

/// See the non-loom `UnsafeCell`: loom's tracked cell.
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(loom::cell::UnsafeCell<T>);

impl<T: Copy> UnsafeCell<T> {
    /// A cell holding `value`.
    #[cfg_attr(not(loom), allow(dead_code))] // the production ring finds its cells zeroed
    #[inline]
    pub(crate) fn new(value: T) -> UnsafeCell<T> {
        #[cfg(not(loom))]
        return UnsafeCell(std::cell::UnsafeCell::new(value));
        #[cfg(loom)]
        return UnsafeCell(loom::cell::UnsafeCell::new(value));
    }

    /// Copies the value out.
    ///
    /// # Safety
    /// No write to this cell may run concurrently (the caller's protocol orders them).
    #[inline]
    pub(crate) unsafe fn read(&self) -> T {
        #[cfg(not(loom))]
        // SAFETY: the caller guarantees no concurrent write; the pointer is valid and aligned.
        return unsafe { self.0.get().read() };
        #[cfg(loom)]
        // SAFETY: as above; loom checks the claim.
        return self.0.with(|p| unsafe { p.read() });
    }

    /// Overwrites the value.
    ///
    /// # Safety
    /// No other read or write of this cell may run concurrently.
    #[inline]
    pub(crate) unsafe fn write(&self, value: T) {
        #[cfg(not(loom))]
        // SAFETY: the caller guarantees exclusive access; the pointer is valid and aligned.
        unsafe {
            self.0.get().write(value)
        };
        #[cfg(loom)]
        // SAFETY: as above; loom checks the claim.
        self.0.with_mut(|p| unsafe { p.write(value) });
    }
}

/// How far one reading of the logical clock advances the reading thread's time under loom.
#[cfg(loom)]
pub(crate) const LOGICAL_TICK: std::time::Duration = std::time::Duration::from_micros(1);

/// A per-thread logical clock (see the module docs): `now()` ticks [`LOGICAL_TICK`].
#[cfg(loom)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Instant(std::time::Duration);

#[cfg(loom)]
loom::thread_local! {
    static TICKS: std::cell::Cell<u32> = std::cell::Cell::new(0);
}

#[cfg(loom)]
impl Instant {
    /// The calling thread's logical time, advanced by one tick.
    pub(crate) fn now() -> Instant {
        let ticks = TICKS.with(|t| {
            t.set(t.get() + 1);
            t.get()
        });
        Instant(LOGICAL_TICK * ticks)
    }
}

#[cfg(loom)]
impl std::ops::Add<std::time::Duration> for Instant {
    type Output = Instant;
    fn add(self, d: std::time::Duration) -> Instant {
        Instant(self.0.saturating_add(d))
    }
}

#[cfg(loom)]
impl std::ops::Sub for Instant {
    type Output = std::time::Duration;
    fn sub(self, earlier: Instant) -> std::time::Duration {
        self.0.saturating_sub(earlier.0)
    }
}
