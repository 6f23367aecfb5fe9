//! A bounded lock-free ring of small `Pod` descriptors, placed in (shared) memory by offset.
//!
//! Concurrency: multi-producer, single-consumer, lock-free. Producers claim a cell with a CAS on
//! `tail`; the one consumer, enforced by the [`Consumer`] handle that
//! [`Ring::acquire_consumer`] hands out once per ring (a claim flag in the ring, so across
//! processes too), pops without a CAS. A command ring has one producer by construction (the
//! pool), the completion ring one per worker.
//!
//! Each cell carries a stamp (Vyukov's bounded MPMC queue, as in crossbeam's `ArrayQueue`): a
//! cell at position `pos` is writable when `stamp == pos`, readable when `stamp == pos + 1`.
//! Nothing in the ring is a pointer, so it is valid at any address in any process that maps it.
//! `tests/rust/loom_ring.rs` model-checks this code (atomics come from the crate's `sync` module).
//!
//! ```
//! use ringenv_runtime::{HeapMemory, Ring};
//! use std::sync::Arc;
//! let mem = Arc::new(HeapMemory::new(Ring::<u64>::mem_size(4)));
//! // SAFETY: the block is zeroed, large enough, and kept alive by the ring.
//! let ring = unsafe { Ring::<u64>::init(mem, 0, 4) };
//! let consumer = ring.acquire_consumer().unwrap();
//! assert!(ring.acquire_consumer().is_none()); // one consumer only
//! ring.push(7).unwrap();
//! assert_eq!(consumer.pop(), Some(7));
//! assert_eq!(consumer.pop(), None);
//! assert!(consumer.check().is_ok());
//! ```
//!
//! # A corrupt peer
//! Nothing a peer writes into the ring may make this side hang, panic or read outside it:
//! indices are masked, [`Ring::push`] retries a bounded number of times ([`PushError::Corrupt`]),
//! and [`Consumer::check`] validates `head <= tail <= head + capacity`.

use crate::memory::Memory;
use crate::sync::{spin_loop, AtomicU32, AtomicU64, Ordering, UnsafeCell};
use bytemuck::Pod;
use crossbeam_utils::CachePadded;
use std::marker::PhantomData;
use std::sync::Arc;

#[repr(C)]
struct RingHeader {
    /// Position of the next cell to pop (only the consumer writes it).
    head: CachePadded<AtomicU64>,
    /// Position of the next cell to push (producers CAS it).
    tail: CachePadded<AtomicU64>,
    /// Capacity (a power of two) and the consumer claim flag (0 free, 1 claimed).
    meta: CachePadded<(AtomicU64, AtomicU32)>,
}

#[repr(C)]
struct Cell<T> {
    /// The stamp: the position this cell expects next (see the module docs).
    stamp: AtomicU64,
    value: UnsafeCell<T>,
}

/// Why [`Ring::push`] could not push: the value comes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushError<T> {
    /// Every cell holds an unpopped descriptor.
    Full(T),
    /// The ring's shared state is impossible (a peer wrote over it): what was found.
    Corrupt(T, Corruption),
}

/// An impossible state found in a ring's shared memory (a peer process wrote over it): what
/// was found, with the values read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Corruption {
    /// `tail - head` (wrapping) is outside `0..=capacity`, as the consumer reads them.
    #[error("ring indices are impossible: head {head}, tail {tail}, capacity {capacity}")]
    Indices {
        /// The consumer's position read.
        head: u64,
        /// The producers' position read.
        tail: u64,
        /// The ring's capacity.
        capacity: u64,
    },
    /// A cell's stamp says it was claimed at a position `tail` has not reached.
    #[error("ring cell stamp {stamp} at position {pos} is ahead of the ring's tail")]
    Stamp {
        /// The position the push tried.
        pos: u64,
        /// The stamp read there.
        stamp: u64,
    },
    /// A push lost [`MAX_PUSH_RETRIES`] races in a row (no real contention does).
    #[error("a ring push retried {MAX_PUSH_RETRIES} times without progress")]
    Retries,
}

