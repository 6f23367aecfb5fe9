//! Hosting envs that implement [`Env`] in a worker: typed, in-place, no allocation per step.
//!
//! Each env reads its action row and writes its observation row of the slot directly (through
//! `bytemuck` casts of the segment's bytes, whose rows are aligned to their dtype by the layout).
//! A panic inside an env is caught and reported as a [`RemoteError`] of kind `"panic"` carrying
//! the panic message and the env id.
//!
//! ```
//! use ringenv_runtime::{ArraySpec, DType, Layout};
//! use ringenv_worker::{envs::CartPole, RustEnvs};
//! let layout = Layout::single(2, 1, 2, ArraySpec::new(DType::F32, &[4]),
//!                             ArraySpec::new(DType::I64, &[]), DType::F32).unwrap();
//! assert!(RustEnvs::new(vec![CartPole::default(), CartPole::default()], 0..2, &layout).is_ok());
//! // A layout that does not match the env's spaces is refused, naming both sides.
//! let wrong = Layout::single(2, 1, 2, ArraySpec::new(DType::F64, &[4]),
//!                            ArraySpec::new(DType::I64, &[]), DType::F32).unwrap();
//! let err = RustEnvs::new(vec![CartPole::default(), CartPole::default()], 0..2, &wrong).err().unwrap();
//! assert!(err.message.contains("float32[4]"));
//! ```

use crate::host::{seed_of, write_step, Autoreset, EnvHost};
use crate::Env;
use ringenv_runtime::{Array, ArraySpec, Element, Layout, RemoteError, SlotView};
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A worker's group of Rust envs, env `k` of the group having global id `env_ids.start + k`.
pub struct RustEnvs<E: Env> {
    envs: Vec<E>,
    env_ids: Range<usize>,
    autoreset: Autoreset,
    action: Vec<E::Action>,
}

fn mismatch(what: &str, env: &ArraySpec, segment: &[ArraySpec]) -> RemoteError {
    let segment = segment.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    RemoteError {
        kind: "SpaceMismatch".into(),
        message: format!("the env's {what} is {env} but the pool's segment holds [{segment}]"),
        ..Default::default()
    }
}

fn panic_error(env: usize, payload: Box<dyn std::any::Any + Send>) -> RemoteError {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".into());
    RemoteError { env_id: Some(env as u64), kind: "panic".into(), message, ..Default::default() }
}

impl<E: Env> RustEnvs<E> {
    /// Hosts `envs` as the rows `env_ids` of a segment with `layout`.
    ///
    /// # Errors
    /// A [`RemoteError`] of kind `"SpaceMismatch"` when the envs' spaces or element types differ
    /// from the layout's arrays, or `"InvalidArgument"` when `envs.len() != env_ids.len()`.
    pub fn new(envs: Vec<E>, env_ids: Range<usize>, layout: &Layout) -> Result<RustEnvs<E>, RemoteError> {
        if envs.len() != env_ids.len() || env_ids.end > layout.num_envs {
            return Err(RemoteError {
                kind: "InvalidArgument".into(),
                message: format!("{} envs for env ids {env_ids:?} of {}", envs.len(), layout.num_envs),
                ..Default::default()
            });
        }
        for env in &envs {
            let (obs, act) = (env.observation_space().array_spec(), env.action_space().array_spec());
            if layout.obs != [obs.clone()] || obs.dtype != E::Obs::DTYPE {
                return Err(mismatch("observation", &obs, &layout.obs));
            }
            if layout.action != [act.clone()] || act.dtype != E::Action::DTYPE {
                return Err(mismatch("action", &act, &layout.action));
            }
        }
        let action = vec![bytemuck::Zeroable::zeroed(); layout.action[0].elements()];
        Ok(RustEnvs { autoreset: Autoreset::new(envs.len()), envs, env_ids, action })
    }
}

impl<E: Env> EnvHost for RustEnvs<E> {
    fn reset(
        &mut self,
        view: &mut SlotView<'_>,
        _slot: usize,
        _options: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, RemoteError> {
        self.autoreset.clear();
        let mut first_error = None;
        for (k, env) in self.envs.iter_mut().enumerate() {
            let id = self.env_ids.start + k;
            let seed = seed_of(view, id);
            let obs: &mut [E::Obs] = bytemuck::cast_slice_mut(view.rows_mut(Array::Obs(0), id..id + 1));
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| env.reset(seed, obs))) {
                first_error.get_or_insert(panic_error(id, p));
            }
            write_step(view, id, 0.0, false, false);
        }
        first_error.map_or(Ok(None), Err)
    }

    fn step(
        &mut self,
        view: &mut SlotView<'_>,
        _slot: usize,
        _actions: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, RemoteError> {
        let mut first_error = None;
        for (k, env) in self.envs.iter_mut().enumerate() {
            let id = self.env_ids.start + k;
            let result = if self.autoreset.take(k) {
                let obs: &mut [E::Obs] = bytemuck::cast_slice_mut(view.rows_mut(Array::Obs(0), id..id + 1));
                catch_unwind(AssertUnwindSafe(|| env.reset(None, obs))).map(|()| Default::default())
            } else {
                self.action.copy_from_slice(bytemuck::cast_slice(view.rows(Array::Action(0), id..id + 1)));
                let obs: &mut [E::Obs] = bytemuck::cast_slice_mut(view.rows_mut(Array::Obs(0), id..id + 1));
                let action = &self.action;
                catch_unwind(AssertUnwindSafe(|| env.step(action, obs)))
            };
            let step = match result {
                Ok(s) => s,
                Err(p) => {
                    first_error.get_or_insert(panic_error(id, p));
                    crate::Step { reward: 0.0, terminated: false, truncated: true }
                }
            };
            self.autoreset.record(k, step.terminated, step.truncated);
            write_step(view, id, f64::from(step.reward), step.terminated, step.truncated);
        }
        first_error.map_or(Ok(None), Err)
    }
}
