//! Stepping one env in this process, without a worker: for unit tests, scripts and
//! [`check_env`](crate::check_env).
//!
//! A [`LocalEnv`] hands its env buffers, generator and [`Info`] exactly as a worker does, so one
//! reset with seed `s + i` sees what env `i` of a vector env reset with `s` sees. There is no
//! autoreset. Actions are checked as a pool checks Python's ([`ActionBounds`]; a `Box`'s bounds
//! are not enforced, NaN is); a bad action panics before the env sees it.
//!
//! ```
//! use ringenv_worker::{envs::CartPole, LocalEnv};
//! let mut env = LocalEnv::new(CartPole::new()).unwrap();
//! env.reset(Some(7));
//! let first = env.obs().to_vec();
//! let step = env.step(&[1]); // push the cart right
//! assert_eq!((step.reward, step.terminated), (1.0, false));
//! assert!(env.obs()[1] > first[1], "the cart speeds up to the right");
//! ```

use crate::env::{declared_spaces, SpaceError};
use crate::leaves::LeafBuf;
use crate::values::{is_integer, read_f64, read_int};
use crate::{ActionRef, Ctx, Env, EnvRng, Info, Leaves, Space, Step};
use rand::SeedableRng;
use ringenv_runtime::ActionBounds;
use serde_json::Value;

/// One env with its buffers and generator (see the [module docs](self)).
///
/// ```
/// use ringenv_worker::{envs::CartPole, LocalEnv};
/// let mut a = LocalEnv::new(CartPole::new()).unwrap();
/// let mut b = LocalEnv::new(CartPole::new()).unwrap();
/// a.reset(Some(5));
/// b.reset(Some(5));
/// assert_eq!(a.obs(), b.obs()); // the same seed, the same episode
/// assert_eq!(a.step(&[1]), b.step(&[1]));
/// assert_eq!(a.obs_bytes()[0].len(), 16); // one float32[4] leaf
/// ```
pub struct LocalEnv<E: Env> {
    env: E,
    observation_space: Space,
    action_space: Space,
    obs: Vec<LeafBuf>,
    /// The action of [`LocalEnv::step_bytes`], copied into aligned storage.
    action: LeafBuf,
    /// What an action may hold (the pool's rules for the action space).
    bounds: ActionBounds,
    rng: EnvRng,
    info: Info,
}

impl<E: Env> LocalEnv<E> {
    /// Wraps `env`, checking its spaces against its types; the generator starts from OS entropy.
    ///
    /// # Errors
    /// [`SpaceError`] when the spaces are malformed, the action space is not flat, or the leaves
    /// do not match `E::Obs` / `E::Action`.
    pub fn new(env: E) -> Result<LocalEnv<E>, SpaceError> {
        let (observation_space, action_space) = declared_spaces(&env)?;
        let obs = observation_space.leaves().iter().map(|leaf| LeafBuf::new(leaf.bytes())).collect();
        let action = LeafBuf::new(action_space.array_spec().bytes());
        let (rng, info) = (EnvRng::from_os_rng(), Info::default());
        let bounds = action_bounds(&action_space);
        Ok(LocalEnv { env, observation_space, action_space, obs, action, bounds, rng, info })
    }

    /// Resets the env: with `Some(seed)` the generator is re-seeded first.
    pub fn reset(&mut self, seed: Option<u64>) {
        self.reset_with_options(seed, &Value::Null);
    }

    /// Resets the env with reset options (a JSON object, as Python's `options` arrive).
    pub fn reset_with_options(&mut self, seed: Option<u64>, options: &Value) {
        if let Some(seed) = seed {
            self.rng = EnvRng::seed_from_u64(seed);
        }
        self.info.clear();
        let mut ctx = Ctx::new(&mut self.rng, seed, options, &mut self.info);
        self.env.reset(E::Obs::view_mut(&mut self.obs.iter_mut().map(LeafBuf::bytes_mut)), &mut ctx);
    }

