//! `CartPole-v1`: a bit-exact Rust port of Gymnasium 1.4's classic cart-pole.
//!
//! The dynamics, constants and termination rule are those of Gymnasium 1.4.0's
//! `classic_control/cartpole.py`, with the same `float64` operations in the same order, so the
//! `f32` observations equal Gymnasium's bit for bit (golden test below, from
//! `scripts/gen_cartpole_golden.py`).
//!
//! - Reward: 1.0 per step, the terminating step included.
//! - Terminated: `|x| > 2.4` or `|theta| > 12°`; truncated from the 500th step on (as
//!   `TimeLimit(max_episode_steps=500)`, also when that step terminates).
//! - Reset: the state drawn uniformly from `[-0.05, 0.05)` with the [`EnvRng`]; `None` continues
//!   the env's stream (OS entropy before the first seed). The draws differ from NumPy's.
//! - Spaces: observation `Box(-high, high, (4,), float32)`, `high = [4.8, inf, 0.41887903, inf]`;
//!   action `Discrete(2)` (any other action panics).
//!
//! ```
//! use ringenv_worker::envs::CartPole;
//!
//! let mut env = CartPole::new();
//! let mut obs = [0.0f32; 4];
//! env.reset(Some(42), &mut obs);
//! assert!(obs.iter().all(|v| v.abs() <= 0.05));
//! // Pushing right forever makes the pole fall over backwards within a few dozen steps.
//! let mut steps = 0;
//! loop {
//!     steps += 1;
//!     let step = env.step(&[1], &mut obs);
//!     assert_eq!(step.reward, 1.0);
//!     if step.terminated {
//!         break;
//!     }
//! }
//! assert!(steps < 100 && obs[2] < -0.2);
//! ```

use crate::{Ctx, Env, EnvRng, Space, Step};
use rand::Rng;
use rand_pcg::Pcg64;
use ringenv_runtime::DType;

const GRAVITY: f64 = 9.8;
const MASSCART: f64 = 1.0;
const MASSPOLE: f64 = 0.1;
const TOTAL_MASS: f64 = MASSPOLE + MASSCART;
/// Half the pole's length.
const LENGTH: f64 = 0.5;
const POLEMASS_LENGTH: f64 = MASSPOLE * LENGTH;
const FORCE_MAG: f64 = 10.0;
/// Seconds between state updates.
const TAU: f64 = 0.02;
const THETA_THRESHOLD_RADIANS: f64 = 12.0 * 2.0 * std::f64::consts::PI / 360.0;
const X_THRESHOLD: f64 = 2.4;

/// Gymnasium's `CartPole-v1` (see the [module docs](self)): `f32` observations of length 4,
/// `i64` actions in `{0, 1}`.
#[derive(Clone, Debug)]
pub struct CartPole {
    /// `[x, x_dot, theta, theta_dot]`.
    state: [f64; 4],
    /// The generator of [`CartPole::reset`] (stepping on its own); `None` until its first call.
    /// Workers give the env theirs instead.
    rng: Option<Pcg64>,
    /// Steps since the last reset (Gymnasium's `TimeLimit._elapsed_steps`).
    elapsed_steps: u32,
    /// Whether a step already returned `terminated` (Gymnasium's `steps_beyond_terminated`).
    terminated: bool,
    /// Whether `reset` (or `set_state`) was called, so that `step` has a state.
    started: bool,
}

impl Default for CartPole {
    fn default() -> Self {
        Self::new()
    }
}

impl CartPole {
    /// Steps after which an episode is truncated (`max_episode_steps` of `CartPole-v1`).
    pub const MAX_EPISODE_STEPS: u32 = 500;

    /// A new env; call [`Env::reset`] before stepping it.
    pub fn new() -> Self {
        CartPole { state: [0.0; 4], rng: None, elapsed_steps: 0, terminated: false, started: false }
    }

    /// The current state `[x, x_dot, theta, theta_dot]` in full `f64` precision.
    pub fn state(&self) -> [f64; 4] {
        self.state
    }

