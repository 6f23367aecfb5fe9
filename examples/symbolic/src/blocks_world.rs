//! `BlocksWorld-v0`: a symbolic blocks world with a random goal configuration per episode.
//!
//! `N` blocks (2 to 8, default 4) stand in towers on a table. The state is a set of base facts
//! `on(x, y)` (block `x` stands on block `y`) and `on_table(x)`; the derived facts `clear(x)`
//! (nothing stands on `x`) and `above(x, y)` (the transitive closure of `on`) come from a tiny
//! forward-chaining rule engine: facts are a bitset, rules are functions from the known facts to
//! the facts they derive, and the rules are applied together until nothing new appears. This
//! engine is the env's own (a `Copy` bitset of three words, laid out for 8 blocks), not this
//! crate's general [`crate::facts`] / [`crate::rules`].
//!
//! - Reset draws a random goal configuration and a different random initial configuration
//!   (each made by shuffling the blocks and dropping them one by one on the table or on top of an
//!   existing tower, uniformly), from the [`EnvRng`] the worker gives it (seeded
//!   with `Pcg64::seed_from_u64(seed)`). Stepped on its own, [`BlocksWorld::reset`] keeps its own
//!   generator the same way: with `None` the env continues its stream, and a first reset with
//!   `None` seeds it from OS entropy.
//! - Arguments (`env_kwargs` from Python, [`BlocksWorldArgs`]): `num_blocks`, 2 to 8, default 4.
//! - Action: `Discrete(N * (N + 1))`; action `a = x * (N + 1) + y` moves block `x = a / (N + 1)`
//!   onto block `y = a % (N + 1)`, `y == N` meaning the table. A move is legal when `x` is clear,
//!   `x != y` and `y` is the table or a clear block (so moving a table block to the table is a
//!   legal move that changes nothing, and moving a block onto the one it stands on is illegal).
//!   An illegal move leaves the state unchanged. An action outside `0..N * (N + 1)` panics.
//! - Reward: `+1.0` on the step that reaches the goal (which also sets `terminated`), otherwise
//!   `-0.01` for a legal move and `-0.1` for an illegal one.
//! - Truncated: on the 100th step after a reset and every step after it (like Gymnasium's
//!   `TimeLimit`, even when that step also terminates).
//! - Observation: `Box(0, 1, (2 * N * (N + 1) + N,), uint8)`, three parts in order:
//!   1. the current `on` relation as an `N x (N + 1)` row-major matrix: element `x * (N + 1) + y`
//!      is 1 when `on(x, y)`, and column `N` (element `x * (N + 1) + N`) is `on_table(x)`;
//!   2. `clear(x)` for each block `x` (`N` elements);
//!   3. the goal's `on` relation as an `N x (N + 1)` matrix, encoded like part 1.
//!
//! ```
//! use symbolic::blocks_world::{BlocksWorld, Fact};
//!
//! let mut env = BlocksWorld::new(3);
//! let mut obs = [0u8; 2 * 3 * 4 + 3];
//! env.reset(Some(7), &mut obs);
//! assert!(obs.iter().all(|&v| v <= 1));
//! // Each block stands on exactly one thing, so each row of the `on` matrix has a single 1.
//! assert!(obs[..12].chunks(4).all(|row| row.iter().sum::<u8>() == 1));
//! // Moving a block onto itself is illegal: -0.1, and nothing changes.
//! let before = obs;
//! let step = env.step(&[0], &mut obs);
//! assert_eq!((step.reward, step.terminated, obs), (-0.1, false, before));
//! assert_eq!(env.holds(Fact::Clear(0)), obs[12] == 1);
//! ```

use ringenv_worker::rand::seq::SliceRandom;
use ringenv_worker::rand::{Rng, SeedableRng};
use ringenv_worker::{Ctx, DType, Env, EnvRng, Space, Step};

/// Largest number of blocks; the fact bitset is laid out for this many.
const MAX: usize = 8;

/// A ground fact about the blocks (block indices in `0..N`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fact {
    /// Base fact: block `.0` stands directly on block `.1`.
    On(usize, usize),
    /// Base fact: block `.0` stands on the table.
    OnTable(usize),
    /// Derived: nothing stands on block `.0`.
    Clear(usize),
    /// Derived: block `.0` is somewhere above block `.1` in the same tower.
    Above(usize, usize),
}

