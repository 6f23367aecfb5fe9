//! Counting heap allocations, so that [`check_env`](crate::check_env) can report an env that
//! allocates in `step`.
//!
//! A program opts in by making [`CountingAlloc`] its global allocator
//! ([`worker_main!`](crate::worker_main) does). It forwards to the system allocator and counts
//! `alloc`, `alloc_zeroed` and `realloc` per thread; without it, [`allocations`] is `None`.
//!
//! ```
//! // In a binary or test crate (one global allocator per program):
//! #[global_allocator]
//! static ALLOC: ringenv_worker::CountingAlloc = ringenv_worker::CountingAlloc;
//!
//! let before = ringenv_worker::alloc::allocations().unwrap();
//! let v = std::hint::black_box(vec![1u8; 64]);
//! assert!(ringenv_worker::alloc::allocations().unwrap() > before);
//! # drop(v);
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    /// Allocation calls so far on this thread (meaningful only when [`CountingAlloc`] is the
    /// global allocator). Const-initialised with no destructor: reading it never allocates.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn bump() {
    // `try_with`: never panic inside the allocator, even while the thread is being torn down.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

fn read() -> u64 {
    ALLOCATIONS.try_with(Cell::get).unwrap_or(0)
}

/// The system allocator, counting allocation calls (see the [module docs](self)).
///
/// ```
/// #[global_allocator]
/// static ALLOC: ringenv_worker::CountingAlloc = ringenv_worker::CountingAlloc;
/// assert!(ringenv_worker::alloc::allocations().is_some());
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct CountingAlloc;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so `System`'s
// guarantees (a block of `layout`, or null) are this allocator's; counting touches no memory the
// allocator hands out.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: forwarded with the caller's layout (non-zero size, by `alloc`'s contract).
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, hence from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump();
        // SAFETY: `ptr` came from `System` with `layout`; `new_size` is the caller's, as `realloc`
        // requires.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Allocation calls so far on this thread, or `None` when [`CountingAlloc`] is not the global
/// allocator (found by making one allocation and seeing whether the counter moved).
pub fn allocations() -> Option<u64> {
    let before = read();
    drop(std::hint::black_box(Box::new(0u64)));
    let after = read();
    (after > before).then_some(after)
}

/// This thread's raw counter (no probe allocation): compare two readings around a call to count
/// its allocations, once [`allocations`] has shown that counting is on.
pub fn count() -> u64 {
    read()
}