impl<T> PushError<T> {
    /// The value that was not pushed.
    pub fn into_inner(self) -> T {
        match self {
            PushError::Full(v) | PushError::Corrupt(v, _) => v,
        }
    }
}

impl<T> std::fmt::Display for PushError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PushError::Full(_) => write!(f, "the ring is full"),
            PushError::Corrupt(_, c) => write!(f, "{c}"),
        }
    }
}
impl<T: std::fmt::Debug> std::error::Error for PushError<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PushError::Full(_) => None,
            PushError::Corrupt(_, c) => Some(c),
        }
    }
}

/// How many times [`Ring::push`] retries after losing a race before it reports
/// [`Corruption::Retries`]. Every retry means another producer pushed (the push checks that
/// `tail` moved), so only a peer rewriting `tail` without end reaches it; ringenv's rings have one
/// producer each and never retry at all.
pub const MAX_PUSH_RETRIES: u32 = 1 << 20;

/// A handle to a ring living in a [`Memory`] block at some offset.
pub struct Ring<T: Pod> {
    mem: Arc<dyn Memory>,
    header: *const RingHeader,
    cells: *const Cell<T>,
    mask: u64,
    _t: PhantomData<T>,
}

// SAFETY: all shared state is accessed through atomics; values are `Pod` copied under the stamp
// protocol; the memory is kept alive by `mem`.
unsafe impl<T: Pod + Send> Send for Ring<T> {}
// SAFETY: as above.
unsafe impl<T: Pod + Send> Sync for Ring<T> {}

impl<T: Pod> Clone for Ring<T> {
    fn clone(&self) -> Self {
        Ring { mem: self.mem.clone(), header: self.header, cells: self.cells, mask: self.mask, _t: PhantomData }
    }
}

impl<T: Pod> Ring<T> {
    /// Bytes a ring of `capacity` cells occupies.
    pub const fn mem_size(capacity: usize) -> usize {
        std::mem::size_of::<RingHeader>() + capacity * std::mem::size_of::<Cell<T>>()
    }

    /// Initialises a ring of `capacity` (a power of two >= 2) at `offset` in `mem` and returns a
    /// handle. Call once, before any other process attaches.
    ///
    /// # Safety
    /// `mem[offset..offset + mem_size(capacity)]` must be zeroed, 128-byte aligned, and not in use
    /// by anything else.
    pub unsafe fn init(mem: Arc<dyn Memory>, offset: usize, capacity: usize) -> Ring<T> {
        assert!(capacity >= 2 && capacity.is_power_of_two(), "ring capacity {capacity} is not a power of two >= 2");
        let ring = Self::place(mem, offset, capacity).expect("ring region fits");
        #[cfg(loom)]
        // SAFETY: `place` checked bounds and alignment; the caller guarantees nothing else uses
        // the region, so overwriting it (without dropping what was there: zeroes) is sound.
        unsafe {
            ring.construct(capacity)
        };
        let header = ring.header();
        header.meta.0.store(capacity as u64, Ordering::Relaxed);
        for i in 0..capacity {
            ring.cell(i as u64).stamp.store(i as u64, Ordering::Relaxed);
        }
        ring
    }

    /// A handle to a ring already initialised at `offset` in `mem` (by this or another process).
    /// Returns `None` when the region does not fit, is misaligned, or records another capacity.
    ///
    /// # Safety
    /// The region must hold a ring initialised by [`Ring::init`] with the same `T`, or be about to
    /// be initialised by the caller.
    pub unsafe fn attach(mem: Arc<dyn Memory>, offset: usize, capacity: usize) -> Option<Ring<T>> {
        let ring = Self::place(mem, offset, capacity)?;
        let recorded = ring.header().meta.0.load(Ordering::Relaxed);
        (recorded == 0 || recorded == capacity as u64).then_some(ring)
    }

