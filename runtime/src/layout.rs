//! Where everything lives in a pool's segment: one pure function from counts and array specs to
//! byte offsets, computed the same way by the main process and by every worker.
//!
//! ```text
//! offset 0              header (one page; see header.rs)
//! completion_wakeup     Wakeup word of the main process, shared by all workers   (128 B)
//! commands + k*stride   worker k: its Wakeup word, then Ring<Command> (SPSC, main -> worker k),
//!                       then Ring<Completion> (SPSC, worker k -> main)
//! metrics               PoolMetrics, then one WorkerMetrics per worker (see metrics.rs)
//! info_arenas + k*info_arena_stride
//!                       worker k's info arena (see info_arena.rs): the payload of its last
//!                       completion (infos), so per-step infos never touch the control socket
//! slots + s*slot_stride slot s (0..depth), each array 64-byte aligned:
//!     obs[k]     [num_envs, *obs[k].shape]     obs[k].dtype, one array per observation leaf
//!     reward     [num_envs]                    reward dtype (f32 or f64; f64 in the pools Python makes)
//!     terminated [num_envs]                    u8 (0 or 1)
//!     truncated  [num_envs]                    u8 (0 or 1)
//!     action[k]  [num_envs, *action[k].shape]  action[k].dtype, one array per action leaf
//!     seed       [num_envs]                    u64, the reset seed of each env
//!     seed_flags [num_envs]                    u8, bit 0: the env has a seed; bit 1: skip its reset
//! ```
//!
//! A composite space has one contiguous leaf per fixed-size component; a space with no fixed
//! layout has none (its values travel pickled on the control socket). Envs are split over workers
//! in contiguous ranges, as `numpy.array_split` splits them.
//!
//! ```
//! use ringenv_runtime::{ArraySpec, DType, Layout};
//! let layout = Layout::single(10, 3, 2, ArraySpec::new(DType::F32, &[4]),
//!                             ArraySpec::new(DType::I64, &[]), DType::F32).unwrap();
//! assert_eq!(layout.worker_envs(0), 0..4);
//! assert_eq!(layout.worker_envs(2), 7..10);
//! assert_eq!(layout.slot_offset(1) - layout.slot_offset(0), layout.slot_stride());
//! assert!(layout.total_size() % 4096 == 0);
//! ```

use crate::metrics::{PoolMetrics, WorkerMetrics};
use crate::ring::Ring;
use crate::wakeup::Wakeup;
use crate::{Command, Completion, DType};
use std::ops::Range;

/// The most dimensions an array in the segment may have.
pub const MAX_NDIM: usize = 8;
/// The most leaves (observation and action arrays together) a layout may have; a space with
/// more goes through the pickled path.
pub const MAX_LEAVES: usize = 32;
/// Size of the header region in bytes (one page).
pub const HEADER_REGION: usize = 4096;
/// Alignment of every array in a slot, in bytes: a cache line, and enough for any dtype.
pub const ARRAY_ALIGN: usize = 64;
/// Capacity of each worker's command ring and completion ring. The pool has at most one command
/// outstanding per worker, so this only has to be a power of two >= 2.
///
/// Each worker has its own completion ring (rather than one ring shared by all workers) so that a
/// worker killed in the middle of a push can only wedge its own ring, which the pool resets when
/// it restarts the worker; in a shared multi-producer ring, a cell claimed by a producer that dies
/// before publishing it blocks every later completion of every worker.
pub const COMMAND_RING_CAPACITY: usize = 4;
/// Default size of each worker's info arena in bytes (64 KiB): room for the pickled infos of a
/// few hundred envs with a handful of scalar keys each. A payload larger than the arena travels
/// on the control socket instead. Change it with [`Layout::with_info_arena`].
pub const DEFAULT_INFO_ARENA: usize = 64 * 1024;

/// The dtype and shape of one env's element of a batch array.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ArraySpec {
    /// Element type.
    pub dtype: DType,
    /// Shape of one env's element (empty for a scalar), at most [`MAX_NDIM`] dimensions.
    pub shape: Vec<usize>,
}

