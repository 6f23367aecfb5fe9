//! Sokoban for ringenv: a symbolic env written with the `ringenv-worker` SDK, outside ringenv.
//!
//! The player pushes boxes onto goals in one of four small levels (at most 8 x 8 cells). The
//! state is a set of ground facts (`wall(c)`, `goal(c)`, `box(c)`, `player(c)` over the 64 cells
//! `c = row * 8 + column`); forward-chaining rules derive `on_goal(c)`, `dead(c)` (a box off its
//! goal in a corner: it can never move again), `deadlocked` and `solved`.
//!
//! - Action: `Discrete(4)`: 0 up, 1 right, 2 down, 3 left. Walking into a wall, or pushing a box
//!   into a wall or another box, does nothing.
//! - Observation: `Dict(grid: Box(0, 6, (8, 8), uint8), facts: MultiBinary(130))`; `grid` holds
//!   0 wall (also outside the level), 1 floor, 2 goal, 3 box, 4 box on a goal, 5 player, 6 player
//!   on a goal; `facts` is the derived facts: `on_goal(c)` (64), `dead(c)` (64), `deadlocked`,
//!   `solved`.
//! - Reward: -0.1 per step, +1 for pushing a box onto a goal, -1 for pushing one off, +10 on
//!   solving. Terminated when solved, or deadlocked if `end_on_deadlock`; truncated at
//!   `max_steps`. The info of the last step of an episode holds `is_success` and `deadlocked`.
//! - Arguments ([`SokobanArgs`], Python's `env_kwargs`): `level` (a level number, or none for a
//!   random level per episode), `max_steps` (120), `end_on_deadlock` (true). Reset option
//!   `{"level": k}` picks the level of one episode; a level that does not exist panics.
//!
//! ```
//! use custom_env::{Sokoban, SokobanArgs};
//! use ringenv_worker::LocalEnv;
//! let mut env = LocalEnv::new(Sokoban::new(SokobanArgs { level: Some(0), ..Default::default() }).unwrap()).unwrap();
//! env.reset(Some(0));
//! let step = env.step(&[1]); // push the box right, onto its goal
//! assert!(step.terminated && step.reward == -0.1 + 1.0 + 10.0);
//! assert_eq!(env.info().get("is_success"), Some(true.into()));
//! ```

use ringenv_worker::rand::Rng;
use ringenv_worker::{Ctx, DType, Env, Space, Step};
use serde::Deserialize;
use symbolic::facts::{FactSet, Predicate, Schema};
use symbolic::rules::Rules;

/// Side of the (padded) grid.
pub const SIDE: usize = 8;
const CELLS: usize = SIDE * SIDE;

/// The levels: `#` wall, `.` goal, `$` box, `*` box on a goal, `@` player, `+` player on a goal.
pub const LEVELS: [&str; 4] = [
    "#######\n#     #\n# @$. #\n#     #\n#######",
    "########\n#  .   #\n#  $   #\n# @$ . #\n#      #\n########",
    "#######\n#.  ..#\n#  $  #\n# $@$ #\n#     #\n#######",
    "########\n#   #  #\n# $  $ #\n#. ## .#\n#  @   #\n########",
];

/// The keyword arguments of `Sokoban-v0`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct SokobanArgs {
    /// The level of every episode, or `None` for a random level per episode.
    pub level: Option<usize>,
    /// Steps after which an episode is truncated.
    pub max_steps: u32,
    /// Whether a deadlock (a box stuck in a corner off its goal) ends the episode.
    pub end_on_deadlock: bool,
}

impl Default for SokobanArgs {
    fn default() -> Self {
        SokobanArgs { level: None, max_steps: 120, end_on_deadlock: true }
    }
}

/// The predicates of the fact schema.
#[derive(Clone, Copy)]
struct Preds {
    wall: Predicate,
    goal: Predicate,
    boxed: Predicate,
    player: Predicate,
    on_goal: Predicate,
    dead: Predicate,
    deadlocked: Predicate,
    solved: Predicate,
}

/// The Sokoban env (see the crate docs).
pub struct Sokoban {
    args: SokobanArgs,
    p: Preds,
    facts: FactSet,
    rules: Rules<Preds>,
    /// Facts `0..derived_start` are base facts; the rest are derived (and observed).
    derived_start: usize,
    player: usize,
    steps: u32,
}