    /// Steps the env with `action` (for example `&[1]` for a Discrete action).
    ///
    /// # Panics
    /// Before the env sees it, when `action` is not one action of the action space: a number of
    /// elements other than the space's, a `Discrete`, `MultiDiscrete` or `MultiBinary` element
    /// outside its bounds, or a NaN in a float `Box` action (see the [module docs](self)).
    ///
    /// ```should_panic
    /// use ringenv_worker::{envs::CartPole, LocalEnv};
    /// let mut env = LocalEnv::new(CartPole::new()).unwrap();
    /// env.reset(Some(0));
    /// env.step(&[2]); // panics: "LocalEnv::step: action [2]: element 0 is 2, outside [0, 1] ..."
    /// ```
    pub fn step(&mut self, action: ActionRef<'_, E>) -> Step {
        let bytes = E::Action::leaf_bytes(&action, 0).expect("a flat action space has one leaf");
        self.check_action("step", bytes);
        self.info.clear();
        let mut ctx = Ctx::new(&mut self.rng, None, &Value::Null, &mut self.info);
        self.env.step(action, E::Obs::view_mut(&mut self.obs.iter_mut().map(LeafBuf::bytes_mut)), &mut ctx)
    }

    /// Steps the env with an action given as the bytes of its leaf (native byte order); allocates
    /// nothing.
    ///
    /// # Panics
    /// As [`LocalEnv::step`]: when `action` is not exactly one action of the action space (its
    /// byte length, or a value outside its bounds).
    pub fn step_bytes(&mut self, action: &[u8]) -> Step {
        self.check_action("step_bytes", action);
        self.action.bytes_mut().copy_from_slice(action);
        self.info.clear();
        let mut ctx = Ctx::new(&mut self.rng, None, &Value::Null, &mut self.info);
        let obs = E::Obs::view_mut(&mut self.obs.iter_mut().map(LeafBuf::bytes_mut));
        self.env.step(E::Action::view(&mut std::iter::once(self.action.bytes())), obs, &mut ctx)
    }

    /// Panics, naming the action, the element and the bounds, when `action` (the bytes of the
    /// action leaf) is not one action of the action space; allocates nothing otherwise.
    fn check_action(&self, call: &str, action: &[u8]) {
        let spec = self.action_space.array_spec();
        let (dtype, size) = (spec.dtype, spec.dtype.size());
        if action.len() != spec.bytes() {
            let has = match action.len() % size {
                0 => format!("{} elements", action.len() / size),
                _ => format!("{} bytes", action.len()),
            };
            panic!(
                "LocalEnv::{call}: the action has {has}, but one action of the action space {:?} is {} {dtype} \
                 elements ({} bytes)",
                self.action_space,
                spec.elements(),
                spec.bytes()
            );
        }
        let Some(k) = self.bounds.first_outside(dtype, action) else { return };
        let value = |e: usize| {
            if is_integer(dtype) {
                read_int(action, dtype, e).to_string()
            } else {
                read_f64(action, dtype, e).to_string()
            }
        };
        let shown = spec.elements().min(16);
        let more = if shown < spec.elements() { ", ..." } else { "" };
        let values: Vec<String> = (0..shown).map(value).collect();
        let bound = match &self.bounds {
            ActionBounds::Integer { low, high } => {
                format!("outside [{}, {}]", low[k % low.len()], high[k % high.len()])
            }
            _ => "which no Box contains".to_string(),
        };
        panic!(
            "LocalEnv::{call}: action [{}{more}]: element {k} is {}, {bound} (the action space is {:?})",
            values.join(", "),
            value(k),
            self.action_space
        );
    }