    /// Overwrites the state `[x, x_dot, theta, theta_dot]`, as assigning
    /// `env.unwrapped.state` does in Gymnasium; the step count and termination record are kept.
    pub fn set_state(&mut self, state: [f64; 4]) {
        self.state = state;
        self.started = true;
    }

    /// Resets with the env's own generator: re-seeded by `Some(seed)`, continued by `None` (for
    /// stepping the env on its own; workers call [`Env::reset`] with theirs).
    pub fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) {
        let mut rng = super::standalone_rng(seed, self.rng.take());
        self.start(&mut rng, obs);
        self.rng = Some(rng);
    }

    /// Pushes the cart left (`[0]`) or right (`[1]`) and writes the next observation.
    ///
    /// # Panics
    /// For another action, or when no reset (or `set_state`) came first.
    pub fn step(&mut self, action: &[i64], obs: &mut [f32]) -> Step {
        self.advance(action, obs)
    }

    fn start(&mut self, rng: &mut EnvRng, obs: &mut [f32]) {
        for s in &mut self.state {
            *s = rng.random_range(-0.05..0.05);
        }
        self.elapsed_steps = 0;
        self.terminated = false;
        self.started = true;
        self.write_obs(obs);
    }

    fn write_obs(&self, obs: &mut [f32]) {
        assert_eq!(obs.len(), 4, "CartPole observation must have 4 elements");
        for (o, s) in obs.iter_mut().zip(self.state) {
            *o = s as f32;
        }
    }
}

impl Env for CartPole {
    type Obs = f32;
    type Action = i64;

    fn observation_space(&self) -> Space {
        // Gymnasium builds `high` as a float32 array; these are its values widened to f64.
        let high = [
            (X_THRESHOLD * 2.0) as f32 as f64,
            f64::INFINITY,
            (THETA_THRESHOLD_RADIANS * 2.0) as f32 as f64,
            f64::INFINITY,
        ];
        Space::Box { dtype: DType::F32, shape: vec![4], low: high.iter().map(|h| -h).collect(), high: high.to_vec() }
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: 2, start: 0 }
    }

    fn reset(&mut self, obs: &mut [f32], ctx: &mut Ctx) {
        self.start(ctx.rng(), obs);
    }

    fn step(&mut self, action: &[i64], obs: &mut [f32], _ctx: &mut Ctx) -> Step {
        self.advance(action, obs)
    }
}

impl CartPole {
    fn advance(&mut self, action: &[i64], obs: &mut [f32]) -> Step {
        let action = action[0];
        assert!(action == 0 || action == 1, "CartPole action {action} is out of range: valid actions are 0 and 1");
        assert!(self.started, "CartPole: call reset before step");
        let [mut x, mut x_dot, mut theta, mut theta_dot] = self.state;
        let force = if action == 1 { FORCE_MAG } else { -FORCE_MAG };
        let costheta = theta.cos();
        let sintheta = theta.sin();

        // Same operations, in the same order, as Gymnasium's `CartPoleEnv.step`.
        let temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS;
        let thetaacc = (GRAVITY * sintheta - costheta * temp)
            / (LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS));
        let xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS;

        x += TAU * x_dot;
        x_dot += TAU * xacc;
        theta += TAU * theta_dot;
        theta_dot += TAU * thetaacc;
        self.state = [x, x_dot, theta, theta_dot];

        // Spelled as Gymnasium's comparisons (a NaN state does not terminate there either).
        #[allow(clippy::manual_range_contains)]
        let terminated =
            x < -X_THRESHOLD || x > X_THRESHOLD || theta < -THETA_THRESHOLD_RADIANS || theta > THETA_THRESHOLD_RADIANS;
        // 1.0 until and including the first terminating step, 0.0 for steps after it.
        let reward = if self.terminated { 0.0 } else { 1.0 };
        self.terminated |= terminated;

