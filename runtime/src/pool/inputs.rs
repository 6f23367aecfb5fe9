//! Writing a command's inputs into the slots: the reset mask, and actions of a single flat action
//! leaf checked against bounds (the seeds: [`Pool::write_seeds`]).

use crate::{ActionBounds, Array, Pool, SubmitError};
use std::ops::Range;

impl Pool {
    /// Marks the envs whose `mask` entry is false as not to be reset by the next reset, in their
    /// worker's next slot (after [`Pool::write_seeds`], which clears the marks). Nothing in a
    /// `fork` child, as [`Pool::write_seeds`].
    ///
    /// # Panics
    /// When `mask.len() != num_envs`.
    pub fn write_reset_mask(&mut self, mask: &[bool]) {
        assert_eq!(mask.len(), self.segment.layout().num_envs, "one mask entry per env");
        if !self.is_owner() {
            return;
        }
        for w in 0..self.lanes.len() {
            let envs = self.segment.layout().worker_envs(w);
            let mut view = self.segment.slot_mut(self.worker_slot[w]);
            for env in envs.filter(|&env| !mask[env]) {
                let flags = view.seed_flags(env).with_skip_reset();
                view.set_seed_flags(env, flags);
            }
        }
    }

    /// Checks `actions` (rows of actions one after the other, in C order, in the single action
    /// leaf's dtype) against `bounds` and, when every value passes, copies them into the action
    /// rows of each `(slot, envs)` run of `runs` in turn (the first `envs.len()` rows into the
    /// first run, and so on); returns whether it wrote them. Nothing is written when a value is
    /// refused: the caller finds and names it.
    ///
    /// # Errors
    /// [`SubmitError::InvalidArgument`] when the layout has no single action leaf, a run's slot is
    /// not a slot or its envs are not within the pool's, or `actions` is not one action per env of
    /// the runs, or a worker of those envs has a command in flight (it may be reading them); the
    /// errors of every operation's first check.
    pub fn write_actions(
        &mut self,
        runs: &[(usize, Range<usize>)],
        actions: &[u8],
        bounds: &ActionBounds,
    ) -> Result<bool, SubmitError> {
        self.usable()?;
        let layout = self.segment.layout();
        let (n, depth) = (layout.num_envs, layout.depth);
        let invalid = |why: String| Err(SubmitError::InvalidArgument(why));
        let [leaf] = layout.action.as_slice() else {
            return invalid("this pool's actions do not cross through shared memory".into());
        };
        let (dtype, elements) = (leaf.dtype, leaf.elements());
        let row = elements * dtype.size();
        let mut count = 0;
        for (slot, envs) in runs {
            if *slot >= depth {
                return invalid(format!("no slot {slot}: the pool has {depth}"));
            }
            if envs.start > envs.end || envs.end > n {
                return invalid(format!("envs {}..{} are not envs of this pool ({n} envs)", envs.start, envs.end));
            }
            count += envs.len();
        }
        if count * row != actions.len() {
            return invalid(format!(
                "{} bytes of actions are not one action for each of the {count} envs of the runs ({elements} {dtype}, \
                 {row} bytes each)",
                actions.len()
            ));
        }
        for (_, envs) in runs.iter().filter(|(_, envs)| !envs.is_empty()) {
            let mut workers = layout.worker_of(envs.start)..layout.worker_of(envs.end - 1) + 1;
            if self.is_pending() || workers.any(|w| self.is_busy(w)) {
                return invalid(format!(
                    "the actions of envs {}..{} cannot be written while their workers have a command in flight",
                    envs.start, envs.end
                ));
            }
        }
        if bounds.first_outside(dtype, actions).is_some() {
            return Ok(false);
        }
        let mut at = 0;
        for (slot, envs) in runs {
            let bytes = envs.len() * row;
            self.segment
                .slot_mut(*slot)
                .rows_mut(Array::Action(0), envs.clone())
                .copy_from_slice(&actions[at..at + bytes]);
            at += bytes;
        }
        Ok(true)
    }
}
