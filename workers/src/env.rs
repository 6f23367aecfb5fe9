//! The `Env` trait a Rust environment implements to run in a ringenv worker.
//!
//! An env writes its observation straight into the slices it is given: rows of the batch arrays
//! in shared memory, so nothing is allocated or copied per step. The worker owns autoreset
//! (Gymnasium's next-step mode), seeding and error reporting; an env only resets and steps. Each
//! env gets its own random number generator in the [`Ctx`], re-seeded by the worker on every
//! seeded reset (env `i` of a vector reset with `seed` gets `seed + i`, as Gymnasium seeds its
//! sub-envs), so an episode is a function of its seed.
//!
//! ```
//! use ringenv_worker::{Ctx, DType, Env, LocalEnv, Space, Step};
//!
//! /// Counts up to 3, then terminates.
//! struct Counter { n: f32 }
//! impl Env for Counter {
//!     type Obs = f32;
//!     type Action = i64;
//!     fn observation_space(&self) -> Space { Space::boxed(DType::F32, &[1], 0.0, 3.0) }
//!     fn action_space(&self) -> Space { Space::discrete(1) }
//!     fn reset(&mut self, obs: &mut [f32], _ctx: &mut Ctx) { self.n = 0.0; obs[0] = 0.0; }
//!     fn step(&mut self, _action: &[i64], obs: &mut [f32], _ctx: &mut Ctx) -> Step {
//!         self.n += 1.0;
//!         obs[0] = self.n;
//!         Step { reward: 1.0, terminated: self.n >= 3.0, truncated: false }
//!     }
//! }
//! let mut env = LocalEnv::new(Counter { n: 0.0 }).unwrap();
//! env.reset(Some(0));
//! env.step(&[0]);
//! env.step(&[0]);
//! assert!(env.step(&[0]).terminated);
//! assert_eq!(env.obs(), &[3.0]);
//! ```

use crate::{Info, Leaves, Space};
use serde_json::Value;

/// The random number generator each env gets: PCG-64 (`rand_pcg::Pcg64`, O'Neill's PCG XSL RR
/// 128/64), seeded with `Pcg64::seed_from_u64(seed)` on a seeded reset and from OS entropy before
/// the first one.
///
/// ```
/// use ringenv_worker::rand::{Rng, SeedableRng};
/// let (mut a, mut b) = (ringenv_worker::EnvRng::seed_from_u64(3), ringenv_worker::EnvRng::seed_from_u64(3));
/// assert_eq!(a.random::<u64>(), b.random::<u64>());
/// ```
pub type EnvRng = rand_pcg::Pcg64;

/// What one step returns besides the observation.
///
/// ```
/// use ringenv_worker::Step;
/// let last = Step { reward: 1.0, terminated: true, truncated: false };
/// assert_eq!(Step::default(), Step { reward: 0.0, terminated: false, truncated: false });
/// assert!(last.terminated || last.truncated);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Step {
    /// The reward of this step.
    pub reward: f32,
    /// The episode reached a terminal state of the MDP (Gymnasium's `terminated`).
    pub terminated: bool,
    /// The episode was cut short, for example by a time limit (Gymnasium's `truncated`).
    pub truncated: bool,
}

/// What the worker hands an env with each reset and step: its random number generator, the
/// reset's seed and options, and an [`Info`] to fill.
///
/// ```
/// use ringenv_worker::rand::{Rng, SeedableRng};
/// use ringenv_worker::{Ctx, EnvRng, Info};
/// let (mut rng, mut info) = (EnvRng::seed_from_u64(7), Info::default());
/// let options = serde_json::json!({"level": 2});
/// let mut ctx = Ctx::new(&mut rng, Some(7), &options, &mut info);
/// assert_eq!((ctx.seed(), ctx.options()["level"].as_u64()), (Some(7), Some(2)));
/// let x = ctx.rng().random_range(0..10); // the same draw as any env seeded with 7
/// assert_eq!(x, EnvRng::seed_from_u64(7).random_range(0..10));
/// ctx.info().set("drawn", x);
/// assert_eq!(info.len(), 1);
/// ```
pub struct Ctx<'a> {
    rng: &'a mut EnvRng,
    seed: Option<u64>,
    options: &'a Value,
    info: &'a mut Info,
}