        self.elapsed_steps = self.elapsed_steps.saturating_add(1);
        let truncated = self.elapsed_steps >= Self::MAX_EPISODE_STEPS;
        self.write_obs(obs);
        Step { reward, terminated, truncated }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Output of `scripts/gen_cartpole_golden.py` (Gymnasium 1.4.0, NumPy 2.4).
    const GOLDEN: &str = "\
        T 3f847ae147ae147b bf947ae147ae147b 3f9eb851eb851eb8 3fa47ae147ae147b\n\
        A 101010101010101010101010101010101101010101010101001010110100\n\
        3c1d4952 3e32df1a 3cfc5048 be78e702 f  3c568679 bcaaf526 3cd47d3e 3d725a25 f\n\
        3c4fafde 3e320b71 3cde2eed be669ff6 f  3c8454a5 bcb12b4d 3cb94888 3d9b6e31 f\n\
        3c80c98a 3e3151c2 3cc5b7c0 be569912 f  3c9d288a bcb6a454 3ca361d1 3db99be1 f\n\
        3c998169 3e30ad1a 3cb23b16 be48644b f  3cb5c612 bcbb85d2 3c922b0a 3dd485db f\n\
        3cb205f4 3e30191d 3ca32b82 be3ba090 f  3cce32ee bcbff11f 3c85264c 3dece429 f\n\
        3cca5c30 3e2f91e2 3c9819d5 be2ff737 f  3ce67387 bcc4042e 3c77e48e 3e01ae09 f\n\
        3ce287ed 3e2f13dc 3c90b1f6 be2519b9 f  3cfe8b1a bcc7da5a 3c6c8ee5 3e0c423e f\n\
        3cfa8bdb 3e2e9bc5 3c8cb872 be1abfa2 f  3d0b3de9 bccb8d1e 3c67ebe4 3e1674fb f\n\
        3d0934d2 3e2e2687 3c8c08a9 be10a4ab f  3d17236c bccf34bc 3c69c826 3e208929 f\n\
        3d1510f9 3e2db126 3c8e939f be0686f9 f  3d22f62f bcd2e8dc 3c721ac5 3e2ac011 f\n\
        3d20da42 3e2d38af 3c945f51 bdf84ade f  3d2eb5d5 bcd6c128 3c808249 3e355b05 f\n\
        3d2c900f 3e2cba25 3c9d869c bde27c0b f  3d3a6183 bcdad5e0 3c8b6835 3e409d01 f\n\
        3d38314b 3e2c326c 3caa39a5 bdcb1850 f  3d45f7e3 bcdf4072 3c99fa43 3e4ccc55 f\n\
        3d43bc5d 3e2b9e38 3cbabecb bdb18e03 f  3d517719 bce41c1a 3cac8a79 3e5a345f f\n\
        3d4f2f23 3e2af9f7 3ccf7422 bd953f6b f  3d5cdcbc bce98681 3cc3838a 3e692753 f\n\
        3d5a86e9 3e2a41bb 3ce8d183 bd6afdd9 f  3d6825c5 bcefa06d 3cdf6b33 3e7a003b f\n\
        3d65c053 3e297127 3d03b59e bd2315c2 f  3d734e7f 3eb86146 3d00729f bea4f513 f\n\
        3d88675a 3e288333 3ccc1bf1 bca203aa f  3d8f24eb 3eb7f8a6 3cc8de6d be9be6e4 f\n\
        3d9ddca6 3e27c9f0 3c96faf1 bb890839 f  3da492cf 3eb7a8b9 3c964b8b be94fd15 f\n\
        3db34425 3e274019 3c4d3cca 3bf31a86 f  3db9f4ca 3eb76f3c 3c4fab23 be9004a7 f\n\
        3dc8a187 3e26e1a2 3be6fe65 3c7bca14 f  3dcf4e65 3eb74a7f 3bf110b8 be8cd79b f\n\
        3dddf831 3e26aba2 3af3262b 3ca31dd6 f  3de4a2e6 3eb73959 3b13ac56 be8b5be1 f\n\
        3df34b54 3e269c3c bb5115ea 3cadbb2c f  3df9f56a 3eb73b1f bb3549e3 be8b828d f\n\
        3e044efe 3e26b291 bc069bc9 3c9e5755 f  3e07a47c 3eb74fa0 bc00465f be8d475a f\n\
        3e0ef997 3e26eeb6 bc5ab17a 3c69c5a6 f  3e125049 bd02b1fd bc560491 3e9afcd1 f\n\
        3e11a8fe 3e2751b6 bbe5a6ce 3bc28538 f  3e1501ab bd01873b bbe1c2dc 3e97c1b6 f\n\
        3e145bdf 3e2785cf ba7c19da 3acb6a39 f  3e17b596 bd01127a ba73f6e2 3e967e29 f\n\
        3e171060 3e278ce7 3ba222a0 3a7a57ef f  3e1a6a3c 3eb7a421 3ba2c2d8 be949035 f\n\
        3e21c2b8 3e2767bd ba5b3304 3b85c7ae f  3e251bd5 3eb79c77 ba45cb63 be93e5fb f\n\
        3e2c7403 3e276db3 bbd608c2 3b6aad03 f  3e2fcd3f bd011e88 bbd3affd 3e96a0d5 f\n\
        S 3fc5f9a7dcce9b7a bfa023d108e6fb6c bf7a75ffa85c9194 3fd2d41a99ea530a\n\
        T bfa47ae147ae147b 3f9eb851eb851eb8 bf947ae147ae147b 3f847ae147ae147b\n\
        A 010101010101010101010101010101010101010101\n\
        bd2161e5 be28c910 bca2339c 3e97b572 f  bd2ee29f 3cfa6bec bc634f41 bb27717b f\n\
        bd2c618a be284bb0 bc642595 3e9249b1 f  bd39d83c 3cfdad85 bc0685c7 bc39866a f\n\
        bd374ed2 be27f93e bc0a3bab 3e8eb950 f  bd44beeb 3cffa0bc bb3b8f26 bc87c712 f\n\
        bd423083 be27cf2b bb51489a 3e8ce78f f  bd4f9d3f 3d002b26 3b176e98 bc976c4a f\n\
        bd4d0d06 be27cbee 3afe689e 3e8cc335 f  bd5a797f 3cffd6c6 3bf3c738 bc8c7014 f\n\
        bd57ea8d be27eef6 3be88b0e 3e8e45f8 f  bd6559d3 3cfe22e0 3c4f5397 bc4dc2c7 f\n\
        bd62cf3d be2838a8 3c4b3618 3e917439 f  bd704469 3cfb3393 3c9426a3 bb988e06 f\n\
        bd6dc155 be28aa5a 3c93635e 3e965cf6 f  bd7b3f9a 3cf6fa11 3cc3811d 3bdc4ed8 f\n\
        bd78c757 be294658 3cc49b1c 3e9d1a0e f  bd83290b 3cf15f82 3cf6e0e3 3cb2c1e0 f\n\
        bd81f416 be2a0fef 3cfa7420 3ea5d0b4 f  bd88c186 3cea44a3 3d17c1db 3d27d141 f\n\
        bd8795a9 be2b0b78 3d1b1d14 3eb0b234 f  bd8e6d29 3ce18131 3d37628d 3d844f80 f\n\
        bd8d4c84 be2c3e6d 3d3cad69 3ebdfcf4 f  bd94304a 3cd6e337 3d5b1353 3dbeff53 f\n\
        bd931d3c be2daf7d 3d62b723 3ecdfdc4 f  bd9a0fc6 3cca2e3a 3d81d645 3e02a855 f\n\
        bd990cfc be2f66a0 3d871034 3ee11171 f  bda01117 3cbb1a56 3d991199 3e2c70f8 f\n\
        bd9f2199 be316d30 3d9ff766 3ef7a6aa f  bda63a72 3ca95364 3db3c74a 3e5dd028 f\n\
        bda561b5 be33cdf7 3dbca6a8 3f092016 f  bdac92e8 3c947853 3dd2974f 3e8bf485 f\n\
        bdabd4dd be369537 3dddc998 3f18bb9c f  bdb32283 3c7835db 3df63988 3eae0899 f\n\
        bdb283a8 be39d08b 3e0212de 3f2aff28 f  bdb9f266 3c3f811a 3e0fc0e2 3ed5eb96 f\n\
        bdb977d6 be3d8eb2 3e184f6d 3f4051fe f  bdc10ce8 3bfb9186 3e27b225 3f02425a f\n\
        bdc0bc67 be41deff 3e321dda 3f592ad9 f  bdc87da5 3b47e348 3e437d71 3f1d6f54 f\n\
        bdc85da9 be46d05d 3e5015b5 3f761123 f  bdd05184 bb13e97b 3e63c528 3f3d1572 t\n\
        S bfba0a307c33ec0a bf627d2f6b3da780 3fcc78a5058ebf66 3fe7a2ae4d091452\n\
        T 0000000000000000 0000000000000000 0000000000000000 0000000000000000\n\
        A 111111111\n\
        00000000 3e47ce0c 00000000 be95da89 f  3b7fc010 3ec7ce0c bbbfd00c bf15da89 f\n\
        3c3fd00c 3f15dfe1 bc8fdc09 bf614046 f  3cbfd377 3f47e2bc bd100296 bf96c9f8 f\n\
        3d1fe05e 3f79f2fc bd7083d8 bfbda2dc f  3d6fdc34 3f96090c bdb4f0eb bfe55ef8 f\n\
        3da7f0ff 3faf1f64 bdfe56fd c007167a f  3ddffb0a 3fc83a0d be2a65e3 c01c1a05 f\n\
        3e1006cf 3fe1542b be5c59bb c031c8e4 t\n\
        S 3fc200d9de842c9c 3ffc2a85663aba96 bfcb8b376b67e094 c006391c8dde47f5\n\
        T 4002666666666666 3fe0000000000000 3f847ae147ae147b 0000000000000000\n\
        A 1101101\n\
        4013d70a 3f31ea05 3c23d70a be943acd f  4014bac5 3f63d418 3b89f22d bf143ae1 f\n\
        4015de64 3f31dcbc bbf185d6 be91edca f  4016c20e 3f63d715 bc5627e7 bf147bea f\n\
        4017e5b1 3f8aeb38 bcca1b94 bf607525 f  40194952 3f63f976 bd2ce15b bf178ad1 f\n\
        401a6d21 3f8b08fd bd5d5fb2 bf65cb73 t\n\
        S 40034da421f287ec 3ff1611faa27f290 bfababf6438df2ac bfecb96e5eba22ee\n\
        T bf9eb851eb851eb8 bfc999999999999a bfc3333333333333 bfe3333333333333\n\
        A 0010010010010010010010010010010010010010\n\
        bd0b4396 bec91545 be25e354 beb75508 f  bd2b6ff2 bf15d1d8 be2d38a6 bdf6d96c f\n\
        bd5b612d bec6ba9a be2fb095 beec4281 f  bd7b2d1d bf149a24 be3923e2 be68d4b8 f\n\
        bd955d4d bf45ca34 be3dcbfa 3b566367 f  bdb502c6 bf134c92 be3dbad4 beaef191 f\n\
        bdcc9425 bf447803 be44ba40 bde6c2d0 f  bdec0381 bf7599f8 be4708ff 3de904a3 f\n\
        be09a7ac bf4317cb be44b479 be6efbe0 f  be19432c bf743a4a be497c12 bbe2607c f\n\
        be2cccf5 bf92ab39 be49a04a 3e5f0b8d f  be444483 bf72d36c be452a4c be0510c5 f\n\
        be57b196 bf91fa75 be47d398 3dc55366 f  be6f0cdc bfaa8994 be45da71 3ea4b35c f\n\
        be852b09 bf914957 be3f43e8 bcce3b76 f  be90ca81 bfa9dd79 be3fc7e5 3e502110 f\n\
        be9e6157 bfc2718b be3b9e46 3edcedd0 f  beadef8b bfa93461 be32c7f6 3db26abb f\n\
        bebb78db bfc1cfe1 be30ff36 3ea3db51 f  becafa20 bfda6cf0 be2a7152 3f0db959 f\n\
        bedc737b bfc134fd be1f1ad0 3e5a93a3 f  beebe85c bfd9dc10 be1abbb3 3ee820bd f\n\
        befd5620 bff28667 be1172b6 3f31e325 f  bf085e85 bfd9566e be033794 3eb8dcf4 f\n\
        bf11100e bff20d99 bdf7a529 3f1c5a1e f  bf1abeae c00564e4 bddea0fb 3f5cefc6 f\n\
        bf256a97 bff1a577 bdbb476b 3f09ca70 f  bf2f150c c00538bb bda53b82 3f4cff62 f\n\
        bf39bd6d c011a20c bd846ecf 3f88943b f  bf4563fe c005182d bd317482 3f41386a f\n\
        bf5009c4 c0118ad8 bce73fca 3f8449ff f  bf5bae79 c01e0163 bbf7ad40 3fa899e8 f\n\
        bf68526c c01182f5 3c99e3ed 3f82d612 f  bf73f680 c01e03da 3d20ae2b 3fa90c06 f\n\
        bf804d53 c02a887c 3d866f69 3fd00c59 f  bf871f95 c01e1938 3dc902b9 3fad4b0b f\n\
        bf8d7283 c02aa7e1 3e003b73 3fd678a8 f  bf944607 c0373899 3e228c31 40004941 f\n\
        bf9b9a36 c02adc08 3e4b9965 3fe1e6fd f  bfa26fd0 c037735f 3e6fbe5a 40072eaf t\n\
        S bff44df9fdf7d277 c006ee6bd2c9dfc9 3fcdf7cb430c05b6 4000e5d5d2619b6a\n\
    ";

