//! The built-in environment, implemented in Rust against the [`Env`](crate::Env) trait.
//!
//! - [`CartPole`]: Gymnasium 1.4's `CartPole-v1`, bit-exact (`f32` observations, 2 actions).
//!
//! ```
//! use ringenv_worker::envs::CartPole;
//! use ringenv_worker::{Env, Space};
//! assert_eq!(CartPole::new().action_space(), Space::Discrete { n: 2, start: 0 });
//! ```

pub mod cartpole;

use crate::EnvRng;
pub use cartpole::CartPole;

use rand::SeedableRng;

/// The generator of a standalone reset (an env stepped on its own, outside a worker): a fresh one
/// seeded from `seed`, else the env's `current` one continued, else one seeded from OS entropy.
pub(crate) fn standalone_rng(seed: Option<u64>, current: Option<EnvRng>) -> EnvRng {
    match (seed, current) {
        (Some(seed), _) => EnvRng::seed_from_u64(seed),
        (None, Some(rng)) => rng,
        (None, None) => EnvRng::from_os_rng(),
    }
}