fn neighbour(c: usize, action: i64) -> Option<usize> {
    let (r, col) = (c / SIDE, c % SIDE);
    let (r, col) = match action {
        0 => (r.checked_sub(1)?, col),
        1 => (r, col + 1),
        2 => (r + 1, col),
        _ => (r, col.checked_sub(1)?),
    };
    (r < SIDE && col < SIDE).then_some(r * SIDE + col)
}

/// The rules, about a dozen lines of logic.
fn rules(len: usize) -> Rules<Preds> {
    let mut rules = Rules::new(len);
    rules
        .add("on_goal(c) :- box(c), goal(c)", |p: &Preds, f, out| {
            for c in 0..CELLS {
                if f.contains(p.boxed.at(&[c])) && f.contains(p.goal.at(&[c])) {
                    out.insert(p.on_goal.at(&[c]));
                }
            }
        })
        .add("dead(c) :- box(c), not goal(c), a wall above or below and one left or right", |p: &Preds, f, out| {
            let wall = |c: Option<usize>| c.is_none_or(|c| f.contains(p.wall.at(&[c])));
            for c in 0..CELLS {
                let stuck = (wall(neighbour(c, 0)) || wall(neighbour(c, 2)))
                    && (wall(neighbour(c, 1)) || wall(neighbour(c, 3)));
                if f.contains(p.boxed.at(&[c])) && !f.contains(p.goal.at(&[c])) && stuck {
                    out.insert(p.dead.at(&[c]));
                }
            }
        })
        .add("deadlocked :- dead(c)", |p: &Preds, f, out| {
            if p.dead.range().any(|i| f.contains(i)) {
                out.insert(p.deadlocked.at(&[]));
            }
        })
        .add("solved :- not (box(c), not goal(c))", |p: &Preds, f, out| {
            if !(0..CELLS).any(|c| f.contains(p.boxed.at(&[c])) && !f.contains(p.goal.at(&[c]))) {
                out.insert(p.solved.at(&[]));
            }
        });
    rules
}

impl Sokoban {
    /// A Sokoban env with `args`.
    ///
    /// # Errors
    /// When `level` is not a level number or `max_steps` is 0 (the message names the argument).
    pub fn new(args: SokobanArgs) -> Result<Sokoban, String> {
        if let Some(level) = args.level.filter(|&l| l >= LEVELS.len()) {
            return Err(format!("level must be below {}, got {level}", LEVELS.len()));
        }
        if args.max_steps == 0 {
            return Err("max_steps must be at least 1".into());
        }
        let mut s = Schema::new();
        let (wall, goal) = (s.predicate("wall", &[CELLS]), s.predicate("goal", &[CELLS]));
        let (boxed, player) = (s.predicate("box", &[CELLS]), s.predicate("player", &[CELLS]));
        let derived_start = s.len();
        let (on_goal, dead) = (s.predicate("on_goal", &[CELLS]), s.predicate("dead", &[CELLS]));
        let (deadlocked, solved) = (s.predicate("deadlocked", &[]), s.predicate("solved", &[]));
        let p = Preds { wall, goal, boxed, player, on_goal, dead, deadlocked, solved };
        Ok(Sokoban { args, p, facts: s.facts(), rules: rules(s.len()), derived_start, player: 0, steps: 0 })
    }

    /// `Sokoban-Tiny-v0`: level 0 (one push from solved), at most 20 steps.
    pub fn tiny() -> Sokoban {
        Sokoban::new(SokobanArgs { level: Some(0), max_steps: 20, end_on_deadlock: true }).expect("valid arguments")
    }

    /// Whether a box stands on cell `c`.
    pub fn has_box(&self, c: usize) -> bool {
        self.facts.contains(self.p.boxed.at(&[c]))
    }

    /// Whether cell `c` is a wall (cells outside the level are walls).
    pub fn is_wall(&self, c: usize) -> bool {
        self.facts.contains(self.p.wall.at(&[c]))
    }

    /// The player's cell.
    pub fn player(&self) -> usize {
        self.player
    }

    /// Whether every box is on a goal.
    pub fn solved(&self) -> bool {
        self.facts.contains(self.p.solved.at(&[]))
    }

    /// Whether a box is stuck in a corner off its goal.
    pub fn deadlocked(&self) -> bool {
        self.facts.contains(self.p.deadlocked.at(&[]))
    }

