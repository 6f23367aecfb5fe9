//! Views of one data slot: the contiguous batch arrays of one step.
//!
//! Rows are indexed by env id; a worker touches only its own envs' rows, and the ring's
//! Release/Acquire order the main process's reads and writes around each command, so no two
//! processes touch a byte at once. Within a process a [`SlotView`] (writable) borrows its segment
//! exclusively, so no two views hand out aliasing `&mut [u8]`:
//!
//! ```compile_fail,E0499
//! use ringenv_runtime::{Array, ArraySpec, DType, Layout, Segment};
//! let layout = Layout::single(4, 2, 2, ArraySpec::new(DType::F32, &[3]),
//!                             ArraySpec::new(DType::I64, &[]), DType::F32).unwrap();
//! let mut segment = Segment::create(layout).unwrap();
//! let mut a = segment.slot_mut(0);
//! let mut b = segment.slot_mut(0); // a second writable view of the same bytes: refused
//! let (x, y) = (a.rows_mut(Array::Action(0), 0..1), b.rows_mut(Array::Action(0), 0..1));
//! x[0] = y[0];
//! ```
//!
//! ```
//! use ringenv_runtime::{Array, ArraySpec, DType, Layout, SeedFlags, Segment};
//! let layout = Layout::single(4, 2, 2, ArraySpec::new(DType::F32, &[3]),
//!                             ArraySpec::new(DType::I64, &[]), DType::F32).unwrap();
//! let mut segment = Segment::create(layout).unwrap();
//! let mut slot = segment.slot_mut(0);
//! slot.rows_mut(Array::Action(0), 2..4).copy_from_slice(&[1u8; 16]);
//! slot.set_seed(1, Some(7));
//! assert_eq!(slot.rows(Array::Action(0), 0..4).len(), 32);
//! assert_eq!(slot.rows(Array::Obs(0), 1..2).len(), 12);
//! let read = segment.slot(0);
//! assert_eq!((read.seed(0), read.seed(1)), (None, Some(7)));
//! assert!(read.seed_flags(1).has_seed() && !read.seed_flags(1).skips_reset());
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
    /// `seed_flags[num_envs]` u8: a [`SeedFlags`] per env.
    SeedFlags,
}

/// One env's byte of a reset slot's `seed_flags[num_envs]` array: the one definition of its bits,
/// written by the main process and read by every worker.
///
/// ```
/// use ringenv_runtime::SeedFlags;
/// let f = SeedFlags::new(true, false);
/// assert_eq!(f.bits(), SeedFlags::HAS_SEED);
/// let skip = SeedFlags::from_bits(f.bits() | SeedFlags::SKIP_RESET);
/// assert!(skip.has_seed() && skip.skips_reset());
/// assert_eq!(SeedFlags::from_bits(0xff).bits(), 3, "unknown bits are dropped");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeedFlags(u8);

impl SeedFlags {
    /// Bit 0: the env has a seed (in `seed[env]`); without it the env continues its own stream.
    pub const HAS_SEED: u8 = 1;
    /// Bit 1: the env is not reset (Gymnasium's `reset_mask`); the main process keeps its last
    /// observation.
    pub const SKIP_RESET: u8 = 2;

    /// Flags for an env that has a seed (`seeded`) and is or is not left out of the reset.
    pub const fn new(seeded: bool, skip_reset: bool) -> SeedFlags {
        SeedFlags(((seeded as u8) * Self::HAS_SEED) | ((skip_reset as u8) * Self::SKIP_RESET))
    }
    /// The flags of a byte read from a slot; unknown bits are dropped.
    pub const fn from_bits(bits: u8) -> SeedFlags {
        SeedFlags(bits & (Self::HAS_SEED | Self::SKIP_RESET))
    }
    /// The byte to store.
    pub const fn bits(self) -> u8 {
        self.0
    }
    /// Whether the env has a seed.
    pub const fn has_seed(self) -> bool {
        self.0 & Self::HAS_SEED != 0
    }
    /// Whether the env is left out of the reset.
    pub const fn skips_reset(self) -> bool {
        self.0 & Self::SKIP_RESET != 0
    }
    /// These flags with the env left out of the reset.
    pub const fn with_skip_reset(self) -> SeedFlags {
        SeedFlags(self.0 | Self::SKIP_RESET)
    }
}

