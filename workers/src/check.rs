//! `check_env`: the Rust counterpart of Gymnasium's env checker.
//!
//! [`check_env`] steps an env with random actions for `steps` steps, resetting whenever an
//! episode ends, three times over: (1) reset with `seed`: observations in the space, finite
//! rewards, no allocation in `step` (when [`CountingAlloc`] is the global allocator), at least one
//! episode end ([`ProblemKind::NeverEnds`]); (2) a second env, same seed: the same trajectory bit
//! for bit; (3) the first env again, its observation buffers pre-filled with `0xFF`: the same
//! trajectory (else reset keeps state or some elements are never written).
//!
//! A panic ends the check with its message and location; checks that did not run are listed in
//! [`CheckReport::not_run`], and a report that saw no step is not ok. Two envs whose spaces differ
//! are a [`ProblemKind::Spaces`] problem.
//!
//! ```
//! use ringenv_worker::{check_env, envs::CartPole, CheckOptions};
//! let report = check_env(CartPole::new, &CheckOptions { steps: 300, seed: 1 });
//! assert!(report.is_ok(), "{report}");
//! assert_eq!(report.steps, 300);
//! assert!(report.episodes >= 3);
//! ```
//!
//! [`CountingAlloc`]: crate::CountingAlloc

use crate::{alloc, panic, values, Env, EnvRng, Info, LocalEnv, Step};
use rand::SeedableRng;

/// How long and from which seed [`check_env`] runs.
///
/// ```
/// let options = ringenv_worker::CheckOptions { steps: 500, ..Default::default() };
/// assert_eq!((options.steps, options.seed), (500, 0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckOptions {
    /// Steps per run (there are three runs).
    pub steps: usize,
    /// Seed of the first reset of each run, and of the random actions.
    pub seed: u64,
}

impl Default for CheckOptions {
    /// 1000 steps from seed 0.
    fn default() -> CheckOptions {
        CheckOptions { steps: 1000, seed: 0 }
    }
}

/// What kind of problem [`check_env`] found.
///
/// ```
/// use ringenv_worker::{check_env, envs::CartPole, CheckOptions, ProblemKind};
/// let report = check_env(CartPole::new, &CheckOptions { steps: 50, seed: 0 });
/// assert!(!report.has(ProblemKind::NonDeterministic));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// The spaces are malformed or do not match the env's `Obs` / `Action` types.
    Spaces,
    /// The constructor, `reset` or `step` panicked.
    Panic,
    /// An observation lies outside the observation space.
    ObservationOutsideSpace,
    /// A reward is NaN or infinite.
    NonFiniteReward,
    /// The same seed gave a different trajectory.
    NonDeterministic,
    /// `step` allocated heap memory.
    AllocatesInStep,
    /// No episode ended (terminated or truncated) in the whole of run 1.
    NeverEnds,
}

/// One problem, with a message naming the run, the step and the values.
///
/// ```
/// use ringenv_worker::{Problem, ProblemKind};
/// let p = Problem { kind: ProblemKind::NonFiniteReward, message: "run 1, step 3: reward NaN".into() };
/// assert_eq!(p.kind, ProblemKind::NonFiniteReward);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// What kind.
    pub kind: ProblemKind,
    /// What happened, where.
    pub message: String,
}

/// What [`check_env`] found; `Display` prints a readable report.
///
/// ```
/// use ringenv_worker::{check_env, envs::CartPole, CheckOptions, ProblemKind};
/// let report = check_env(CartPole::new, &CheckOptions { steps: 100, seed: 2 });
/// assert!(report.is_ok() && !report.has(ProblemKind::Panic));
/// assert!(report.to_string().ends_with("PASSED"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    /// The env's Rust type.
    pub env: String,
    /// The options of the check.
    pub options: CheckOptions,
    /// Steps taken in the first run (fewer than asked when it stopped on a panic).
    pub steps: usize,
    /// Episodes ended (terminated or truncated) in the first run.
    pub episodes: usize,
    /// Allocations made inside `step` in the first run, or `None` when not measured (or no step
    /// ran).
    pub allocations: Option<u64>,
    /// The problems found, in the order found.
    pub problems: Vec<Problem>,
    /// The checks that did not run, because a problem ended the check first (a panic, spaces
    /// that do not fit the types, or two envs with different spaces for run 2's comparison), or
    /// because no step ran (`steps` 0).
    pub not_run: Vec<ProblemKind>,
}

impl CheckReport {
    /// Whether the env passed: no problem was found and at least one step ran (a check that
    /// stepped nothing, `steps` 0, passed nothing).
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty() && self.steps > 0
    }

    /// Whether a problem of `kind` was found.
    pub fn has(&self, kind: ProblemKind) -> bool {
        self.problems.iter().any(|p| p.kind == kind)
    }
}