impl<'a> Ctx<'a> {
    /// A context over `rng` (already seeded by the caller), for a reset with `seed` and
    /// `options` (`Value::Null` for none), or a step (`None`, `Value::Null`). Workers and
    /// [`crate::LocalEnv`] build these; an env only receives them.
    pub fn new(rng: &'a mut EnvRng, seed: Option<u64>, options: &'a Value, info: &'a mut Info) -> Ctx<'a> {
        Ctx { rng, seed, options, info }
    }

    /// This env's random number generator (re-seeded with the seed of each seeded reset, then
    /// continued by every step and unseeded reset). Draw with `rand::Rng`'s methods
    /// (`ctx.rng().random_range(0..4)`); `rand` is re-exported as `ringenv_worker::rand`.
    pub fn rng(&mut self) -> &mut EnvRng {
        self.rng
    }

    /// The seed of this reset: `Some` for a seeded reset (the generator has just been seeded
    /// with it), `None` for an unseeded reset, an autoreset or a step.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }

    /// The options of this reset (Gymnasium's `reset(options=...)`, without `reset_mask`) as
    /// JSON: an object, or `Null` when none were given and in steps. Python sends plain data
    /// only (dict, list, str, int, float, bool, None); read typed options with
    /// `serde_json::from_value`.
    pub fn options(&self) -> &Value {
        self.options
    }

    /// The info of this reset or step, empty on entry. Entries set here reach Python's `infos`.
    pub fn info(&mut self) -> &mut Info {
        self.info
    }
}

/// Where an env writes its observation: `&mut [T]` for one leaf, a tuple of them for several.
///
/// ```
/// use ringenv_worker::{envs::CartPole, ObsMut};
/// let obs: ObsMut<'_, CartPole> = &mut [0.0f32; 4][..];
/// assert_eq!(obs.len(), 4);
/// ```
pub type ObsMut<'a, E> = <<E as Env>::Obs as Leaves>::Mut<'a>;
/// How an env reads its action: `&[T]` (actions of Rust envs are one flat leaf).
///
/// ```
/// use ringenv_worker::{envs::CartPole, ActionRef};
/// let push_right: ActionRef<'_, CartPole> = &[1i64];
/// assert_eq!(push_right, [1]);
/// ```
pub type ActionRef<'a, E> = <<E as Env>::Action as Leaves>::Ref<'a>;

/// A single environment, stepped by a worker.
///
/// ```
/// use ringenv_worker::rand::Rng;
/// use ringenv_worker::{Ctx, DType, Env, LocalEnv, Space, Step};
///
/// /// A random walk on 0..5: a one-hot position (uint8) and the steps taken (a Discrete).
/// struct Walk { at: usize, t: i64 }
/// impl Env for Walk {
///     type Obs = (u8, i64);   // one Rust type per leaf of the Dict, in order
///     type Action = i64;
///     fn observation_space(&self) -> Space {
///         Space::dict([("at", Space::boxed(DType::U8, &[5], 0.0, 1.0)), ("t", Space::discrete(11))])
///     }
///     fn action_space(&self) -> Space { Space::discrete(2) }
///     fn reset(&mut self, (at, t): (&mut [u8], &mut [i64]), ctx: &mut Ctx) {
///         (self.at, self.t) = (ctx.rng().random_range(0..5), 0);
///         at.fill(0);
///         at[self.at] = 1;
///         t[0] = 0;
///     }
///     fn step(&mut self, action: &[i64], (at, t): (&mut [u8], &mut [i64]), ctx: &mut Ctx) -> Step {
///         self.at = if action[0] == 1 { (self.at + 1).min(4) } else { self.at.saturating_sub(1) };
///         self.t += 1;
///         at.fill(0);
///         at[self.at] = 1;
///         t[0] = self.t;
///         let done = self.at == 4;
///         if done {
///             ctx.info().set("steps", self.t);
///         }
///         Step { reward: if done { 1.0 } else { 0.0 }, terminated: done, truncated: self.t == 10 }
///     }
/// }
/// let mut env = LocalEnv::new(Walk { at: 0, t: 0 }).unwrap();
/// env.reset(Some(3));
/// while !env.step(&[1]).terminated {}
/// assert_eq!(env.obs().0, &[0, 0, 0, 0, 1]);
/// assert!(env.info().get("steps").is_some());
/// ```
///
/// `Obs` and `Action` name the Rust element types of the leaves of [`Env::observation_space`]
/// and [`Env::action_space`] (see [`Leaves`]): `f32` for a float32 Box, `i64` for a Discrete,
/// `i8` for a MultiBinary, `u8` for a `uint8` or `bool` Box, `(u8, i8)` for a Dict of those two,
/// and so on. The worker checks them against the spaces when it starts and refuses a mismatch,
/// naming both. The action space must be flat (Box, Discrete, MultiDiscrete or MultiBinary).
///
/// An env must write every element of the observation on every reset and step (what the slices
/// hold on entry is unspecified) and allocate nothing in `step` (a reused buffer is fine).
/// A panic in `reset` or `step` is caught by the worker and reported to the caller as an error
/// carrying the panic message and location; the env's episode then counts as truncated and its
/// next step resets it.
pub trait Env: Send + 'static {
    /// Element type(s) of the observation leaves (for example `f32`, or `(u8, i8)`).
    type Obs: Leaves;
    /// Element type of the action leaf (`i64` for a Discrete space).
    type Action: Leaves;