/// A read-only view of one slot of a mapped segment ([`crate::Segment::slot`]). Not `Clone`: its
/// rows borrow the view, and through it the segment, shared.
pub struct SlotRef<'a> {
    base: *const u8,
    layout: &'a Layout,
    _borrow: PhantomData<&'a [u8]>,
}

/// A writable view of one slot of a mapped segment ([`crate::Segment::slot_mut`], which borrows the
/// segment exclusively); reads through [`SlotRef`]'s methods (it derefs to one).
pub struct SlotView<'a> {
    view: SlotRef<'a>,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl<'a> SlotRef<'a> {
    /// # Safety
    /// `base` must point at a slot of `layout` inside a mapping that outlives `'a`, which nothing
    /// in this process writes during `'a`.
    pub(crate) unsafe fn new(base: *const u8, layout: &'a Layout) -> SlotRef<'a> {
        SlotRef { base, layout, _borrow: PhantomData }
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
        let row = self.row_bytes(array);
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
        (start + envs.start * row, envs.len() * row)
    }

    /// The rows `envs` of `array`, as bytes.
    ///
    /// # Panics
    /// When `envs` is not within `0..num_envs`, or `array` names a leaf the layout lacks.
    pub fn rows(&self, array: Array, envs: Range<usize>) -> &[u8] {
        let (at, len) = self.span(array, &envs);
        // SAFETY: `span` is inside the slot (layout arithmetic, bounds asserted); nothing in this
        // process writes it while `self` borrows the segment; see the module docs for other
        // processes.
        unsafe { std::slice::from_raw_parts(self.base.add(at), len) }
    }

    /// The seed flags of env `env`.
    ///
    /// # Panics
    /// When `env >= num_envs`.
    pub fn seed_flags(&self, env: usize) -> SeedFlags {
        SeedFlags::from_bits(self.rows(Array::SeedFlags, env..env + 1)[0])
    }

    /// The reset seed of env `env`: `Some` when its [`SeedFlags::has_seed`].
    ///
    /// # Panics
    /// When `env >= num_envs`.
    pub fn seed(&self, env: usize) -> Option<u64> {
        let bytes = self.rows(Array::Seed, env..env + 1);
        let seed = u64::from_ne_bytes(std::array::from_fn(|i| bytes[i]));
        self.seed_flags(env).has_seed().then_some(seed)
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

impl<'a> SlotView<'a> {
    /// # Safety
    /// `base` must point at a slot of `layout` inside a mapping that outlives `'a`, which nothing
    /// else in this process reads or writes during `'a`.
    pub(crate) unsafe fn new(base: *mut u8, layout: &'a Layout) -> SlotView<'a> {
        // SAFETY: the caller's contract, which is stronger than `SlotRef::new`'s.
        SlotView { view: unsafe { SlotRef::new(base, layout) }, _borrow: PhantomData }
    }

    /// The rows `envs` of `array`, writable.
    ///
    /// # Panics
    /// When `envs` is not within `0..num_envs`, or `array` names a leaf the layout lacks.
    pub fn rows_mut(&mut self, array: Array, envs: Range<usize>) -> &mut [u8] {
        let (at, len) = self.view.span(array, &envs);
        // SAFETY: as in `SlotRef::rows`; `base` came from a `*mut` mapping pointer, and `&mut self`
        // (an exclusive borrow of the segment) keeps this process from aliasing the rows.
        unsafe { std::slice::from_raw_parts_mut(self.view.base.add(at) as *mut u8, len) }
    }

    /// Writes env `env`'s reset seed (`None`: no seed) and its flags, keeping it in the reset.
    ///
    /// # Panics
    /// When `env >= num_envs`.
    pub fn set_seed(&mut self, env: usize, seed: Option<u64>) {
        self.rows_mut(Array::Seed, env..env + 1).copy_from_slice(&seed.unwrap_or(0).to_ne_bytes());
        self.set_seed_flags(env, SeedFlags::new(seed.is_some(), false));
    }

    /// Writes env `env`'s seed flags.
    ///
    /// # Panics
    /// When `env >= num_envs`.
    pub fn set_seed_flags(&mut self, env: usize, flags: SeedFlags) {
        self.rows_mut(Array::SeedFlags, env..env + 1)[0] = flags.bits();
    }
}

impl<'a> std::ops::Deref for SlotView<'a> {
    type Target = SlotRef<'a>;
    fn deref(&self) -> &SlotRef<'a> {
        &self.view
    }
}