    /// The last observation, typed (`&[f32]`, or a tuple of slices for several leaves).
    pub fn obs(&self) -> <E::Obs as Leaves>::Ref<'_> {
        E::Obs::view(&mut self.obs.iter().map(LeafBuf::bytes))
    }

    /// The last observation's leaves as bytes, in leaf order.
    pub fn obs_bytes(&self) -> Vec<&[u8]> {
        self.obs.iter().map(LeafBuf::bytes).collect()
    }

    /// Sets every byte of the observation buffers to `byte` (to find elements an env leaves
    /// unwritten).
    pub fn fill_obs(&mut self, byte: u8) {
        self.obs.iter_mut().for_each(|b| b.bytes_mut().fill(byte));
    }

    /// The info the last reset or step filled.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// The observation space (checked).
    pub fn observation_space(&self) -> &Space {
        &self.observation_space
    }

    /// The action space (checked, flat).
    pub fn action_space(&self) -> &Space {
        &self.action_space
    }

    /// The env.
    pub fn env(&self) -> &E {
        &self.env
    }

    /// The env, mutably (to set up a state in a test).
    pub fn env_mut(&mut self) -> &mut E {
        &mut self.env
    }

    /// The generator, for example to draw a random action from the same stream.
    pub fn rng(&mut self) -> &mut EnvRng {
        &mut self.rng
    }
}