impl std::fmt::Display for CheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = self.options;
        writeln!(
            f,
            "check_env {}: 3 runs of {} steps from seed {}; run 1 ended {} episodes",
            self.env, o.steps, o.seed, self.episodes
        )?;
        let checks = [
            (ProblemKind::Spaces, "spaces valid and matching the Obs / Action types"),
            (ProblemKind::Panic, "no panic"),
            (ProblemKind::ObservationOutsideSpace, "observations in the observation space"),
            (ProblemKind::NonFiniteReward, "rewards finite"),
            (ProblemKind::NeverEnds, "episodes end (terminated or truncated) within the run"),
            (
                ProblemKind::NonDeterministic,
                "same seed, same trajectory (fresh env; re-seeded env, pre-filled buffers)",
            ),
        ];
        let not_run_text = if self.problems.is_empty() {
            ": not run (no step ran: steps is 0)"
        } else {
            ": not run (a problem below ended the check first)"
        };
        for (kind, what) in checks {
            let (verdict, not_run) = if self.has(kind) {
                ("FAIL", "")
            } else if self.not_run.contains(&kind) {
                ("n/a ", not_run_text)
            } else {
                ("ok  ", "")
            };
            writeln!(f, "  {verdict}  {what}{not_run}")?;
        }
        match self.allocations {
            None if self.not_run.contains(&ProblemKind::AllocatesInStep) => {
                writeln!(f, "  n/a   no allocation in step{not_run_text}")?
            }
            None => {
                writeln!(f, "  n/a   no allocation in step: not measured (CountingAlloc is not the global allocator)")?
            }
            Some(n) => writeln!(
                f,
                "  {}  no allocation in step ({n} allocations in {} steps)",
                if self.has(ProblemKind::AllocatesInStep) { "FAIL" } else { "ok  " },
                self.steps
            )?,
        }
        for p in &self.problems {
            writeln!(f, "  - {:?}: {}", p.kind, p.message)?;
        }
        match self.problems.len() {
            0 if self.steps == 0 => write!(f, "NOTHING CHECKED (no step ran: steps is 0)"),
            0 => write!(f, "PASSED"),
            n => write!(f, "FAILED ({n} problem{})", if n == 1 { "" } else { "s" }),
        }
    }
}

/// One reset or step of a run, as compared between runs.
#[derive(Clone, Debug, PartialEq)]
struct Record {
    obs: Vec<Vec<u8>>,
    step: Option<(u32, bool, bool)>,
    info: Info,
}

/// The records of one run, or the panic that ended it (with where).
struct Run {
    records: Vec<Record>,
    episodes: usize,
    steps: usize,
    allocations: u64,
}

fn record<E: Env>(env: &LocalEnv<E>, step: Option<Step>) -> Record {
    Record {
        obs: env.obs_bytes().into_iter().map(<[u8]>::to_vec).collect(),
        step: step.map(|s| (s.reward.to_bits(), s.terminated, s.truncated)),
        info: *env.info(),
    }
}

fn where_(i: usize, records: &[Record]) -> String {
    let steps = records[..=i].iter().filter(|r| r.step.is_some()).count();
    match records[i].step {
        Some(_) => format!("step {steps}"),
        None if i == 0 => "the first reset".into(),
        None => format!("the reset after step {steps}"),
    }
}

/// Runs `env` for `options.steps` random steps from `options.seed`, with buffers pre-filled
/// with `fill`. A panic ends the run: the error holds it and the run up to it (the records,
/// steps and allocations of the steps completed before it).
fn run<E: Env>(env: &mut LocalEnv<E>, options: &CheckOptions, fill: u8, label: &str) -> Result<Run, (Problem, Run)> {
    let action_space = env.action_space().clone();
    let mut action = vec![0u8; action_space.array_spec().bytes()];
    let mut actions = EnvRng::seed_from_u64(options.seed ^ 0x5eed_ac71_0a5e_ed00);
    let mut out = Run { records: Vec::with_capacity(options.steps + 1), episodes: 0, steps: 0, allocations: 0 };
    let panicked = |what: String, p: panic::Panic| Problem {
        kind: ProblemKind::Panic,
        message: format!("{label}: {what} panicked: {p}"),
    };
    env.fill_obs(fill);
    if let Err(p) = panic::catch(|| env.reset(Some(options.seed))) {
        return Err((panicked(format!("reset(seed={})", options.seed), p), out));
    }
    out.records.push(record(env, None));
    for t in 1..=options.steps {
        values::sample(&action_space, &mut actions, &mut action);
        env.fill_obs(fill);
        let before = alloc::count();
        let step = panic::catch(|| env.step_bytes(&action));
        let step = match step {
            Ok(step) => step,
            // (the panic's own allocations, its message and backtrace, are not the step's)
            Err(p) => return Err((panicked(format!("step {t}"), p), out)),
        };
        out.allocations += alloc::count() - before;
        out.steps = t;
        out.records.push(record(env, Some(step)));
        if step.terminated || step.truncated {
            out.episodes += 1;
            env.fill_obs(fill);
            if let Err(p) = panic::catch(|| env.reset(None)) {
                return Err((panicked(format!("reset after step {t}"), p), out));
            }
            out.records.push(record(env, None));
        }
    }
    Ok(out)
}