    /// A handle to the ring at `offset` of `capacity`, reading nothing from the region (so nothing
    /// a peer wrote there can refuse it); `None` when it does not fit in `mem`, is not 128-byte
    /// aligned, or `capacity` is not a power of two. The main process uses this for rings it
    /// initialised itself; [`Ring::attach`] also checks the recorded capacity.
    ///
    /// # Safety
    /// As [`Ring::attach`].
    pub(crate) unsafe fn view(mem: Arc<dyn Memory>, offset: usize, capacity: usize) -> Option<Ring<T>> {
        Self::place(mem, offset, capacity)
    }

    /// A handle to the region at `offset`, reading nothing from it; `None` when it does not fit
    /// in `mem`, is not 128-byte aligned, or `capacity` is not a power of two.
    fn place(mem: Arc<dyn Memory>, offset: usize, capacity: usize) -> Option<Ring<T>> {
        let end = offset.checked_add(Self::mem_size(capacity))?;
        if end > mem.len() || !(mem.as_ptr() as usize + offset).is_multiple_of(128) || !capacity.is_power_of_two() {
            return None;
        }
        // SAFETY: in bounds (checked above).
        let base = unsafe { mem.as_ptr().add(offset) };
        Some(Ring {
            header: base as *const RingHeader,
            // SAFETY: in bounds (checked above).
            cells: unsafe { base.add(std::mem::size_of::<RingHeader>()) } as *const Cell<T>,
            mask: capacity as u64 - 1,
            mem,
            _t: PhantomData,
        })
    }

    /// Writes a fresh header and `capacity` fresh cells over the region (loom's atomics and
    /// cells must be constructed, not found zeroed); `init` then sets their values.
    ///
    /// # Safety
    /// The region (checked by `place`) must be unused by anything else.
    #[cfg(loom)]
    unsafe fn construct(&self, capacity: usize) {
        let header = RingHeader {
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(AtomicU64::new(0)),
            meta: CachePadded::new((AtomicU64::new(0), AtomicU32::new(0))),
        };
        // SAFETY: in bounds and aligned (`place`); unused by anything else (the caller).
        unsafe { (self.header as *mut RingHeader).write(header) };
        for i in 0..capacity {
            let cell = Cell { stamp: AtomicU64::new(0), value: UnsafeCell::new(T::zeroed()) };
            // SAFETY: i < capacity: in bounds (`place`), and unused as above.
            unsafe { (self.cells as *mut Cell<T>).add(i).write(cell) };
        }
    }

    fn header(&self) -> &RingHeader {
        // SAFETY: bounds and alignment checked in `attach`; `mem` keeps the block alive.
        unsafe { &*self.header }
    }

    fn cell(&self, pos: u64) -> &Cell<T> {
        let index = (pos & self.mask) as usize;
        debug_assert!(index <= self.mask as usize);
        // SAFETY: index <= mask < capacity, within the region checked in `attach`.
        unsafe { &*self.cells.add(index) }
    }

    /// Capacity in descriptors.
    pub fn capacity(&self) -> usize {
        self.mask as usize + 1
    }

    /// Claims the single consumer of this ring; `None` when it is already claimed (by any
    /// process). The claim lasts as long as the ring.
    pub fn acquire_consumer(&self) -> Option<Consumer<T>> {
        let claimed = &self.header().meta.1;
        // SYNC POINT: the claim; only the CAS's atomicity matters (one winner, in any process).
        // AcqRel orders the winner's first pop after `init`'s stores it observed through `attach`.
        claimed
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .ok()
            .map(|_| Consumer { ring: self.clone() })
    }