    /// The observation space of one env.
    fn observation_space(&self) -> Space;
    /// The action space of one env (flat).
    fn action_space(&self) -> Space;
    /// Starts an episode and writes its first observation into `obs`. Draw randomness from
    /// `ctx.rng()` so that the episode is a function of the seed; read options from
    /// `ctx.options()`.
    fn reset(&mut self, obs: ObsMut<'_, Self>, ctx: &mut Ctx);
    /// Applies `action` and writes the next observation into `obs`.
    fn step(&mut self, action: ActionRef<'_, Self>, obs: ObsMut<'_, Self>, ctx: &mut Ctx) -> Step;
}

/// Why an env's declared spaces cannot be served.
///
/// ```
/// use ringenv_worker::{declared_spaces, Ctx, DType, Env, Space, SpaceError, Step};
/// struct Wide;
/// impl Env for Wide {
///     type Obs = f32;
///     type Action = i64;
///     fn observation_space(&self) -> Space { Space::boxed(DType::F64, &[2], 0.0, 1.0) } // not f32
///     fn action_space(&self) -> Space { Space::discrete(2) }
///     fn reset(&mut self, _: &mut [f32], _: &mut Ctx) {}
///     fn step(&mut self, _: &[i64], _: &mut [f32], _: &mut Ctx) -> Step { Step::default() }
/// }
/// let err = declared_spaces(&Wide).unwrap_err();
/// assert!(matches!(err, SpaceError::Types { which: "observation", .. }));
/// assert!(err.to_string().contains("[float64[2]]"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpaceError {
    /// A space is malformed; names which (`"observation"` or `"action"`) and the problem.
    #[error("invalid {which} space: {error}")]
    Invalid {
        /// `"observation"` or `"action"`.
        which: &'static str,
        /// The problem.
        error: crate::space::InvalidSpace,
    },
    /// The space's leaves do not match the env's `Obs` / `Action` types.
    #[error(
        "the {which} space has leaves [{}] but the env's {} type names element types ({}); give one Rust type per \
         leaf (u8 also views bool)",
        .leaves.join(", "), if *.which == "action" { "Action" } else { "Obs" }, .types.join(", ")
    )]
    Types {
        /// `"observation"` or `"action"`.
        which: &'static str,
        /// The space's leaves, for example `["uint8[7, 7]", "int8[4]"]`.
        leaves: Vec<String>,
        /// The Rust element types, for example `["f32"]`.
        types: Vec<&'static str>,
    },
    /// The action space is a Dict or Tuple (actions of Rust envs must be one flat array).
    #[error(
        "the action space is a Dict or Tuple; Rust envs take one flat action array (Box, Discrete, MultiDiscrete \
         or MultiBinary)"
    )]
    CompositeAction,
}

fn check_space<L: Leaves>(which: &'static str, space: &Space) -> Result<(), SpaceError> {
    space.validate().map_err(|error| SpaceError::Invalid { which, error })?;
    let leaves = space.leaves();
    if leaves.len() != L::COUNT || !leaves.iter().enumerate().all(|(k, leaf)| L::accepts(k, leaf.dtype)) {
        let leaves = leaves.iter().map(ToString::to_string).collect();
        return Err(SpaceError::Types { which, leaves, types: L::type_names() });
    }
    Ok(())
}

/// The observation and action spaces of `env`, checked: valid, a flat action space, and leaves
/// matching the env's `Obs` and `Action` types.
///
/// # Errors
/// The first [`SpaceError`] found.
///
/// ```
/// use ringenv_worker::{envs::CartPole, declared_spaces, Space};
/// let (obs, act) = declared_spaces(&CartPole::new()).unwrap();
/// assert_eq!(act, Space::discrete(2));
/// ```
pub fn declared_spaces<E: Env>(env: &E) -> Result<(Space, Space), SpaceError> {
    let (obs, act) = (env.observation_space(), env.action_space());
    check_space::<E::Obs>("observation", &obs)?;
    if !act.is_flat() {
        return Err(SpaceError::CompositeAction);
    }
    check_space::<E::Action>("action", &act)?;
    Ok((obs, act))
}
