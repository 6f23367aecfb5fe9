//! The `Env` trait a Rust environment implements to run in a ringenv worker.
//!
//! An env writes its observation straight into the slice it is given: a row of the batch array
//! in shared memory, so nothing is allocated or copied per step. The worker loop owns autoreset
//! (Gymnasium's next-step mode), seeding and error reporting; an env only steps.
//!
//! ```
//! use ringenv_worker::{Env, Space, Step};
//! use ringenv_runtime::DType;
//!
//! /// Counts up to 3, then terminates.
//! struct Counter { n: f32 }
//! impl Env for Counter {
//!     type Obs = f32;
//!     type Action = i64;
//!     fn observation_space(&self) -> Space { Space::boxed(DType::F32, &[1], 0.0, 3.0) }
//!     fn action_space(&self) -> Space { Space::Discrete { n: 1, start: 0 } }
//!     fn reset(&mut self, _seed: Option<u64>, obs: &mut [f32]) { self.n = 0.0; obs[0] = 0.0; }
//!     fn step(&mut self, _action: &[i64], obs: &mut [f32]) -> Step {
//!         self.n += 1.0;
//!         obs[0] = self.n;
//!         Step { reward: 1.0, terminated: self.n >= 3.0, truncated: false }
//!     }
//! }
//! let mut env = Counter { n: 0.0 };
//! let mut obs = [0.0f32];
//! env.reset(Some(0), &mut obs);
//! env.step(&[0], &mut obs);
//! env.step(&[0], &mut obs);
//! assert!(env.step(&[0], &mut obs).terminated);
//! assert_eq!(obs[0], 3.0);
//! ```

use crate::Space;
use ringenv_runtime::Element;

/// What one step returns besides the observation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Step {
    /// The reward of this step.
    pub reward: f32,
    /// The episode reached a terminal state of the MDP (Gymnasium's `terminated`).
    pub terminated: bool,
    /// The episode was cut short, for example by a time limit (Gymnasium's `truncated`).
    pub truncated: bool,
}

/// A single environment, stepped by a worker.
///
/// `Obs` and `Action` are the element types of the observation and action arrays; their dtypes
/// must equal those of [`Env::observation_space`] and [`Env::action_space`] (a Discrete action is
/// an `i64`). A panic in `reset` or `step` is caught by the worker and reported to the caller as
/// an error carrying the panic message.
pub trait Env: Send + 'static {
    /// Element type of the observation (for example `f32`).
    type Obs: Element;
    /// Element type of the action (`i64` for a Discrete space).
    type Action: Element;

    /// The observation space of one env.
    fn observation_space(&self) -> Space;
    /// The action space of one env.
    fn action_space(&self) -> Space;
    /// Starts an episode and writes its first observation into `obs` (one element per element of
    /// the observation space). With `Some(seed)` the episode must be a function of the seed;
    /// with `None` the env continues its own random stream.
    fn reset(&mut self, seed: Option<u64>, obs: &mut [Self::Obs]);
    /// Applies `action` (one element per element of the action space) and writes the next
    /// observation into `obs`.
    fn step(&mut self, action: &[Self::Action], obs: &mut [Self::Obs]) -> Step;
}