    /// Pushes `value`; lock-free, safe from any number of producers at once. Terminates whatever
    /// the ring's memory holds (see the module docs on a corrupt peer).
    ///
    /// # Errors
    /// [`PushError::Full`] with the value when every cell holds an unpopped descriptor (or a
    /// peer wrote old stamps over them);
    /// [`PushError::Corrupt`] when the ring's shared state is impossible.
    pub fn push(&self, value: T) -> Result<(), PushError<T>> {
        let header = self.header();
        let mut pos = header.tail.load(Ordering::Relaxed);
        for _ in 0..MAX_PUSH_RETRIES {
            let cell = self.cell(pos);
            // SYNC POINT: pairs with the Release stamp store in `Consumer::pop`: the cell is free.
            let stamp = cell.stamp.load(Ordering::Acquire);
            if stamp == pos {
                match header.tail.compare_exchange_weak(pos, pos.wrapping_add(1), Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => {
                        // SAFETY: the CAS gave this producer exclusive ownership of the cell until
                        // it publishes the stamp below (a corrupt peer writing the cell at the
                        // same time can only garble the `Pod` bytes, never their validity).
                        unsafe { cell.value.write(value) };
                        // SYNC POINT: slot contents visible to pop (Acquire stamp load there).
                        cell.stamp.store(pos.wrapping_add(1), Ordering::Release);
                        return Ok(());
                    }
                    Err(current) => pos = current,
                }
            } else if (stamp as i64).wrapping_sub(pos as i64) < 0 {
                // The cell still holds the value of the previous lap: the ring is full (or a peer
                // wrote an old stamp there; a caller that knows how many descriptors it has
                // outstanding can tell).
                return Err(PushError::Full(value));
            } else {
                // Another producer claimed `pos`: its CAS happens-before its stamp store, which
                // we saw (Acquire), so `tail` has moved on. If it has not, the stamp is garbage.
                let tail = header.tail.load(Ordering::Relaxed);
                if tail == pos {
                    return Err(PushError::Corrupt(value, Corruption::Stamp { pos, stamp }));
                }
                pos = tail;
            }
            spin_loop();
        }
        Err(PushError::Corrupt(value, Corruption::Retries))
    }

    /// Whether a descriptor is ready to pop (a snapshot; any process may call it).
    pub fn has_ready(&self) -> bool {
        let pos = self.header().head.load(Ordering::Relaxed);
        // SYNC POINT: pairs with the Release stamp store in `push`.
        self.cell(pos).stamp.load(Ordering::Acquire) == pos.wrapping_add(1)
    }

    /// Number of descriptors pushed and not yet popped (a snapshot, at most the capacity even
    /// when a peer wrote garbage over the indices).
    pub fn len(&self) -> usize {
        // SYNC POINT: `head` pairs with the Release head store in `Consumer::pop`; `tail` is
        // CAS'd Relaxed, so the difference is a snapshot, never used to touch a cell.
        let tail = self.header().tail.load(Ordering::Acquire);
        let head = self.header().head.load(Ordering::Acquire);
        tail.saturating_sub(head).min(self.capacity() as u64) as usize
    }

    /// Whether the ring holds nothing (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The one consumer of a [`Ring`].
pub struct Consumer<T: Pod> {
    ring: Ring<T>,
}

impl<T: Pod> Consumer<T> {
    /// Pops the oldest descriptor, or `None` when none is ready. Wait-free.
    pub fn pop(&self) -> Option<T> {
        let header = self.ring.header();
        let pos = header.head.load(Ordering::Relaxed);
        let cell = self.ring.cell(pos);
        // SYNC POINT: slot contents visible to pop (pairs with the Release store in `push`).
        if cell.stamp.load(Ordering::Acquire) != pos.wrapping_add(1) {
            return None;
        }
        // SAFETY: stamp == pos + 1 means a producer finished writing the cell, and only this
        // consumer reads it until the stamp below hands it back.
        let value = unsafe { cell.value.read() };
        // SYNC POINT: cell free for the next lap (pairs with the Acquire stamp load in `push`).
        cell.stamp.store(pos.wrapping_add(self.ring.capacity() as u64), Ordering::Release);
        // SYNC POINT: pairs with the Acquire head load in `Ring::len` (a monitoring snapshot).
        header.head.store(pos.wrapping_add(1), Ordering::Release);
        Some(value)
    }

