//! ringenv's worker SDK: write an environment in Rust, step it from Python as a Gymnasium vector
//! env, with ringenv's worker processes and shared memory in between.
//!
//! # Writing an env
//!
//! Implement [`Env`]: the observation and action [`Space`]s, the Rust element types of their
//! arrays (`Obs`, `Action`; see [`Leaves`]), and `reset` / `step`, which write the observation
//! into rows of the shared batch arrays. Randomness, reset options and a small typed [`Info`]
//! travel through the [`Ctx`].
//!
//! ```
//! use ringenv_worker::rand::Rng;
//! use ringenv_worker::{Ctx, DType, Env, LocalEnv, Space, Step};
//!
//! /// Guess a hidden number in 0..10; the observation says higher (1) or lower (-1).
//! struct Guess { target: i64, tries: u32 }
//! impl Env for Guess {
//!     type Obs = f32;
//!     type Action = i64;
//!     fn observation_space(&self) -> Space { Space::boxed(DType::F32, &[1], -1.0, 1.0) }
//!     fn action_space(&self) -> Space { Space::discrete(10) }
//!     fn reset(&mut self, obs: &mut [f32], ctx: &mut Ctx) {
//!         self.target = ctx.rng().random_range(0..10);
//!         self.tries = 0;
//!         obs[0] = 0.0;
//!     }
//!     fn step(&mut self, action: &[i64], obs: &mut [f32], ctx: &mut Ctx) -> Step {
//!         self.tries += 1;
//!         obs[0] = (self.target - action[0]).signum() as f32;
//!         ctx.info().set("tries", self.tries);
//!         let found = obs[0] == 0.0;
//!         Step { reward: if found { 1.0 } else { 0.0 }, terminated: found, truncated: self.tries >= 20 }
//!     }
//! }
//!
//! // Stepped on its own (unit tests), with a binary search:
//! let mut env = LocalEnv::new(Guess { target: 0, tries: 0 }).unwrap();
//! env.reset(Some(42));
//! let (mut lo, mut hi) = (0, 9);
//! loop {
//!     let mid = (lo + hi) / 2;
//!     if env.step(&[mid]).terminated { break; }
//!     if env.obs()[0] > 0.0 { lo = mid + 1 } else { hi = mid - 1 }
//! }
//! assert!(env.info().get("tries").is_some());
//! // And checked like Gymnasium's env checker would (spaces, determinism, panics, allocation):
//! let report = ringenv_worker::check_env(|| Guess { target: 0, tries: 0 }, &Default::default());
//! assert!(report.is_ok(), "{report}");
//! ```
//!
//! # Serving it to Python
//!
//! A binary crate's `main.rs` is one macro call, [`worker_main!`], mapping env ids to
//! constructors ([`Registry`], [`kwargs`]). Python then steps it with
//! `ringenv.make_vec("mycrate:Guess-v0", num_envs=64, worker="target/release/mycrate")`; the
//! binary also answers `describe`, `list` and `check` ([`entry`]). `docs/SDK.md` is the guide,
//! `examples/custom_env` a walk-through.
//!
//! # Inside a worker
//!
//! [`RustEnvs`] hosts a group of envs with next-step autoreset ([`host`]); [`worker_loop`] serves
//! a pool's commands; [`registration`] registers the built-in `CartPole-v1`; a panic in an env is
//! caught ([`mod@panic`]) and reported with its message and location.
#![warn(missing_docs, unsafe_op_in_unsafe_fn)]

pub mod alloc;
pub mod check;
pub mod cli;
pub mod entry;
pub mod env;
pub mod envs;
pub mod host;
pub mod info;
pub mod kwargs;
pub mod leaves;
pub mod local;
pub mod panic;
pub mod registration;
pub mod registry;
pub mod rust_envs;
pub mod space;
pub mod values;
pub mod worker_loop;

pub use alloc::CountingAlloc;
pub use check::{check_env, CheckOptions, CheckReport, Problem, ProblemKind};
pub use cli::WorkerCli;
pub use env::{declared_spaces, ActionRef, Ctx, Env, EnvRng, ObsMut, SpaceError, Step};
pub use host::EnvHost;
pub use info::{Info, InfoValue};
pub use leaves::{Leaves, Scalar};
pub use local::LocalEnv;
pub use registry::{Constructor, IntoEnv, Registry};
pub use rust_envs::RustEnvs;
pub use space::Space;

/// The `rand` crate, for `ringenv_worker::rand::Rng` (the trait with `random_range`) and
/// `SeedableRng`.
pub use rand;
/// The element types of the segment's arrays (re-exported from `ringenv-runtime`, so that an env
/// crate needs only this crate).
pub use ringenv_runtime::DType;
/// The `serde_json` crate, whose `Value` carries reset options and `env_kwargs`.
pub use serde_json;