impl Fact {
    /// The base fact that `x` stands on `y`, `y == n` meaning the table.
    fn stands_on(x: usize, y: usize, n: usize) -> Fact {
        if y == n {
            Fact::OnTable(x)
        } else {
            Fact::On(x, y)
        }
    }

    /// Whether every block the fact names is below `n`.
    fn blocks_below(self, n: usize) -> bool {
        match self {
            Fact::On(x, y) | Fact::Above(x, y) => x < n && y < n,
            Fact::OnTable(x) | Fact::Clear(x) => x < n,
        }
    }
    /// The fact's bit in a [`Facts`] set.
    fn bit(self) -> usize {
        match self {
            Fact::On(x, y) => x * MAX + y,
            Fact::OnTable(x) => MAX * MAX + x,
            Fact::Clear(x) => MAX * MAX + MAX + x,
            Fact::Above(x, y) => MAX * MAX + 2 * MAX + x * MAX + y,
        }
    }
}

/// A set of facts as a bitset (bits `0..MAX * MAX + MAX` are the base facts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Facts([u64; 3]);

impl Facts {
    fn has(&self, f: Fact) -> bool {
        self.0[f.bit() / 64] >> (f.bit() % 64) & 1 == 1
    }
    fn add(&mut self, f: Fact) {
        self.0[f.bit() / 64] |= 1 << (f.bit() % 64);
    }
    fn remove(&mut self, f: Fact) {
        self.0[f.bit() / 64] &= !(1 << (f.bit() % 64));
    }
    fn union(self, other: Facts) -> Facts {
        Facts(std::array::from_fn(|i| self.0[i] | other.0[i]))
    }
    /// Only the base facts (`on`, `on_table`): bits 0..72 are word 0 and the low byte of word 1.
    fn base(self) -> Facts {
        Facts([self.0[0], self.0[1] & 0xff, 0])
    }
}

impl FromIterator<Fact> for Facts {
    fn from_iter<I: IntoIterator<Item = Fact>>(facts: I) -> Facts {
        let mut set = Facts::default();
        facts.into_iter().for_each(|f| set.add(f));
        set
    }
}

/// A rule: given the facts known so far and the number of blocks, the facts it derives.
type Rule = fn(&Facts, usize) -> Facts;

/// `clear(x) :- not on(y, x) for every y`. The negation is over `on`, a base relation no rule
/// derives, so applying it in the same fixpoint as the other rules is sound.
fn rule_clear(f: &Facts, n: usize) -> Facts {
    (0..n).filter(|&x| !(0..n).any(|y| f.has(Fact::On(y, x)))).map(Fact::Clear).collect()
}

/// `above(x, y) :- on(x, y)`.
fn rule_above_on(f: &Facts, n: usize) -> Facts {
    pairs(n).filter(|&(x, y)| f.has(Fact::On(x, y))).map(|(x, y)| Fact::Above(x, y)).collect()
}

/// `above(x, z) :- on(x, y), above(y, z)`.
fn rule_above_chain(f: &Facts, n: usize) -> Facts {
    let chains = pairs(n).flat_map(|(x, y)| (0..n).map(move |z| (x, y, z)));
    let derivable = |&(x, y, z): &(usize, usize, usize)| f.has(Fact::On(x, y)) && f.has(Fact::Above(y, z));
    chains.filter(derivable).map(|(x, _, z)| Fact::Above(x, z)).collect()
}

const RULES: [Rule; 3] = [rule_clear, rule_above_on, rule_above_chain];

fn pairs(n: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n).flat_map(move |x| (0..n).map(move |y| (x, y)))
}

/// Forward chaining: the base facts of `facts` plus everything [`RULES`] derive from them.
fn derive(facts: Facts, n: usize) -> Facts {
    let mut known = facts.base();
    loop {
        let next = RULES.iter().fold(known, |acc, rule| acc.union(rule(&known, n)));
        if next == known {
            return known;
        }
        known = next;
    }
}