    /// Checks the indices this consumer reads: `head <= tail <= head + capacity` (wrapping), which
    /// always holds here while every producer follows the protocol (this consumer writes `head`
    /// itself; a producer claims position `p` only after `p - capacity` was popped).
    ///
    /// # Errors
    /// [`Corruption::Indices`] with the values read when a peer wrote over them.
    pub fn check(&self) -> Result<(), Corruption> {
        let header = self.ring.header();
        let head = header.head.load(Ordering::Relaxed);
        // SYNC POINT: none needed: a producer's tail only grows; any value it published lies in
        // `head..=head + capacity` (the stamp protocol), whichever we read.
        let tail = header.tail.load(Ordering::Relaxed);
        let capacity = self.ring.capacity() as u64;
        if tail.wrapping_sub(head) > capacity {
            return Err(Corruption::Indices { head, tail, capacity });
        }
        Ok(())
    }

    /// The ring this consumer pops from.
    pub fn ring(&self) -> &Ring<T> {
        &self.ring
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::memory::HeapMemory;

    fn ring(capacity: usize) -> Ring<u64> {
        let mem = Arc::new(HeapMemory::new(Ring::<u64>::mem_size(capacity)));
        // SAFETY: fresh zeroed block of the right size.
        unsafe { Ring::init(mem, 0, capacity) }
    }

    #[test]
    fn empty_ring_pops_nothing_and_full_ring_refuses_then_accepts_after_pop() {
        let r = ring(4);
        let c = r.acquire_consumer().unwrap();
        assert!(r.is_empty() && !r.has_ready());
        assert_eq!(c.pop(), None);
        for i in 0..4 {
            r.push(i).unwrap();
        }
        assert_eq!(r.push(99), Err(PushError::Full(99)));
        assert_eq!(r.len(), 4);
        assert_eq!(c.pop(), Some(0));
        r.push(4).unwrap();
        assert_eq!((1..5).map(|_| c.pop().unwrap()).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    }

    #[test]
    fn wraps_around_many_laps_in_order() {
        let r = ring(2);
        let c = r.acquire_consumer().unwrap();
        let laps = if cfg!(miri) { 20 } else { 1000u64 };
        for i in 0..laps {
            r.push(i).unwrap();
            if i % 2 == 1 {
                assert_eq!(c.pop(), Some(i - 1));
                assert_eq!(c.pop(), Some(i));
            }
        }
        assert_eq!(c.pop(), None);
    }

    #[test]
    fn attach_rejects_bad_regions() {
        let mem: Arc<dyn Memory> = Arc::new(HeapMemory::new(4096));
        // SAFETY: only checks are exercised; nothing is read from a rejected region.
        unsafe {
            assert!(Ring::<u64>::attach(mem.clone(), 4096, 2).is_none());
            assert!(Ring::<u64>::attach(mem.clone(), 64, 2).is_none());
            assert!(Ring::<u64>::attach(mem.clone(), 0, 3).is_none());
            Ring::<u64>::init(mem.clone(), 0, 4);
            assert!(Ring::<u64>::attach(mem.clone(), 0, 8).is_none(), "capacity mismatch");
            assert!(Ring::<u64>::attach(mem, 0, 4).is_some());
        }
    }

    #[test]
    fn two_producers_one_consumer_threads_lose_and_duplicate_nothing() {
        const N: u64 = if cfg!(miri) { 200 } else { 20_000 };
        let r = ring(8);
        let c = r.acquire_consumer().unwrap();
        std::thread::scope(|s| {
            for p in 0..2u64 {
                let r = r.clone();
                s.spawn(move || {
                    for i in 0..N {
                        let mut v = p << 32 | i;
                        while let Err(PushError::Full(back)) = r.push(v) {
                            v = back;
                            std::thread::yield_now();
                        }
                    }
                });
            }
            let mut next = [0u64; 2];
            let mut got = 0;
            while got < 2 * N {
                match c.pop() {
                    Some(v) => {
                        let (p, i) = ((v >> 32) as usize, v & 0xffff_ffff);
                        assert_eq!(i, next[p], "producer {p} out of order");
                        next[p] += 1;
                        got += 1;
                    }
                    None => std::thread::yield_now(),
                }
            }
            assert_eq!(next, [N, N]);
        });
    }
}