/// The values an action of the flat space `space` may hold, by the rules a pool checks Python's
/// actions with (`ringenv._checks.action_bounds`): integer bounds for `Discrete`, `MultiDiscrete`
/// and `MultiBinary`, no NaN for a float `Box`, anything for an integer `Box`.
fn action_bounds(space: &Space) -> ActionBounds {
    let bounds = match space {
        Space::Discrete { n, start } => ActionBounds::integer(vec![*start], vec![start + n - 1]),
        Space::MultiDiscrete { nvec, start, .. } => {
            ActionBounds::integer(start.clone(), start.iter().zip(nvec).map(|(s, n)| s + n - 1).collect())
        }
        Space::MultiBinary { .. } => ActionBounds::integer(vec![0], vec![1]),
        Space::Box { dtype, .. } if !is_integer(*dtype) => Ok(ActionBounds::NotNan),
        _ => Ok(ActionBounds::Unchecked),
    };
    // (a validated space has at least one element per MultiDiscrete: integer() accepts it)
    bounds.unwrap_or(ActionBounds::Unchecked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, InfoValue};

    /// A Dict observation of two leaves, a MultiBinary action, and info and options use.
    struct Lights {
        on: [u8; 3],
    }
    impl Env for Lights {
        type Obs = (u8, f64);
        type Action = i8;
        fn observation_space(&self) -> Space {
            Space::dict([
                ("on", Space::boxed(DType::Bool, &[3], 0.0, 1.0)),
                ("lit", Space::boxed(DType::F64, &[], 0.0, 3.0)),
            ])
        }
        fn action_space(&self) -> Space {
            Space::multi_binary(3)
        }
        fn reset(&mut self, (on, lit): (&mut [u8], &mut [f64]), ctx: &mut Ctx) {
            let all = ctx.options().get("all_on").and_then(Value::as_bool).unwrap_or(false);
            self.on = [u8::from(all); 3];
            on.copy_from_slice(&self.on);
            lit[0] = f64::from(self.on.iter().sum::<u8>());
        }
        fn step(&mut self, action: &[i8], (on, lit): (&mut [u8], &mut [f64]), ctx: &mut Ctx) -> Step {
            for (light, &flip) in self.on.iter_mut().zip(action) {
                *light ^= flip as u8;
            }
            on.copy_from_slice(&self.on);
            lit[0] = f64::from(self.on.iter().sum::<u8>());
            ctx.info().set("lit", lit[0]);
            Step { reward: lit[0] as f32, terminated: lit[0] == 3.0, truncated: false }
        }
    }

    #[test]
    fn composite_observations_options_and_info() {
        let mut env = LocalEnv::new(Lights { on: [0; 3] }).unwrap();
        env.reset_with_options(Some(1), &serde_json::json!({"all_on": true}));
        assert_eq!(env.obs(), (&[1, 1, 1][..], &[3.0][..]));
        env.reset(None);
        assert_eq!(env.obs(), (&[0, 0, 0][..], &[0.0][..]));
        assert!(env.info().is_empty());
        let step = env.step(&[1, 0, 1]);
        assert_eq!((step.reward, env.obs().0), (2.0, &[1, 0, 1][..]));
        assert_eq!(env.info().get("lit"), Some(InfoValue::Float(2.0)));
        assert_eq!(env.obs_bytes()[1], 2.0f64.to_ne_bytes());
        assert!(env.step_bytes(&[0, 1, 0]).terminated);
    }

    fn panic_message(f: impl FnOnce()) -> String {
        let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("a panic");
        payload.downcast_ref::<String>().cloned().unwrap_or_default()
    }

    #[test]
    fn actions_outside_the_action_space_are_refused_naming_element_value_and_bounds() {
        let mut lights = LocalEnv::new(Lights { on: [0; 3] }).unwrap();
        lights.reset(Some(0));
        let message = panic_message(|| {
            lights.step(&[0, 2, 1]);
        });
        assert!(
            message.starts_with(
                "LocalEnv::step: action [0, 2, 1]: element 1 is 2, outside [0, 1] (the action space is MultiBinary"
            ),
            "{message}"
        );
        let message = panic_message(|| {
            lights.step(&[0, 1]);
        });
        assert!(
            message.starts_with(
                "LocalEnv::step: the action has 2 elements, but one action of the action space MultiBinary"
            ),
            "{message}"
        );
        assert!(message.ends_with("is 3 int8 elements (3 bytes)"), "{message}");
        let message = panic_message(|| {
            lights.step_bytes(&[0, 1, 0, 0]);
        });
        assert!(message.starts_with("LocalEnv::step_bytes: the action has 4 elements"), "{message}");
        assert_eq!(lights.obs().0, &[0, 0, 0][..], "no refused action reached the env");

        let mut pole = LocalEnv::new(crate::envs::CartPole::new()).unwrap();
        pole.reset(Some(0));
        let message = panic_message(|| {
            pole.step(&[-1]);
        });
        assert!(message.starts_with("LocalEnv::step: action [-1]: element 0 is -1, outside [0, "), "{message}");
        pole.step(&[0]); // (a legal action still steps)
    }

    #[test]
    fn a_nan_in_a_float_box_action_is_refused_and_its_bounds_are_not_enforced() {
        struct Push;
        impl Env for Push {
            type Obs = f32;
            type Action = f32;
            fn observation_space(&self) -> Space {
                Space::boxed(DType::F32, &[1], -1.0, 1.0)
            }
            fn action_space(&self) -> Space {
                Space::boxed(DType::F32, &[2], -1.0, 1.0)
            }
            fn reset(&mut self, obs: &mut [f32], _: &mut Ctx) {
                obs[0] = 0.0;
            }
            fn step(&mut self, action: &[f32], obs: &mut [f32], _: &mut Ctx) -> Step {
                obs[0] = action[0];
                Step::default()
            }
        }
        let mut env = LocalEnv::new(Push).unwrap();
        env.reset(None);
        env.step(&[5.0, 0.0]); // outside the Box: passed on, as Gymnasium does
        assert_eq!(env.obs(), &[5.0][..]);
        let message = panic_message(|| {
            env.step(&[0.5, f32::NAN]);
        });
        assert!(
            message.starts_with("LocalEnv::step: action [0.5, NaN]: element 1 is NaN, which no Box contains"),
            "{message}"
        );
    }

    #[test]
    fn mismatched_types_are_refused_naming_leaves_and_types() {
        struct Wrong;
        impl Env for Wrong {
            type Obs = f32;
            type Action = i64;
            fn observation_space(&self) -> Space {
                Lights { on: [0; 3] }.observation_space()
            }
            fn action_space(&self) -> Space {
                Space::discrete(2)
            }
            fn reset(&mut self, _: &mut [f32], _: &mut Ctx) {}
            fn step(&mut self, _: &[i64], _: &mut [f32], _: &mut Ctx) -> Step {
                Step::default()
            }
        }
        let err = LocalEnv::new(Wrong).err().unwrap().to_string();
        assert!(err.contains("bool[3], float64[1]") && err.contains("(f32)"), "{err}");
    }
}
