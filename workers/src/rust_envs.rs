//! Hosting envs that implement [`Env`] in a worker: typed, in place, no allocation per step.
//!
//! Each env reads its action row and writes its observation rows of the slot directly
//! (`bytemuck` casts; several leaves go through per-env buffers). A panic inside an env is, by
//! default ([`OnPanic::Report`]), a [`RemoteError`] of kind `"panic"` with message, location and
//! env id, and that env's episode is truncated; with [`OnPanic::Exit`] (Python's
//! `on_worker_failure="restart"`) the worker leaves it as its last words
//! ([`panic::last_words`]) and exits with status 101 so the pool restarts it. Infos go with the
//! completion as one typed message ([`crate::info::encode`]).
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

use crate::env::declared_spaces;
use crate::host::{seed_of, write_step, Autoreset, EnvHost};
use crate::leaves::LeafBuf;
use crate::{panic, Ctx, Env, EnvRng, Info, Leaves, Step};
use rand::SeedableRng;
use ringenv_runtime::{Array, ArraySpec, Layout, RemoteError, SlotView};
use serde_json::Value;
use std::ops::Range;

/// What a worker does when an env panics.
///
/// ```
/// use ringenv_worker::rust_envs::OnPanic;
/// assert_eq!(OnPanic::default(), OnPanic::Report);
/// assert_eq!(serde_json::from_str::<OnPanic>("\"exit\"").unwrap(), OnPanic::Exit);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnPanic {
    /// Report the panic as the command's error and go on serving (the env's episode is
    /// truncated).
    #[default]
    Report,
    /// Print the panic on stderr and exit with status [`OnPanic::EXIT_STATUS`]: the pool sees a
    /// dead worker (and restarts it under a restart policy).
    Exit,
}

impl OnPanic {
    /// The exit status of a worker that exits on a panic (that of a Rust program that panics).
    pub const EXIT_STATUS: i32 = 101;
}

/// A worker's group of Rust envs, env `k` of the group having global id `env_ids.start + k`.
///
/// ```
/// use ringenv_runtime::{Layout, Segment};
/// use ringenv_worker::{envs::CartPole, rust_envs::OnPanic, Env, EnvHost, RustEnvs};
/// let env = CartPole::new();
/// let (obs, act) = (env.observation_space().leaves(), env.action_space().leaves());
/// let layout = Layout::new(2, 1, 2, obs, act, ringenv_worker::DType::F32).unwrap();
/// let mut segment = Segment::create(layout.clone()).unwrap();
/// let mut host = RustEnvs::new(vec![env, CartPole::new()], 0..2, &layout).unwrap().on_panic(OnPanic::Report);
/// let mut slot = segment.slot_mut(0);
/// assert_eq!(host.reset(&mut slot, 0, None).unwrap(), None); // no infos: no message
/// let obs: &[f32] = bytemuck::cast_slice(slot.rows(ringenv_runtime::Array::Obs(0), 0..2));
/// assert!(obs.iter().all(|v| v.abs() <= 0.05));
/// ```
pub struct RustEnvs<E: Env> {
    envs: Vec<E>,
    env_ids: Range<usize>,
    autoreset: Autoreset,
    rngs: Vec<EnvRng>,
    /// One env's action row, copied out of the slot (so that the obs rows can be borrowed).
    action: LeafBuf,
    /// Per env, one buffer per observation leaf; empty when the observation is a single leaf
    /// (written in place).
    obs: Vec<Vec<LeafBuf>>,
    info: Info,
    /// Non-empty infos of the current command, by global env id.
    infos: Vec<(usize, Info)>,
    on_panic: OnPanic,
}

fn mismatch(what: &str, env: &[ArraySpec], segment: &[ArraySpec]) -> RemoteError {
    let list = |s: &[ArraySpec]| s.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    RemoteError {
        kind: "SpaceMismatch".into(),
        message: format!("the env's {what} is [{}] but the pool's segment holds [{}]", list(env), list(segment)),
        ..Default::default()
    }
}