/// A random configuration: blocks in random order, each dropped on the table or on the top of
/// one of the towers so far, chosen uniformly.
fn random_config(rng: &mut EnvRng, n: usize) -> Facts {
    let mut order: [usize; MAX] = std::array::from_fn(|i| i);
    order[..n].shuffle(rng);
    let mut tops = [0usize; MAX];
    let mut towers = 0;
    let mut facts = Facts::default();
    for &b in &order[..n] {
        let t = rng.random_range(0..=towers);
        if t == towers {
            facts.add(Fact::OnTable(b));
            towers += 1;
        } else {
            facts.add(Fact::On(b, tops[t]));
        }
        tops[t] = b;
    }
    facts
}

/// A symbolic blocks world (see the [module docs](self)): `u8` observations of length
/// `2 * N * (N + 1) + N`, `i64` actions in `0..N * (N + 1)`.
#[derive(Clone, Debug)]
pub struct BlocksWorld {
    n: usize,
    /// Current base and derived facts.
    state: Facts,
    /// Goal base facts.
    goal: Facts,
    /// The generator of [`BlocksWorld::reset`] (stepping on its own); `None` until its first
    /// call. Workers give the env theirs instead.
    rng: Option<EnvRng>,
    elapsed_steps: u32,
    started: bool,
}

/// The keyword arguments of `BlocksWorld-v0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct BlocksWorldArgs {
    /// Number of blocks, 2 to 8.
    pub num_blocks: usize,
}

impl Default for BlocksWorldArgs {
    /// Four blocks.
    fn default() -> Self {
        BlocksWorldArgs { num_blocks: 4 }
    }
}

impl Default for BlocksWorld {
    /// Four blocks.
    fn default() -> Self {
        Self::new(4)
    }
}

impl BlocksWorld {
    /// Steps after which an episode is truncated.
    pub const MAX_EPISODE_STEPS: u32 = 100;

    /// A world of `num_blocks` blocks; call [`Env::reset`] before stepping it.
    ///
    /// # Panics
    /// If `num_blocks` is not in `2..=8`.
    pub fn new(num_blocks: usize) -> Self {
        assert!((2..=MAX).contains(&num_blocks), "BlocksWorld supports 2 to {MAX} blocks, got {num_blocks}");
        BlocksWorld {
            n: num_blocks,
            state: Facts::default(),
            goal: Facts::default(),
            rng: None,
            elapsed_steps: 0,
            started: false,
        }
    }

    /// A world of `num_blocks` blocks, or why not.
    ///
    /// # Errors
    /// When `num_blocks` is not in `2..=8` (the message names it).
    pub fn try_new(num_blocks: usize) -> Result<Self, String> {
        if (2..=MAX).contains(&num_blocks) {
            Ok(Self::new(num_blocks))
        } else {
            Err(format!("num_blocks must be an integer from 2 to {MAX}, got {num_blocks}"))
        }
    }

    /// Resets with the env's own generator: re-seeded by `Some(seed)`, continued by `None` (for
    /// stepping the env on its own; workers call [`Env::reset`] with theirs).
    pub fn reset(&mut self, seed: Option<u64>, obs: &mut [u8]) {
        let mut rng = match (seed, self.rng.take()) {
            (Some(seed), _) => EnvRng::seed_from_u64(seed),
            (None, Some(rng)) => rng,
            (None, None) => EnvRng::from_os_rng(),
        };
        self.start(&mut rng, obs);
        self.rng = Some(rng);
    }

    /// Applies `action` (see the module docs) and writes the next observation into `obs`.
    ///
    /// # Panics
    /// When the action is outside `0..N * (N + 1)`, or no reset came first.
    pub fn step(&mut self, action: &[i64], obs: &mut [u8]) -> Step {
        self.advance(action, obs)
    }

    fn start(&mut self, rng: &mut EnvRng, obs: &mut [u8]) {
        self.goal = random_config(rng, self.n);
        let mut init = random_config(rng, self.n);
        while init == self.goal {
            init = random_config(rng, self.n);
        }
        self.state = derive(init, self.n);
        self.elapsed_steps = 0;
        self.started = true;
        self.write_obs(obs);
    }

