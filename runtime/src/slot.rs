//! A view of one data slot: the contiguous batch arrays of one step.
//!
//! Rows of every array are indexed by env id; a worker touches only the rows of its own envs, the
//! main process reads them only after the worker's completion (an Acquire pop) and writes actions
//! and seeds only before its command (a Release push), so no two processes touch a byte at once.
//!
//! ```
//! use ringenv_runtime::{Array, ArraySpec, DType, Layout, Segment};
//! let layout = Layout::single(4, 2, 2, ArraySpec::new(DType::F32, &[3]),
//!                             ArraySpec::new(DType::I64, &[]), DType::F32).unwrap();
//! let segment = Segment::create(layout).unwrap();
//! let mut slot = segment.slot(0);
//! slot.rows_mut(Array::Action(0), 2..4).copy_from_slice(&[1u8; 16]);
//! assert_eq!(slot.rows(Array::Action(0), 0..4).len(), 32);
//! assert_eq!(slot.rows(Array::Obs(0), 1..2).len(), 12);
//! ```

use crate::Layout;
use std::marker::PhantomData;
use std::ops::Range;

/// One of the batch arrays of a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Array {
    /// Observation leaf `k`: `obs[k][num_envs, *obs[k].shape]`.
    Obs(usize),
    /// `reward[num_envs]` (f32 or f64).
    Reward,
    /// `terminated[num_envs]` u8.
    Terminated,
    /// `truncated[num_envs]` u8.
    Truncated,
    /// Action leaf `k`: `action[k][num_envs, *action[k].shape]`.
    Action(usize),
    /// `seed[num_envs]` u64.
    Seed,
    /// `seed_flags[num_envs]` u8, bit 0: the env has a seed.
    SeedFlags,
}

/// A view of one slot of a mapped segment.
pub struct SlotView<'a> {
    base: *mut u8,
    layout: &'a Layout,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl<'a> SlotView<'a> {
    /// # Safety
    /// `base` must point at a slot of `layout` inside a mapping that outlives `'a`.
    pub(crate) unsafe fn new(base: *mut u8, layout: &'a Layout) -> SlotView<'a> {
        SlotView { base, layout, _borrow: PhantomData }
    }

    fn leaf<'s>(&self, leaves: &'s [crate::ArraySpec], what: &str, k: usize) -> &'s crate::ArraySpec {
        leaves.get(k).unwrap_or_else(|| panic!("no {what} leaf {k}: the layout has {}", leaves.len()))
    }

    /// Bytes of one env's row of `array`.
    ///
    /// # Panics
    /// When `array` names a leaf the layout does not have.
    pub fn row_bytes(&self, array: Array) -> usize {
        match array {
            Array::Obs(k) => self.leaf(&self.layout.obs, "observation", k).bytes(),
            Array::Reward => self.layout.reward.size(),
            Array::Terminated | Array::Truncated | Array::SeedFlags => 1,
            Array::Action(k) => self.leaf(&self.layout.action, "action", k).bytes(),
            Array::Seed => 8,
        }
    }

    fn span(&self, array: Array, envs: &Range<usize>) -> (usize, usize) {
        assert!(envs.start <= envs.end && envs.end <= self.layout.num_envs, "env rows {envs:?} out of range");
        let o = self.layout.slot_arrays();
        let start = match array {
            Array::Obs(k) => o.obs[k],
            Array::Reward => o.reward,
            Array::Terminated => o.terminated,
            Array::Truncated => o.truncated,
            Array::Action(k) => o.action[k],
            Array::Seed => o.seed,
            Array::SeedFlags => o.seed_flags,
        };
        let row = self.row_bytes(array);
        (start + envs.start * row, envs.len() * row)
    }

    /// The rows `envs` of `array`, as bytes.
    ///
    /// # Panics
    /// When `envs` is not within `0..num_envs`, or `array` names a leaf the layout lacks.
    pub fn rows(&self, array: Array, envs: Range<usize>) -> &[u8] {
        let (at, len) = self.span(array, &envs);
        // SAFETY: `span` is inside the slot (layout arithmetic, bounds asserted); see the module
        // docs for why no other process writes these rows now.
        unsafe { std::slice::from_raw_parts(self.base.add(at), len) }
    }

    /// The rows `envs` of `array`, writable.
    ///
    /// # Panics
    /// When `envs` is not within `0..num_envs`.
    pub fn rows_mut(&mut self, array: Array, envs: Range<usize>) -> &mut [u8] {
        let (at, len) = self.span(array, &envs);
        // SAFETY: as in `rows`; `&mut self` keeps this process from aliasing the rows.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(at), len) }
    }

    /// Address of the first byte of `array` in this process (for zero-copy views, such as NumPy
    /// arrays, that live no longer than the segment).
    pub fn address(&self, array: Array) -> usize {
        self.base as usize + self.span(array, &(0..0)).0
    }

    /// The layout of the segment.
    pub fn layout(&self) -> &Layout {
        self.layout
    }
}
