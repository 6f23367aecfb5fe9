//! Owners of the raw memory that rings and wake-up words live in: the shared mapping of a
//! segment, or a process-local heap block for tests and single-process use.
//!
//! Handles into that memory (a [`crate::Ring`], a slot view) keep an `Arc<dyn Memory>` so the
//! mapping outlives every handle.
//!
//! ```
//! use ringenv_runtime::{HeapMemory, Memory};
//! let m = HeapMemory::new(8192);
//! assert_eq!(m.len(), 8192);
//! assert_eq!(m.as_ptr() as usize % 4096, 0);
//! ```

use std::alloc::{alloc_zeroed, dealloc, Layout as AllocLayout};

/// A block of zero-initialised memory, page aligned, that stays put while it is alive.
pub trait Memory: Send + Sync {
    /// The first byte.
    fn as_ptr(&self) -> *mut u8;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the block is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A page-aligned, zeroed heap block: the process-local variant of a shared mapping.
#[derive(Debug)]
pub struct HeapMemory {
    ptr: *mut u8,
    layout: AllocLayout,
}

// SAFETY: the block is plain bytes; every concurrent access goes through atomics placed in it.
unsafe impl Send for HeapMemory {}
// SAFETY: as above.
unsafe impl Sync for HeapMemory {}

impl HeapMemory {
    /// Allocates `len` zeroed bytes aligned to 4096.
    ///
    /// # Panics
    /// When `len` is 0 or the allocation fails.
    pub fn new(len: usize) -> HeapMemory {
        assert!(len > 0, "HeapMemory needs at least one byte");
        let layout = AllocLayout::from_size_align(len, 4096).expect("valid layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "allocation of {len} bytes failed");
        HeapMemory { ptr, layout }
    }
}

impl Drop for HeapMemory {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

impl Memory for HeapMemory {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.layout.size()
    }
}