/// The error of a panic in env `env`.
pub(crate) fn panic_error(env: usize, p: panic::Panic) -> RemoteError {
    let at = p.location.as_deref().unwrap_or("an unknown location");
    RemoteError {
        env_id: Some(env as u64),
        kind: "panic".into(),
        message: p.to_string(),
        traceback: format!("env {env} panicked at {at}:\n{}\n{}", p.message, p.backtrace).trim_end().to_string(),
        ..Default::default()
    }
}

impl<E: Env> RustEnvs<E> {
    /// Hosts `envs` as the rows `env_ids` of a segment with `layout`.
    ///
    /// # Errors
    /// A [`RemoteError`] of kind `"SpaceMismatch"` when the envs' spaces or element types differ
    /// from the layout's arrays or from each other, `"InvalidSpace"` for a malformed space, or
    /// `"InvalidArgument"` when `envs.len() != env_ids.len()`.
    pub fn new(envs: Vec<E>, env_ids: Range<usize>, layout: &Layout) -> Result<RustEnvs<E>, RemoteError> {
        if envs.len() != env_ids.len() || env_ids.end > layout.num_envs {
            return Err(RemoteError {
                kind: "InvalidArgument".into(),
                message: format!("{} envs for env ids {env_ids:?} of {}", envs.len(), layout.num_envs),
                ..Default::default()
            });
        }
        let mut first = None;
        for (k, env) in envs.iter().enumerate() {
            let (obs, act) = declared_spaces(env).map_err(|e| RemoteError {
                env_id: Some((env_ids.start + k) as u64),
                kind: "InvalidSpace".into(),
                message: e.to_string(),
                ..Default::default()
            })?;
            let (obs_leaves, act_leaves) = (obs.leaves(), act.leaves());
            if layout.obs != obs_leaves {
                return Err(mismatch("observation", &obs_leaves, &layout.obs));
            }
            if layout.action != act_leaves {
                return Err(mismatch("action", &act_leaves, &layout.action));
            }
            match &first {
                None => first = Some((obs, act)),
                Some(spaces) if *spaces != (obs, act) => {
                    return Err(RemoteError {
                        env_id: Some((env_ids.start + k) as u64),
                        kind: "SpaceMismatch".into(),
                        message: format!(
                            "env {} declares other spaces than env {}; every env of a vector env must have the \
                             same spaces",
                            env_ids.start + k,
                            env_ids.start
                        ),
                        ..Default::default()
                    })
                }
                Some(_) => {}
            }
        }
        let per_env_obs = || layout.obs.iter().map(|leaf| LeafBuf::new(leaf.bytes())).collect();
        let obs = if E::Obs::COUNT == 1 { Vec::new() } else { envs.iter().map(|_| per_env_obs()).collect() };
        Ok(RustEnvs {
            autoreset: Autoreset::new(envs.len()),
            rngs: envs.iter().map(|_| EnvRng::from_os_rng()).collect(),
            action: LeafBuf::new(layout.action[0].bytes()),
            obs,
            info: Info::default(),
            infos: Vec::with_capacity(envs.len()),
            envs,
            env_ids,
            on_panic: OnPanic::Report,
        })
    }

    /// Sets what happens when an env panics (default [`OnPanic::Report`]).
    pub fn on_panic(mut self, on_panic: OnPanic) -> RustEnvs<E> {
        self.on_panic = on_panic;
        self
    }

    /// The error of a panic in env `id`, or, under [`OnPanic::Exit`], the end of the process.
    fn panicked(&self, id: usize, p: panic::Panic) -> RemoteError {
        let error = panic_error(id, p);
        if self.on_panic == OnPanic::Exit {
            // The pool reports this text (with the location) as the death's last error.
            panic::last_words(&format!("{}: {} (env {id})", error.kind, error.message));
            eprintln!("ringenv worker: {error}\nringenv worker: exiting with status {}", OnPanic::EXIT_STATUS);
            std::process::exit(OnPanic::EXIT_STATUS);
        }
        error
    }