/// The first difference between two runs, described.
fn first_difference(a: &Run, b: &Run, spaces: &crate::Space) -> Option<String> {
    let parts = spaces.parts();
    for (i, (x, y)) in a.records.iter().zip(&b.records).enumerate() {
        if x == y {
            continue;
        }
        let at = where_(i, &a.records);
        if x.step != y.step {
            return Some(format!("at {at}: (reward bits, terminated, truncated) {:?} vs {:?}", x.step, y.step));
        }
        if x.info != y.info {
            return Some(format!("at {at}: info {:?} vs {:?}", x.info, y.info));
        }
        if x.obs.len() != y.obs.len() {
            return Some(format!("at {at}: {} observation leaves vs {}", x.obs.len(), y.obs.len()));
        }
        for (k, (ox, oy)) in x.obs.iter().zip(&y.obs).enumerate() {
            if ox.len() != oy.len() {
                return Some(format!("at {at}: observation leaf {k} has {} bytes vs {}", ox.len(), oy.len()));
            }
            if ox != oy {
                let (path, part) = &parts[k];
                let dtype = part.array_spec().dtype;
                let e = (0..ox.len() / dtype.size())
                    .find(|&e| ox[e * dtype.size()..][..dtype.size()] != oy[e * dtype.size()..][..dtype.size()])
                    .unwrap_or(0);
                let name = if path.is_empty() { String::new() } else { format!(" {path:?}") };
                return Some(format!(
                    "at {at}: observation{name} element {e} is {} vs {}",
                    values::read_f64(ox, dtype, e),
                    values::read_f64(oy, dtype, e)
                ));
            }
        }
    }
    None
}