    fn advance(&mut self, action: &[i64], obs: &mut [u8]) -> Step {
        let (n, w) = (self.n, self.n + 1);
        let (a, count) = (action[0], (n * w) as i64);
        assert!((0..count).contains(&a), "BlocksWorld action {a} is out of range: valid actions are 0..{count}");
        assert!(self.started, "BlocksWorld: call reset before step");
        let (x, y) = (a as usize / w, a as usize % w);
        let legal = x != y && self.state.has(Fact::Clear(x)) && (y == n || self.state.has(Fact::Clear(y)));
        let mut reward = -0.1;
        let mut terminated = false;
        if legal {
            // `x` is clear, so only the fact of what `x` stands on changes.
            let mut base = self.state.base();
            base.remove(Fact::OnTable(x));
            (0..n).for_each(|z| base.remove(Fact::On(x, z)));
            base.add(Fact::stands_on(x, y, n));
            self.state = derive(base, n);
            terminated = self.state.base() == self.goal;
            reward = if terminated { 1.0 } else { -0.01 };
        }
        self.elapsed_steps = self.elapsed_steps.saturating_add(1);
        let truncated = self.elapsed_steps >= Self::MAX_EPISODE_STEPS;
        self.write_obs(obs);
        Step { reward, terminated, truncated }
    }

    /// The number of blocks `N`.
    pub fn num_blocks(&self) -> usize {
        self.n
    }

    /// The length of the observation, `2 * N * (N + 1) + N`.
    pub fn obs_len(&self) -> usize {
        2 * self.n * (self.n + 1) + self.n
    }

    /// Whether `fact` (base or derived) holds in the current state; false for a fact naming a
    /// block outside `0..N`.
    pub fn holds(&self, fact: Fact) -> bool {
        fact.blocks_below(self.n) && self.state.has(fact)
    }

    /// Whether `fact` is one of the goal's `on` / `on_table` facts (never a derived fact).
    pub fn goal_has(&self, fact: Fact) -> bool {
        let base = matches!(fact, Fact::On(..) | Fact::OnTable(_));
        base && fact.blocks_below(self.n) && self.goal.has(fact)
    }

    fn write_obs(&self, obs: &mut [u8]) {
        let (n, w) = (self.n, self.n + 1);
        assert_eq!(obs.len(), self.obs_len(), "BlocksWorld observation length");
        let (on, rest) = obs.split_at_mut(n * w);
        let (clear, goal) = rest.split_at_mut(n);
        for x in 0..n {
            for y in 0..w {
                let fact = Fact::stands_on(x, y, n);
                on[x * w + y] = self.state.has(fact).into();
                goal[x * w + y] = self.goal.has(fact).into();
            }
            clear[x] = self.state.has(Fact::Clear(x)).into();
        }
    }
}

impl Env for BlocksWorld {
    type Obs = u8;
    type Action = i64;