    /// One golden trajectory: initial state, actions, per step the observation bits and the
    /// terminated flag, and the final state.
    struct Trajectory {
        init: [f64; 4],
        actions: Vec<i64>,
        steps: Vec<([u32; 4], bool)>,
        last: [f64; 4],
    }

    fn f64s<'a>(tokens: &mut impl Iterator<Item = &'a str>) -> [f64; 4] {
        std::array::from_fn(|_| f64::from_bits(u64::from_str_radix(tokens.next().unwrap(), 16).unwrap()))
    }

    fn parse_golden() -> Vec<Trajectory> {
        let mut out: Vec<Trajectory> = Vec::new();
        let mut tokens = GOLDEN.split_whitespace();
        while let Some(tok) = tokens.next() {
            match tok {
                "T" => out.push(Trajectory {
                    init: f64s(&mut tokens),
                    actions: Vec::new(),
                    steps: Vec::new(),
                    last: [f64::NAN; 4],
                }),
                "S" => out.last_mut().unwrap().last = f64s(&mut tokens),
                "A" => {
                    let t = out.last_mut().unwrap();
                    let actions = tokens.next().unwrap().bytes();
                    t.actions = actions.map(|b| i64::from(b - b'0')).collect();
                }
                first => {
                    let mut bits = [u32::from_str_radix(first, 16).unwrap(); 4];
                    for b in &mut bits[1..] {
                        *b = u32::from_str_radix(tokens.next().unwrap(), 16).unwrap();
                    }
                    let terminated = match tokens.next().unwrap() {
                        "t" => true,
                        "f" => false,
                        other => panic!("bad flag {other}"),
                    };
                    out.last_mut().unwrap().steps.push((bits, terminated));
                }
            }
        }
        out
    }

    #[test]
    fn golden_trajectories_match_gymnasium_bit_for_bit() {
        // Observations are compared as f32 bits, the final states as f64 bits.
        let golden = parse_golden();
        assert_eq!(golden.len(), 5);
        assert_eq!(golden.iter().filter(|t| t.steps.last().unwrap().1).count(), 4);
        let mut env = CartPole::new();
        let mut obs = [0.0f32; 4];
        for (i, traj) in golden.iter().enumerate() {
            assert_eq!(traj.actions.len(), traj.steps.len());
            env.reset(Some(0), &mut obs);
            env.set_state(traj.init);
            for (t, (&action, &(bits, terminated))) in traj.actions.iter().zip(&traj.steps).enumerate() {
                let step = env.step(&[action], &mut obs);
                assert_eq!(obs.map(f32::to_bits), bits, "trajectory {i} step {t}: {obs:?}");
                assert_eq!(step.terminated, terminated, "trajectory {i} step {t}");
                assert_eq!(step.reward, 1.0);
                assert!(!step.truncated);
            }
            assert_eq!(env.state().map(f64::to_bits), traj.last.map(f64::to_bits), "trajectory {i}");
        }
    }

    #[test]
    fn reward_is_zero_after_termination_until_reset() {
        let mut env = CartPole::new();
        let mut obs = [0.0f32; 4];
        env.reset(Some(1), &mut obs);
        env.set_state([2.39, 1.0, 0.0, 0.0]);
        let first = env.step(&[1], &mut obs);
        assert!(first.terminated && first.reward == 1.0);
        let after = env.step(&[1], &mut obs);
        assert!(after.terminated && after.reward == 0.0);
        env.reset(None, &mut obs);
        assert_eq!(env.step(&[0], &mut obs).reward, 1.0);
    }

    #[test]
    fn truncates_at_exactly_500_steps() {
        let mut env = CartPole::new();
        let mut obs = [0.0f32; 4];
        env.reset(Some(3), &mut obs);
        for t in 1..=600u32 {
            env.set_state([0.0, 0.0, 0.0, 0.0]);
            let step = env.step(&[(t % 2).into()], &mut obs);
            assert!(!step.terminated);
            assert_eq!(step.truncated, t >= 500, "step {t}");
            assert_eq!(step.reward, 1.0);
        }
        // A reset restarts the count; a termination on step 500 sets both flags, as `TimeLimit`.
        env.reset(Some(3), &mut obs);
        for t in 1..=500u32 {
            env.set_state(if t == 500 { [2.4, 1.0, 0.0, 0.0] } else { [0.0; 4] });
            let step = env.step(&[1], &mut obs);
            assert_eq!((step.terminated, step.truncated), (t == 500, t == 500), "step {t}");
        }
    }

    #[test]
    fn seeding_is_deterministic_and_reset_obs_is_small() {
        let mut a = CartPole::new();
        let mut b = CartPole::new();
        let (mut oa, mut ob) = ([0.0f32; 4], [0.0f32; 4]);
        for seed in 0..50u64 {
            a.reset(Some(seed), &mut oa);
            b.reset(Some(seed), &mut ob);
            assert_eq!(oa, ob);
            assert_eq!(a.state(), b.state());
            assert!(a.state().iter().all(|s| (-0.05..0.05).contains(s)), "{:?}", a.state());
            assert_eq!(oa, a.state().map(|s| s as f32));
            b.reset(Some(seed + 1), &mut ob);
            assert_ne!(oa, ob);
            // Without a seed both continue the stream of their last seed.
            a.reset(None, &mut oa);
            b.reset(Some(seed), &mut ob);
            b.reset(None, &mut ob);
            assert_eq!(oa, ob);
        }
        let mut c = CartPole::new();
        for _ in 0..1000 {
            c.reset(None, &mut oa);
            assert!(c.state().iter().all(|s| (-0.05..0.05).contains(s)));
        }
    }

    #[test]
    fn spaces_match_gymnasium() {
        let env = CartPole::new();
        let Space::Box { dtype, shape, low, high } = env.observation_space() else { panic!("not a Box") };
        assert_eq!((dtype, shape), (DType::F32, vec![4]));
        assert_eq!(high, [4.800000190734863, f64::INFINITY, 0.41887903213500977, f64::INFINITY]);
        assert_eq!(low, high.iter().map(|h| -h).collect::<Vec<_>>());
        assert_eq!(env.action_space(), Space::Discrete { n: 2, start: 0 });
    }

    #[test]
    #[should_panic(expected = "CartPole action 2 is out of range: valid actions are 0 and 1")]
    fn out_of_range_action_panics() {
        let mut env = CartPole::new();
        let mut obs = [0.0f32; 4];
        env.reset(Some(0), &mut obs);
        env.step(&[2], &mut obs);
    }
}