impl ArraySpec {
    /// A spec of `dtype` and `shape`.
    pub fn new(dtype: DType, shape: &[usize]) -> ArraySpec {
        ArraySpec { dtype, shape: shape.to_vec() }
    }
    /// Number of elements of one env's array (1 for a scalar).
    pub fn elements(&self) -> usize {
        self.checked_bytes().expect("array size fits in usize") / self.dtype.size()
    }
    /// Bytes of one env's array.
    ///
    /// # Panics
    /// On overflow, which a spec accepted by [`Layout::new`] cannot have (it checks
    /// [`ArraySpec::checked_bytes`]).
    pub fn bytes(&self) -> usize {
        self.checked_bytes().expect("array size fits in usize")
    }
    /// Bytes of one env's array, or `None` when the size overflows `usize` (a corrupt header).
    pub fn checked_bytes(&self) -> Option<usize> {
        self.shape.iter().try_fold(self.dtype.size(), |acc, &d| acc.checked_mul(d))
    }
}

impl std::fmt::Display for ArraySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.shape)
    }
}

/// Why a layout cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// A count that must be positive is zero: names the count.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// More workers than envs.
    #[error("num_workers ({num_workers}) exceeds num_envs ({num_envs})")]
    MoreWorkersThanEnvs {
        /// Requested workers.
        num_workers: usize,
        /// Requested envs.
        num_envs: usize,
    },
    /// An array has more than [`MAX_NDIM`] dimensions: names the array.
    #[error("{0} has {1} dimensions; at most {MAX_NDIM} are supported")]
    TooManyDims(&'static str, usize),
    /// More than [`MAX_LEAVES`] observation and action leaves.
    #[error("{0} observation and action leaves; at most {MAX_LEAVES} are supported")]
    TooManyLeaves(usize),
    /// The reward dtype is neither f32 nor f64.
    #[error("reward dtype must be float32 or float64, got {0}")]
    RewardDType(DType),
    /// The segment would exceed `usize` or the header's `u32`/`u64` fields.
    #[error("the segment would be larger than the address space")]
    TooLarge,
}

/// Offsets (bytes from the start of a slot) of the arrays of one slot.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SlotOffsets {
    /// `obs[k][num_envs, *obs[k].shape]`, one per observation leaf.
    pub obs: Vec<usize>,
    /// `reward[num_envs]`.
    pub reward: usize,
    /// `terminated[num_envs]` u8.
    pub terminated: usize,
    /// `truncated[num_envs]` u8.
    pub truncated: usize,
    /// `action[k][num_envs, *action[k].shape]`, one per action leaf.
    pub action: Vec<usize>,
    /// `seed[num_envs]` u64.
    pub seed: usize,
    /// `seed_flags[num_envs]` u8.
    pub seed_flags: usize,
}

/// The complete layout of a pool's segment. Two layouts built from the same arguments are equal
/// on every machine running the same build; the header records enough to rebuild it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Number of envs in the pool.
    pub num_envs: usize,
    /// Number of worker processes.
    pub num_workers: usize,
    /// Number of data slots (>= 2: a worker writes step t+1 while step t is still read).
    pub depth: usize,
    /// One env's observation leaves (empty: observations travel pickled).
    pub obs: Vec<ArraySpec>,
    /// One env's action leaves (empty: actions travel pickled).
    pub action: Vec<ArraySpec>,
    /// Reward dtype (`F32` or `F64`).
    pub reward: DType,
    commands: usize,
    command_stride: usize,
    metrics: usize,
    /// Bytes of each worker's info arena (0: no arenas, every payload goes on the socket).
    info_arena: usize,
    info_arenas: usize,
    info_arena_stride: usize,
    slots: usize,
    slot_stride: usize,
    slot: SlotOffsets,
    total: usize,
}

const fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// `x` rounded up to a multiple of `a`, or `TooLarge` on overflow (sizes from a header are not
/// trusted: fuzzing found headers whose sizes overflow).
fn checked_align_up(x: usize, a: usize) -> Result<usize, LayoutError> {
    x.checked_next_multiple_of(a).ok_or(LayoutError::TooLarge)
}