    fn load(&mut self, level: usize) {
        self.facts.clear();
        (0..CELLS).for_each(|c| {
            self.facts.insert(self.p.wall.at(&[c]));
        });
        for (r, row) in LEVELS[level].lines().enumerate() {
            for (col, ch) in row.chars().enumerate() {
                let c = r * SIDE + col;
                self.facts.set(self.p.wall.at(&[c]), ch == '#');
                self.facts.set(self.p.goal.at(&[c]), matches!(ch, '.' | '*' | '+'));
                self.facts.set(self.p.boxed.at(&[c]), matches!(ch, '$' | '*'));
                if matches!(ch, '@' | '+') {
                    self.player = c;
                }
            }
        }
        self.facts.insert(self.p.player.at(&[self.player]));
        self.derive();
    }

    fn derive(&mut self) {
        self.facts.clear_range(self.derived_start..self.facts.len());
        self.rules.saturate(&self.p, &mut self.facts);
    }

    fn write_obs(&self, grid: &mut [u8], facts: &mut [i8]) {
        for (c, cell) in grid.iter_mut().enumerate() {
            let goal = u8::from(self.facts.contains(self.p.goal.at(&[c])));
            *cell = if self.is_wall(c) {
                0
            } else if c == self.player {
                5 + goal
            } else if self.has_box(c) {
                3 + goal
            } else {
                1 + goal
            };
        }
        self.facts.write_range_to(self.derived_start..self.facts.len(), facts);
    }
}

impl Env for Sokoban {
    type Obs = (u8, i8);
    type Action = i64;

    fn observation_space(&self) -> Space {
        let derived = self.facts.len() - self.derived_start;
        Space::dict([
            ("grid", Space::boxed(DType::U8, &[SIDE, SIDE], 0.0, 6.0)),
            ("facts", Space::multi_binary(derived)),
        ])
    }

    fn action_space(&self) -> Space {
        Space::discrete(4)
    }

    fn reset(&mut self, (grid, facts): (&mut [u8], &mut [i8]), ctx: &mut Ctx) {
        // Always draw, so that the random stream does not depend on the options.
        let random = ctx.rng().random_range(0..LEVELS.len());
        let level = match ctx.options().get("level") {
            Some(v) => v.as_u64().map(|l| l as usize).filter(|&l| l < LEVELS.len()).unwrap_or_else(|| {
                panic!("Sokoban reset option level = {v} is out of range: there are {} levels", LEVELS.len())
            }),
            None => self.args.level.unwrap_or(random),
        };
        self.load(level);
        self.steps = 0;
        self.write_obs(grid, facts);
    }

    fn step(&mut self, action: &[i64], (grid, facts): (&mut [u8], &mut [i8]), ctx: &mut Ctx) -> Step {
        let a = action[0];
        assert!((0..4).contains(&a), "Sokoban action {a} is out of range: valid actions are 0..4");
        let mut reward = -0.1;
        if let Some(next) = neighbour(self.player, a).filter(|&n| !self.is_wall(n)) {
            let beyond = neighbour(next, a).filter(|&b| !self.is_wall(b) && !self.has_box(b));
            let moved = match (self.has_box(next), beyond) {
                (false, _) => true,
                (true, Some(b)) => {
                    let goal = |c: usize| self.facts.contains(self.p.goal.at(&[c]));
                    reward += f32::from(u8::from(goal(b))) - f32::from(u8::from(goal(next)));
                    self.facts.remove(self.p.boxed.at(&[next]));
                    self.facts.insert(self.p.boxed.at(&[b]));
                    true
                }
                (true, None) => false,
            };
            if moved {
                self.facts.remove(self.p.player.at(&[self.player]));
                self.player = next;
                self.facts.insert(self.p.player.at(&[next]));
                self.derive();
            }
        }
        self.steps += 1;
        let solved = self.solved();
        let terminated = solved || (self.args.end_on_deadlock && self.deadlocked());
        let truncated = self.steps >= self.args.max_steps;
        if solved {
            reward += 10.0;
        }
        if terminated || truncated {
            ctx.info().set("is_success", solved);
            ctx.info().set("deadlocked", self.deadlocked());
        }
        self.write_obs(grid, facts);
        Step { reward, terminated, truncated }
    }
}