    /// Runs `f` (a reset or step of env `k`, given its observation views) with the observation
    /// written in place or through the env's buffers, then records the env's info. Returns `f`'s
    /// value, or the panic it raised.
    fn call<R>(
        &mut self,
        view: &mut SlotView<'_>,
        k: usize,
        f: impl FnOnce(&mut E, crate::ObsMut<'_, E>, &mut EnvRng, &mut Info, &LeafBuf) -> R,
    ) -> Result<R, panic::Panic> {
        let id = self.env_ids.start + k;
        let (env, rng, info, action) = (&mut self.envs[k], &mut self.rngs[k], &mut self.info, &self.action);
        info.clear();
        let result = if self.obs.is_empty() {
            let rows = view.rows_mut(Array::Obs(0), id..id + 1);
            panic::catch(|| f(env, E::Obs::view_mut(&mut std::iter::once(rows)), rng, info, action))
        } else {
            let bufs = &mut self.obs[k];
            let result = panic::catch(|| {
                f(env, E::Obs::view_mut(&mut bufs.iter_mut().map(LeafBuf::bytes_mut)), rng, info, action)
            });
            for (leaf, buf) in bufs.iter().enumerate() {
                view.rows_mut(Array::Obs(leaf), id..id + 1).copy_from_slice(buf.bytes());
            }
            result
        };
        if !self.info.is_empty() {
            self.infos.push((id, self.info));
        }
        result
    }

    fn message(&mut self) -> Option<Vec<u8>> {
        let message = (!self.infos.is_empty()).then(|| crate::info::encode(&self.infos));
        self.infos.clear();
        message
    }
}

impl<E: Env> EnvHost for RustEnvs<E> {
    fn reset(
        &mut self,
        view: &mut SlotView<'_>,
        _slot: usize,
        options: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, RemoteError> {
        let options = match options.map(serde_json::from_slice::<Value>).transpose() {
            Ok(o) => o.unwrap_or(Value::Null),
            Err(e) => {
                let message = format!("the reset options of a Rust env are not JSON: {e}");
                return Err(RemoteError { kind: "ValueError".into(), message, ..Default::default() });
            }
        };
        let mut first_error = None;
        for k in 0..self.envs.len() {
            let id = self.env_ids.start + k;
            if view.seed_flags(id).skips_reset() {
                continue; // not in the reset mask: the env keeps its state and its last observation
            }
            let seed = seed_of(view, id);
            if let Some(seed) = seed {
                self.rngs[k] = EnvRng::seed_from_u64(seed);
            }
            let options = &options;
            let result =
                self.call(view, k, |env, obs, rng, info, _| env.reset(obs, &mut Ctx::new(rng, seed, options, info)));
            self.autoreset.record(k, false, false);
            if let Err(p) = result {
                let error = self.panicked(id, p);
                first_error.get_or_insert(error);
                self.autoreset.record(k, false, true);
            }
            write_step(view, id, 0.0, false, false);
        }
        let message = self.message();
        first_error.map_or(Ok(message), Err)
    }

    fn step(
        &mut self,
        view: &mut SlotView<'_>,
        _slot: usize,
        actions: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, RemoteError> {
        if actions.is_some() {
            return Err(RemoteError {
                kind: "ProtocolError".into(),
                message: "Rust envs take their actions from shared memory, but this step sent them pickled".into(),
                ..Default::default()
            });
        }
        let mut first_error = None;
        let null = Value::Null;
        for k in 0..self.envs.len() {
            let id = self.env_ids.start + k;
            let result = if self.autoreset.take(k) {
                self.call(view, k, |env, obs, rng, info, _| {
                    env.reset(obs, &mut Ctx::new(rng, None, &null, info));
                    Step::default()
                })
            } else {
                self.action.bytes_mut().copy_from_slice(view.rows(Array::Action(0), id..id + 1));
                self.call(view, k, |env, obs, rng, info, action| {
                    let action = E::Action::view(&mut std::iter::once(action.bytes()));
                    env.step(action, obs, &mut Ctx::new(rng, None, &null, info))
                })
            };
            let step = match result {
                Ok(step) => step,
                Err(p) => {
                    let error = self.panicked(id, p);
                    first_error.get_or_insert(error);
                    Step { reward: 0.0, terminated: false, truncated: true }
                }
            };
            self.autoreset.record(k, step.terminated, step.truncated);
            write_step(view, id, f64::from(step.reward), step.terminated, step.truncated);
        }
        let message = self.message();
        first_error.map_or(Ok(message), Err)
    }
}