impl Layout {
    /// The layout of a single-leaf observation and a single-leaf action (a Box or Discrete each).
    ///
    /// # Errors
    /// As [`Layout::new`].
    pub fn single(
        num_envs: usize,
        num_workers: usize,
        depth: usize,
        obs: ArraySpec,
        action: ArraySpec,
        reward: DType,
    ) -> Result<Layout, LayoutError> {
        Layout::new(num_envs, num_workers, depth, vec![obs], vec![action], reward)
    }

    /// Computes the layout of `num_envs` envs over `num_workers` workers with `depth` slots.
    ///
    /// # Errors
    /// [`LayoutError`] when a count is zero, workers outnumber envs, an array has too many
    /// dimensions, there are too many leaves, or the reward dtype is not a float.
    pub fn new(
        num_envs: usize,
        num_workers: usize,
        depth: usize,
        obs: Vec<ArraySpec>,
        action: Vec<ArraySpec>,
        reward: DType,
    ) -> Result<Layout, LayoutError> {
        Layout::build(num_envs, num_workers, depth, obs, action, reward, DEFAULT_INFO_ARENA)
    }

    /// This layout with info arenas of `bytes` bytes per worker (0: none; every completion
    /// payload then travels on the control socket). See [`crate::InfoArena`].
    ///
    /// # Errors
    /// [`LayoutError::TooLarge`] when the segment would overflow.
    pub fn with_info_arena(self, bytes: usize) -> Result<Layout, LayoutError> {
        Layout::build(self.num_envs, self.num_workers, self.depth, self.obs, self.action, self.reward, bytes)
    }

    fn build(
        num_envs: usize,
        num_workers: usize,
        depth: usize,
        obs: Vec<ArraySpec>,
        action: Vec<ArraySpec>,
        reward: DType,
        info_arena: usize,
    ) -> Result<Layout, LayoutError> {
        for (what, n) in [("num_envs", num_envs), ("num_workers", num_workers)] {
            if n == 0 {
                return Err(LayoutError::Zero(what));
            }
        }
        if depth < 2 {
            return Err(LayoutError::Zero("depth - 1 (depth must be >= 2)"));
        }
        if num_workers > num_envs {
            return Err(LayoutError::MoreWorkersThanEnvs { num_workers, num_envs });
        }
        if obs.len() + action.len() > MAX_LEAVES {
            return Err(LayoutError::TooManyLeaves(obs.len() + action.len()));
        }
        let leaves = obs.iter().map(|s| ("observation", s)).chain(action.iter().map(|s| ("action", s)));
        for (what, spec) in leaves {
            if spec.shape.len() > MAX_NDIM {
                return Err(LayoutError::TooManyDims(what, spec.shape.len()));
            }
        }
        if reward != DType::F32 && reward != DType::F64 {
            return Err(LayoutError::RewardDType(reward));
        }
        let commands = HEADER_REGION + Wakeup::MEM_SIZE;
        let command_stride = align_up(
            Wakeup::MEM_SIZE
                + align_up(Ring::<Command>::mem_size(COMMAND_RING_CAPACITY), 128)
                + Ring::<Completion>::mem_size(COMMAND_RING_CAPACITY),
            128,
        );
        for spec in obs.iter().chain(&action) {
            spec.checked_bytes().ok_or(LayoutError::TooLarge)?;
        }
        let too_large = || LayoutError::TooLarge;
        let region_end = num_workers.checked_mul(command_stride).and_then(|r| r.checked_add(commands));
        let metrics = checked_align_up(region_end.ok_or_else(too_large)?, 128)?;
        let metrics_size =
            num_workers.checked_mul(WorkerMetrics::MEM_SIZE).and_then(|m| m.checked_add(PoolMetrics::MEM_SIZE));
        let info_arenas =
            checked_align_up(metrics.checked_add(metrics_size.ok_or_else(too_large)?).ok_or_else(too_large)?, 4096)?;
        let info_arena_stride = checked_align_up(info_arena, 4096)?;
        let arenas_size = num_workers.checked_mul(info_arena_stride).ok_or_else(too_large)?;
        let slots = checked_align_up(info_arenas.checked_add(arenas_size).ok_or_else(too_large)?, 4096)?;
        let mut cursor = 0usize;
        let mut take = |bytes: usize| -> Result<usize, LayoutError> {
            let at = cursor;
            cursor = checked_align_up(at.checked_add(bytes).ok_or(LayoutError::TooLarge)?, ARRAY_ALIGN)?;
            Ok(at)
        };
        let per = |b: usize| num_envs.checked_mul(b).ok_or(LayoutError::TooLarge);
        let obs_offsets = obs.iter().map(|o| take(per(o.bytes())?)).collect::<Result<Vec<_>, _>>()?;
        let reward_at = take(per(reward.size())?)?;
        let terminated = take(num_envs)?;
        let truncated = take(num_envs)?;
        let action_offsets = action.iter().map(|a| take(per(a.bytes())?)).collect::<Result<Vec<_>, _>>()?;
        let slot = SlotOffsets {
            obs: obs_offsets,
            reward: reward_at,
            terminated,
            truncated,
            action: action_offsets,
            seed: take(per(8)?)?,
            seed_flags: take(num_envs)?,
        };
        let slot_stride = checked_align_up(cursor, 4096)?;
        let total = slot_stride.checked_mul(depth).and_then(|s| s.checked_add(slots)).ok_or(LayoutError::TooLarge)?;
        Ok(Layout {
            num_envs,
            num_workers,
            depth,
            obs,
            action,
            reward,
            commands,
            command_stride,
            metrics,
            info_arena,
            info_arenas,
            info_arena_stride,
            slots,
            slot_stride,
            slot,
            total,
        })
    }