/// Checks the env that `make` builds (see the [module docs](self)).
///
/// ```
/// use ringenv_worker::{check_env, CheckOptions, Ctx, DType, Env, ProblemKind, Space, Step};
/// /// Writes 2 into a Box whose high is 1.
/// struct TooHigh;
/// impl Env for TooHigh {
///     type Obs = f32;
///     type Action = i64;
///     fn observation_space(&self) -> Space { Space::boxed(DType::F32, &[1], 0.0, 1.0) }
///     fn action_space(&self) -> Space { Space::discrete(2) }
///     fn reset(&mut self, obs: &mut [f32], _: &mut Ctx) { obs[0] = 0.0; }
///     fn step(&mut self, _: &[i64], obs: &mut [f32], _: &mut Ctx) -> Step { obs[0] = 2.0; Step::default() }
/// }
/// let report = check_env(|| TooHigh, &CheckOptions { steps: 10, seed: 0 });
/// assert!(report.has(ProblemKind::ObservationOutsideSpace));
/// assert_eq!(report.problems[0].message, "run 1, step 1: observation element 0 is 2, outside [0, 1]");
/// ```
pub fn check_env<E: Env>(make: impl Fn() -> E, options: &CheckOptions) -> CheckReport {
    let mut report = CheckReport {
        env: std::any::type_name::<E>().to_string(),
        options: *options,
        steps: 0,
        episodes: 0,
        allocations: None,
        problems: Vec::new(),
        not_run: Vec::new(),
    };
    use ProblemKind::{AllocatesInStep, NeverEnds, NonDeterministic, NonFiniteReward, ObservationOutsideSpace};
    let mut build = |which: &str| -> Option<LocalEnv<E>> {
        let env = match panic::catch(&make) {
            Ok(env) => env,
            Err(p) => {
                let message = format!("building the {which} env panicked: {p}");
                report.problems.push(Problem { kind: ProblemKind::Panic, message });
                report.not_run.push(ProblemKind::Spaces);
                return None;
            }
        };
        match LocalEnv::new(env) {
            Ok(env) => Some(env),
            Err(e) => {
                report.problems.push(Problem { kind: ProblemKind::Spaces, message: e.to_string() });
                None
            }
        }
    };
    let everything = [ObservationOutsideSpace, NonFiniteReward, NeverEnds, NonDeterministic, AllocatesInStep];
    let Some(mut first) = build("first") else {
        report.not_run.extend(everything);
        return report;
    };
    let Some(mut second) = build("second") else {
        report.not_run.extend(everything);
        return report;
    };
    let (obs_space, seed) = (first.observation_space().clone(), options.seed);
    // Two envs of one constructor with other spaces: their trajectories cannot be compared.
    let same_spaces =
        first.observation_space() == second.observation_space() && first.action_space() == second.action_space();
    if !same_spaces {
        let message = format!(
            "the second env's spaces differ from the first's: observation {:?} vs {:?}, action {:?} vs {:?} \
             (the constructor depends on more than its arguments)",
            first.observation_space(),
            second.observation_space(),
            first.action_space(),
            second.action_space()
        );
        report.problems.push(Problem { kind: ProblemKind::Spaces, message });
    }
    let measuring = alloc::allocations().is_some();
    // A panic ends run 1; the steps before it are still checked, the later runs are not run.
    let (one, stopped) = match run(&mut first, options, 0, "run 1") {
        Ok(r) => (r, false),
        Err((p, partial)) => {
            report.problems.push(p);
            report.not_run.push(NonDeterministic);
            (partial, true)
        }
    };
    (report.steps, report.episodes) = (one.steps, one.episodes);
    // (a check that saw no observation or no step passes none of the checks of them)
    if one.records.is_empty() {
        report.not_run.push(ObservationOutsideSpace);
    }
    if one.steps == 0 {
        report.not_run.extend([NonFiniteReward, AllocatesInStep]);
        if !stopped {
            report.not_run.push(NonDeterministic);
        }
    }
    report.allocations = (measuring && one.steps > 0).then_some(one.allocations);
    if measuring && one.allocations > 0 {
        let message = format!(
            "{} heap allocations in {} calls of step (reuse buffers kept in the env instead)",
            one.allocations, one.steps
        );
        report.problems.push(Problem { kind: ProblemKind::AllocatesInStep, message });
    }
    let parts = obs_space.parts();
    let outside = one.records.iter().enumerate().find_map(|(i, r)| {
        let bad = r.obs.iter().zip(&parts).find_map(|(leaf, (path, part))| {
            values::contains(part, leaf).err().map(|e| if path.is_empty() { e } else { format!("{path:?}: {e}") })
        });
        bad.map(|e| format!("run 1, {}: observation {e}", where_(i, &one.records)))
    });
    if let Some(message) = outside {
        report.problems.push(Problem { kind: ProblemKind::ObservationOutsideSpace, message });
    }
    let bad_reward =
        one.records.iter().enumerate().find(|(_, r)| r.step.is_some_and(|s| !f32::from_bits(s.0).is_finite()));
    if let Some((i, r)) = bad_reward {
        let reward = f32::from_bits(r.step.expect("a step").0);
        let message = format!("run 1, {}: reward {reward}", where_(i, &one.records));
        report.problems.push(Problem { kind: ProblemKind::NonFiniteReward, message });
    }
    if stopped || one.steps == 0 {
        report.not_run.push(NeverEnds);
    } else if one.episodes == 0 {
        let message = format!(
            "no episode ended (terminated or truncated) in {} steps from seed {seed}: does step set \
             truncated at a step limit? (an env whose episodes are longer needs a check with more steps)",
            one.steps
        );
        report.problems.push(Problem { kind: NeverEnds, message });
    }
    if stopped || one.steps == 0 {
        return report;
    }
    // (run 2 steps the second env, comparable only when its spaces are the first's)
    for (label, env, fill, hint, comparable) in [
        (
            "run 2 (a second env)",
            &mut second,
            0u8,
            "state shared between envs, OS entropy or unordered iteration",
            same_spaces,
        ),
        (
            "run 3 (the first env re-seeded, buffers pre-filled with 0xFF)",
            &mut first,
            0xff,
            "reset keeps state from the previous episode, or observation elements are left unwritten",
            true,
        ),
    ] {
        if !comparable {
            report.not_run.push(NonDeterministic);
            continue;
        }
        match run(env, options, fill, label) {
            Err((p, _)) => report.problems.push(p),
            Ok(other) => {
                let diff = first_difference(&one, &other, &obs_space).or_else(|| {
                    (other.records.len() != one.records.len()).then(|| "the runs have different lengths".to_string())
                });
                if let Some(diff) = diff {
                    let message =
                        format!("{label} differs from run 1 with the same seed {seed} {diff} (causes: {hint})");
                    report.problems.push(Problem { kind: ProblemKind::NonDeterministic, message });
                }
            }
        }
    }
    report
}