    fn observation_space(&self) -> Space {
        Space::boxed(DType::U8, &[self.obs_len()], 0.0, 1.0)
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: (self.n * (self.n + 1)) as i64, start: 0 }
    }

    fn reset(&mut self, obs: &mut [u8], ctx: &mut Ctx) {
        self.start(ctx.rng(), obs);
    }

    fn step(&mut self, action: &[i64], obs: &mut [u8], _ctx: &mut Ctx) -> Step {
        self.advance(action, obs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Facts of a configuration given as `below[x]` (`n` meaning the table), with derivations.
    fn config(below: &[usize]) -> Facts {
        let n = below.len();
        derive(below.iter().enumerate().map(|(x, &y)| Fact::stands_on(x, y, n)).collect(), n)
    }

    fn action(env: &BlocksWorld, x: usize, y: usize) -> i64 {
        (x * (env.n + 1) + y) as i64
    }

    #[test]
    fn rules_derive_clear_and_above() {
        // Towers 0 on 1 on 2 on table, and 3 on table.
        let n = 4;
        let facts = config(&[1, 2, n, n]);
        let clear: Vec<usize> = (0..n).filter(|&x| facts.has(Fact::Clear(x))).collect();
        assert_eq!(clear, [0, 3]);
        let above: Vec<_> = pairs(n).filter(|&(x, y)| facts.has(Fact::Above(x, y))).collect();
        assert_eq!(above, [(0, 1), (0, 2), (1, 2)]);
        // A single tower of 8 needs several chaining rounds: above is every (higher, lower) pair.
        let facts = config(&[1, 2, 3, 4, 5, 6, 7, 8]);
        for (x, y) in pairs(8) {
            assert_eq!(facts.has(Fact::Above(x, y)), x < y, "above({x}, {y})");
        }
        assert_eq!((0..8).filter(|&x| facts.has(Fact::Clear(x))).count(), 1);
    }

    /// A plan read off the `above` facts: every block not on the table goes to the table, highest
    /// first (so each is clear when moved), then the goal is built bottom-up.
    fn plan(env: &BlocksWorld) -> Vec<i64> {
        let n = env.n;
        let goal = derive(env.goal, n);
        let height = |f: &Facts, x: usize| (0..n).filter(|&z| f.has(Fact::Above(x, z))).count();
        let mut down: Vec<usize> = (0..n).filter(|&x| !env.holds(Fact::OnTable(x))).collect();
        down.sort_by_key(|&x| std::cmp::Reverse(height(&env.state, x)));
        let mut up: Vec<_> = pairs(n).filter(|&(x, y)| goal.has(Fact::On(x, y))).collect();
        up.sort_by_key(|&(x, _)| height(&goal, x));
        let down = down.into_iter().map(|x| action(env, x, n));
        down.chain(up.into_iter().map(|(x, y)| action(env, x, y))).collect()
    }

    #[test]
    fn scripted_solver_reaches_the_goal() {
        for n in [2, 3, 4, 8] {
            let mut env = BlocksWorld::new(n);
            let mut obs = vec![0u8; env.obs_len()];
            for seed in 0..25 {
                env.reset(Some(seed), &mut obs);
                assert_ne!(env.state.base(), env.goal, "start equals goal");
                let plan = plan(&env);
                let mut steps = plan.iter().map(|&a| env.step(&[a], &mut obs));
                let mut last = steps.next().unwrap();
                while !last.terminated {
                    assert_eq!((last.reward, last.truncated), (-0.01, false));
                    last = steps.next().expect("the plan ended before the goal");
                }
                assert_eq!((last.reward, last.truncated), (1.0, false));
                assert_eq!(env.state.base(), env.goal);
                // The observation's current `on` matrix now equals its goal matrix.
                let m = n * (n + 1);
                assert_eq!(obs[..m], obs[m + n..]);
            }
        }
    }

    #[test]
    fn illegal_moves_cost_and_change_nothing() {
        let n = 4;
        let mut env = BlocksWorld::new(n);
        let mut obs = vec![0u8; env.obs_len()];
        env.reset(Some(5), &mut obs);
        env.state = config(&[1, 2, n, n]);
        env.goal = config(&[n, n, n, 0]).base();
        env.write_obs(&mut obs);
        let (state, before) = (env.state, obs.clone());
        // Block onto itself, a covered block moved, a block onto a covered block.
        for (x, y) in [(3, 3), (1, n), (2, 3), (3, 1), (3, 2)] {
            let step = env.step(&[action(&env, x, y)], &mut obs);
            assert_eq!((step.reward, step.terminated), (-0.1, false), "move {x} onto {y}");
            assert_eq!((env.state, &obs), (state, &before));
        }
        // Legal: 0 onto 3, then 1 becomes clear and can go to the table.
        assert_eq!(env.step(&[action(&env, 0, 3)], &mut obs).reward, -0.01);
        assert!(env.holds(Fact::On(0, 3)) && env.holds(Fact::Clear(1)) && !env.holds(Fact::Clear(3)));
        assert!(!env.holds(Fact::On(0, 1)) && !env.holds(Fact::Above(0, 2)));
        assert_eq!(env.step(&[action(&env, 1, n)], &mut obs).reward, -0.01);
        assert_eq!(env.state, config(&[3, n, n, n]));
    }

    #[test]
    fn truncates_at_100_steps() {
        let mut env = BlocksWorld::default();
        let mut obs = vec![0u8; env.obs_len()];
        env.reset(Some(9), &mut obs);
        for t in 1..=150u32 {
            let step = env.step(&[action(&env, 0, 0)], &mut obs);
            assert_eq!((step.terminated, step.truncated), (false, t >= 100), "step {t}");
        }
        env.reset(None, &mut obs);
        assert!(!env.step(&[0], &mut obs).truncated);
    }

    #[test]
    fn observations_are_binary_and_match_the_state() {
        let mut env = BlocksWorld::new(5);
        let (n, w) = (5, 6);
        let mut obs = vec![7u8; env.obs_len()];
        assert_eq!(env.observation_space(), Space::boxed(DType::U8, &[2 * n * w + n], 0.0, 1.0));
        assert_eq!(env.action_space(), Space::Discrete { n: 30, start: 0 });
        let mut rng = EnvRng::seed_from_u64(1);
        env.reset(Some(1), &mut obs);
        for _ in 0..300 {
            let step = env.step(&[rng.random_range(0..30)], &mut obs);
            assert!(obs.iter().all(|&v| v <= 1));
            for x in 0..n {
                for y in 0..w {
                    let f = Fact::stands_on(x, y, n);
                    assert_eq!(obs[x * w + y] == 1, env.holds(f));
                    assert_eq!(obs[n * w + n + x * w + y] == 1, env.goal_has(f));
                }
                assert_eq!(obs[n * w + x] == 1, env.holds(Fact::Clear(x)));
                assert_eq!(obs[x * w..x * w + w].iter().sum::<u8>(), 1);
            }
            if step.terminated || step.truncated {
                env.reset(None, &mut obs);
            }
        }
    }

    #[test]
    fn seeds_determine_episodes_and_start_differs_from_goal() {
        let run = |seed: u64| {
            let mut env = BlocksWorld::new(6);
            let mut obs = vec![0u8; env.obs_len()];
            let mut trace = Vec::new();
            env.reset(Some(seed), &mut obs);
            assert_ne!(env.state.base(), env.goal);
            trace.extend_from_slice(&obs);
            for a in (0..60).map(|i| (i * 7) % 42) {
                let step = env.step(&[a], &mut obs);
                trace.extend_from_slice(&obs);
                trace.push(step.terminated.into());
            }
            trace
        };
        for seed in 0..30 {
            assert_eq!(run(seed), run(seed));
            assert_ne!(run(seed), run(seed + 1000));
        }
    }

    #[test]
    fn the_worker_path_equals_stepping_on_its_own() {
        let mut alone = BlocksWorld::new(5);
        let mut obs = vec![0u8; alone.obs_len()];
        let mut hosted = ringenv_worker::LocalEnv::new(BlocksWorld::new(5)).unwrap();
        for seed in [3, 4] {
            alone.reset(Some(seed), &mut obs);
            hosted.reset(Some(seed));
            for t in 0..250i64 {
                let a = [(t * 11) % 30];
                let (x, y) = (alone.step(&a, &mut obs), hosted.step(&a));
                assert_eq!((x, &obs[..]), (y, hosted.obs()), "seed {seed} step {t}");
                if x.terminated || x.truncated {
                    alone.reset(None, &mut obs);
                    hosted.reset(None);
                    assert_eq!(&obs[..], hosted.obs());
                }
            }
        }
    }

    #[test]
    fn try_new_names_the_bad_count() {
        assert_eq!(BlocksWorld::try_new(9).unwrap_err(), "num_blocks must be an integer from 2 to 8, got 9");
        assert_eq!(BlocksWorld::try_new(8).unwrap().num_blocks(), 8);
    }

    #[test]
    #[should_panic(expected = "BlocksWorld action 20 is out of range: valid actions are 0..20")]
    fn out_of_range_action_panics() {
        let mut env = BlocksWorld::new(4);
        let mut obs = vec![0u8; env.obs_len()];
        env.reset(Some(0), &mut obs);
        env.step(&[20], &mut obs);
    }

    #[test]
    fn block_counts_outside_2_to_8_panic() {
        for n in [0, 1, 9] {
            let err = std::panic::catch_unwind(|| BlocksWorld::new(n)).unwrap_err();
            let msg = err.downcast_ref::<String>().unwrap();
            assert_eq!(msg, &format!("BlocksWorld supports 2 to 8 blocks, got {n}"));
        }
        assert_eq!((BlocksWorld::new(2).num_blocks(), BlocksWorld::default().num_blocks()), (2, 4));
    }
}