    /// The envs of `worker`: a contiguous range, the first `num_envs % num_workers` workers
    /// holding one more (`numpy.array_split`'s rule).
    pub fn worker_envs(&self, worker: usize) -> Range<usize> {
        let base = self.num_envs / self.num_workers;
        let extra = self.num_envs % self.num_workers;
        let start = worker * base + worker.min(extra);
        start..start + base + usize::from(worker < extra)
    }

    /// The worker that steps env `env`.
    pub fn worker_of(&self, env: usize) -> usize {
        (0..self.num_workers).find(|&w| self.worker_envs(w).contains(&env)).unwrap_or(0)
    }

    /// Total segment size in bytes (a multiple of 4096).
    pub fn total_size(&self) -> usize {
        self.total
    }
    /// Offset of the main process's wake-up word.
    pub fn completion_wakeup_offset(&self) -> usize {
        HEADER_REGION
    }
    /// Offset of worker `k`'s command ring.
    pub fn command_ring_offset(&self, worker: usize) -> usize {
        self.command_offset(worker) + Wakeup::MEM_SIZE
    }
    /// Offset of worker `k`'s completion ring.
    pub fn completion_ring_offset(&self, worker: usize) -> usize {
        self.command_ring_offset(worker) + align_up(Ring::<Command>::mem_size(COMMAND_RING_CAPACITY), 128)
    }
    /// Offset of worker `k`'s region: its wake-up word, then its command and completion rings.
    pub fn command_offset(&self, worker: usize) -> usize {
        self.commands + worker * self.command_stride
    }
    /// Bytes between two workers' command regions.
    pub fn command_stride(&self) -> usize {
        self.command_stride
    }
    /// Offset of the main process's metrics ([`PoolMetrics`]).
    pub fn pool_metrics_offset(&self) -> usize {
        self.metrics
    }
    /// Offset of worker `k`'s metrics ([`WorkerMetrics`]).
    pub fn worker_metrics_offset(&self, worker: usize) -> usize {
        self.metrics + PoolMetrics::MEM_SIZE + worker * WorkerMetrics::MEM_SIZE
    }
    /// Bytes of each worker's info arena (0: none).
    pub fn info_arena_bytes(&self) -> usize {
        self.info_arena
    }
    /// Offset of worker `k`'s info arena ([`Layout::info_arena_bytes`] bytes).
    pub fn info_arena_offset(&self, worker: usize) -> usize {
        self.info_arenas + worker * self.info_arena_stride
    }
    /// Offset of data slot `s`.
    pub fn slot_offset(&self, slot: usize) -> usize {
        self.slots + slot * self.slot_stride
    }
    /// Bytes between two slots (a multiple of 4096).
    pub fn slot_stride(&self) -> usize {
        self.slot_stride
    }
    /// Offsets of the arrays inside a slot.
    pub fn slot_arrays(&self) -> &SlotOffsets {
        &self.slot
    }
    /// Offset of the first slot.
    pub fn slots_offset(&self) -> usize {
        self.slots
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(num_envs: usize, num_workers: usize) -> Layout {
        Layout::new(
            num_envs,
            num_workers,
            2,
            vec![ArraySpec::new(DType::F32, &[3, 5]), ArraySpec::new(DType::U8, &[7])],
            vec![ArraySpec::new(DType::F64, &[2])],
            DType::F32,
        )
        .unwrap()
    }

    #[test]
    fn worker_ranges_cover_all_envs_once_like_array_split() {
        for envs in 1..40 {
            for workers in 1..=envs.min(9) {
                let l = layout(envs, workers);
                let mut next = 0;
                for w in 0..workers {
                    let r = l.worker_envs(w);
                    assert_eq!(r.start, next);
                    assert!(r.len() == envs / workers || r.len() == envs / workers + 1);
                    for e in r.clone() {
                        assert_eq!(l.worker_of(e), w);
                    }
                    next = r.end;
                }
                assert_eq!(next, envs);
            }
        }
    }

    #[test]
    fn regions_do_not_overlap_and_fit() {
        let l = layout(13, 4);
        let s = l.slot_arrays();
        let arrays = [
            (s.obs[0], 13 * 60),
            (s.obs[1], 13 * 7),
            (s.reward, 13 * 4),
            (s.terminated, 13),
            (s.truncated, 13),
            (s.action[0], 13 * 16),
            (s.seed, 13 * 8),
            (s.seed_flags, 13),
        ];
        for w in arrays.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "{w:?}");
            assert_eq!(w[1].0 % ARRAY_ALIGN, 0);
        }
        let last = arrays[arrays.len() - 1];
        assert!(last.0 + last.1 <= l.slot_stride());
        assert!(l.command_offset(3) + l.command_stride() <= l.pool_metrics_offset());
        assert!(l.worker_metrics_offset(3) + WorkerMetrics::MEM_SIZE <= l.info_arena_offset(0));
        assert_eq!(l.info_arena_bytes(), DEFAULT_INFO_ARENA);
        for w in 0..3 {
            assert!(l.info_arena_offset(w) + l.info_arena_bytes() <= l.info_arena_offset(w + 1));
        }
        assert!(l.info_arena_offset(3) + l.info_arena_bytes() <= l.slots_offset());
        let none = l.clone().with_info_arena(0).unwrap();
        assert_eq!(none.info_arena_bytes(), 0);
        assert_eq!(none.slots_offset(), none.info_arena_offset(0));
        assert_eq!(
            Layout::new(1, 1, 2, vec![], vec![], DType::F32).unwrap().with_info_arena(usize::MAX),
            Err(LayoutError::TooLarge)
        );
        assert_eq!(l.total_size(), l.slot_offset(2));
    }

    #[test]
    fn bad_counts_are_named() {
        let obs = ArraySpec::new(DType::F32, &[1]);
        let act = ArraySpec::new(DType::I64, &[]);
        let e = Layout::single(0, 1, 2, obs.clone(), act.clone(), DType::F32).unwrap_err();
        assert!(e.to_string().contains("num_envs"));
        let e = Layout::single(2, 3, 2, obs.clone(), act.clone(), DType::F32).unwrap_err();
        assert_eq!(e, LayoutError::MoreWorkersThanEnvs { num_workers: 3, num_envs: 2 });
        assert!(Layout::single(2, 1, 1, obs.clone(), act.clone(), DType::F32).is_err());
        assert!(Layout::single(2, 1, 2, obs.clone(), act.clone(), DType::I32).is_err());
        let e = Layout::new(2, 1, 2, vec![obs; 30], vec![act; 3], DType::F32).unwrap_err();
        assert_eq!(e, LayoutError::TooManyLeaves(33));
    }

    #[test]
    fn a_pickled_layout_has_no_leaves_and_still_holds_rewards() {
        let l = Layout::new(3, 1, 2, vec![], vec![], DType::F64).unwrap();
        assert!(l.slot_arrays().obs.is_empty() && l.slot_arrays().action.is_empty());
        assert!(l.slot_arrays().seed_flags + 3 <= l.slot_stride());
    }
}
