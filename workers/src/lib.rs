//! ringenv's worker SDK: write an environment in Rust, run it in ringenv worker processes.
//!
//! - [`Env`]: the trait an environment implements (spaces, `reset(seed)`, `step(action)`
//!   writing the observation into the slice it is given);
//! - [`RustEnvs`] and [`host`]: how a worker hosts a group of envs, with Gymnasium's next-step
//!   autoreset;
//! - [`worker_loop`]: joining a pool and serving its commands;
//! - [`envs`] and [`registry`]: the built-in envs, `CartPole-v1` and `BlocksWorld-v0`;
//! - the `ringenv-worker` binary serves the built-in envs.
#![warn(missing_docs, unsafe_op_in_unsafe_fn)]

pub mod cli;
pub mod env;
pub mod envs;
pub mod host;
pub mod registry;
pub mod rust_envs;
pub mod space;
pub mod worker_loop;

pub use cli::WorkerCli;
pub use env::{Env, Step};
pub use host::EnvHost;
pub use rust_envs::RustEnvs;
pub use space::Space;
