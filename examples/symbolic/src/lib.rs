//! A toolkit for symbolic envs on the `ringenv-worker` SDK, and an env built with it.
//!
//! - [`facts`]: ground facts numbered by predicate, kept in a bitset allocated once, with their
//!   observation encoding (`MultiBinary`, or a `uint8` / `bool` Box).
//! - [`rules`]: forward chaining to a fixpoint over a fact set, allocating nothing.
//! - [`blocks_world`]: `BlocksWorld-v0`, blocks stacked towards a random goal per episode
//!   (`u8` observations, `N * (N + 1)` move actions), served by this crate's worker binary
//!   (`src/main.rs`): `ringenv.make_vec("symbolic:BlocksWorld-v0", 8, worker="target/release/symbolic",
//!   num_blocks=5)`.
//!
//! `examples/custom_env`'s Sokoban is built on [`facts`] and [`rules`].
//!
//! ```
//! use ringenv_worker::{check_env, CheckOptions, Env, LocalEnv, Space};
//! use symbolic::BlocksWorld;
//! assert_eq!(BlocksWorld::new(4).action_space(), Space::Discrete { n: 20, start: 0 });
//! let mut env = LocalEnv::new(BlocksWorld::new(3)).unwrap();
//! env.reset(Some(7));
//! let first = env.obs().to_vec();
//! let step = env.step(&[0]); // block 0 onto itself: illegal, nothing changes
//! assert_eq!((step.reward, env.obs()), (-0.1, &first[..]));
//! let report = check_env(|| BlocksWorld::new(3), &CheckOptions { steps: 300, seed: 1 });
//! assert!(report.is_ok() && report.episodes >= 3, "{report}");
//! ```
#![warn(missing_docs)]

pub mod blocks_world;
pub mod facts;
pub mod rules;

pub use blocks_world::{BlocksWorld, BlocksWorldArgs};
