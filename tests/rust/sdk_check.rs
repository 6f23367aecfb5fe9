//! `check_env` finds each problem it promises to find, in envs broken on purpose, and passes
//! good envs (with allocation measured: this test program counts allocations).

use ringenv_worker::{check_env, CheckOptions, Ctx, DType, Env, ProblemKind, Space, Step};
use std::sync::atomic::{AtomicU64, Ordering};

#[global_allocator]
static ALLOC: ringenv_worker::CountingAlloc = ringenv_worker::CountingAlloc;

/// What each test env gets wrong.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// Writes 2 into a [0, 1] Box at step 3.
    OutOfSpace,
    /// Reads a counter shared by all envs.
    SharedState,
    /// Keeps its step count across resets.
    LeakyReset,
    /// Never writes element 1.
    Unwritten,
    /// Panics at step 5.
    Panics,
    /// Pushes onto a growing Vec.
    Allocates,
    /// Returns a NaN reward at step 2.
    NanReward,
    /// Returns a NaN reward at step 2, allocates at every step, panics at step 5.
    NanAllocatesThenPanics,
    /// Panics in every reset.
    PanicsInReset,
    /// Never terminates nor truncates (no step limit).
    NeverEnds,
}

static SHARED: AtomicU64 = AtomicU64::new(0);

struct Faulty {
    fault: Fault,
    t: u32,
    log: Vec<u32>,
}

fn faulty(fault: Fault) -> Faulty {
    Faulty { fault, t: 0, log: Vec::new() }
}

impl Env for Faulty {
    type Obs = f32;
    type Action = i64;
    fn observation_space(&self) -> Space {
        Space::boxed(DType::F32, &[2], 0.0, 1.0)
    }
    fn action_space(&self) -> Space {
        Space::discrete(3)
    }
    fn reset(&mut self, obs: &mut [f32], ctx: &mut Ctx) {
        assert!(self.fault != Fault::PanicsInReset, "fault in reset");
        if self.fault != Fault::LeakyReset {
            self.t = 0;
        }
        let x: f32 = ringenv_worker::rand::Rng::random(ctx.rng());
        obs[0] = x;
        if self.fault != Fault::Unwritten {
            obs[1] = 0.0;
        }
    }
    fn step(&mut self, action: &[i64], obs: &mut [f32], _: &mut Ctx) -> Step {
        self.t += 1;
        obs[0] = (self.t % 7) as f32 / 10.0 + action[0] as f32 * 0.01;
        if self.fault != Fault::Unwritten {
            obs[1] = 1.0;
        }
        let mut reward = 1.0;
        match self.fault {
            Fault::OutOfSpace if self.t == 3 => obs[1] = 2.0,
            Fault::SharedState => obs[0] = (SHARED.fetch_add(1, Ordering::Relaxed) % 3) as f32 / 2.0,
            Fault::Panics if self.t == 5 => panic!("fault at step {}", self.t),
            Fault::Allocates => self.log.push(self.t),
            Fault::NanReward if self.t == 2 => reward = f32::NAN,
            Fault::NanAllocatesThenPanics => {
                self.log.push(self.t);
                if self.t == 2 {
                    reward = f32::NAN;
                }
                if self.t == 5 {
                    panic!("fault at step {}", self.t);
                }
            }
            _ => {}
        }
        Step { reward, terminated: false, truncated: self.t.is_multiple_of(25) && self.fault != Fault::NeverEnds }
    }
}

const OPTIONS: CheckOptions = CheckOptions { steps: 200, seed: 3 };

fn kinds(fault: Fault) -> Vec<ProblemKind> {
    let report = check_env(|| faulty(fault), &OPTIONS);
    report.problems.iter().map(|p| p.kind).collect()
}

#[test]
fn a_good_env_passes_with_allocation_measured() {
    let report = check_env(|| faulty(Fault::None), &OPTIONS);
    assert!(report.is_ok(), "{report}");
    assert_eq!((report.steps, report.episodes, report.allocations), (200, 8, Some(0)));
    assert!(report.to_string().ends_with("PASSED"), "{report}");
}

#[test]
fn each_fault_is_found_and_named() {
    assert_eq!(kinds(Fault::OutOfSpace), [ProblemKind::ObservationOutsideSpace]);
    assert_eq!(kinds(Fault::NanReward), [ProblemKind::NonFiniteReward]);
    assert_eq!(kinds(Fault::Allocates), [ProblemKind::AllocatesInStep]);
    assert!(kinds(Fault::SharedState).contains(&ProblemKind::NonDeterministic));
    assert_eq!(kinds(Fault::LeakyReset), [ProblemKind::NonDeterministic]);
    assert_eq!(kinds(Fault::Unwritten), [ProblemKind::NonDeterministic]);

    let report = check_env(|| faulty(Fault::OutOfSpace), &OPTIONS);
    assert_eq!(report.problems[0].message, "run 1, step 3: observation element 1 is 2, outside [0, 1]");
    let report = check_env(|| faulty(Fault::LeakyReset), &OPTIONS);
    assert!(report.problems[0].message.starts_with("run 3 (the first env re-seeded"), "{report}");
    let report = check_env(|| faulty(Fault::Unwritten), &OPTIONS);
    let message = &report.problems[0].message;
    assert!(message.contains("at the first reset: observation element 1 is 0 vs NaN"), "{message}");
    assert!(report.to_string().contains("FAIL  same seed"), "{report}");
}

#[test]
fn a_panic_ends_the_check_with_message_and_location() {
    let report = check_env(|| faulty(Fault::Panics), &OPTIONS);
    let [problem] = report.problems.as_slice() else { panic!("{report}") };
    assert_eq!(problem.kind, ProblemKind::Panic);
    assert!(
        problem.message.starts_with("run 1: step 5 panicked: fault at step 5 (panicked at "),
        "{}",
        problem.message
    );
    assert!(problem.message.contains("sdk_check.rs:"), "{}", problem.message);
    assert_eq!(report.steps, 4);
    let report = check_env(|| -> Faulty { panic!("cannot build") }, &OPTIONS);
    assert!(report.problems[0].message.starts_with("building the first env panicked: cannot build"), "{report}");
}

#[test]
fn spaces_that_do_not_fit_the_types_are_refused() {
    struct Wrong;
    impl Env for Wrong {
        type Obs = f64;
        type Action = i64;
        fn observation_space(&self) -> Space {
            Space::boxed(DType::F32, &[1], 0.0, 1.0)
        }
        fn action_space(&self) -> Space {
            Space::discrete(2)
        }
        fn reset(&mut self, _: &mut [f64], _: &mut Ctx) {}
        fn step(&mut self, _: &[i64], _: &mut [f64], _: &mut Ctx) -> Step {
            Step::default()
        }
    }
    let report = check_env(|| Wrong, &OPTIONS);
    assert_eq!(report.problems.len(), 1);
    assert_eq!(report.problems[0].kind, ProblemKind::Spaces);
    assert!(report.problems[0].message.contains("[float32[1]]") && report.problems[0].message.contains("(f64)"));
}

#[test]
fn the_builtin_env_passes() {
    let report = check_env(ringenv_worker::envs::CartPole::new, &CheckOptions { steps: 2000, seed: 0 });
    assert!(report.is_ok(), "{report}");
    assert!(report.episodes > 20);
}

#[test]
fn the_steps_before_a_panic_are_still_checked_and_the_checks_that_did_not_run_say_so() {
    let report = check_env(|| faulty(Fault::NanAllocatesThenPanics), &OPTIONS);
    let found: Vec<ProblemKind> = report.problems.iter().map(|p| p.kind).collect();
    assert_eq!(found, [ProblemKind::Panic, ProblemKind::AllocatesInStep, ProblemKind::NonFiniteReward], "{report}");
    assert_eq!(report.steps, 4);
    assert!(report.allocations.is_some_and(|n| n > 0), "{report}");
    assert_eq!(report.not_run, [ProblemKind::NonDeterministic, ProblemKind::NeverEnds]);
    let text = report.to_string();
    assert!(text.contains("n/a   same seed, same trajectory"), "{text}");
    assert!(text.contains("not run (a problem below ended the check first)"), "{text}");
    assert!(!text.contains("ok    same seed"), "{text}");

    // nothing ran at all: no check is passed, and the allocation line does not blame the allocator
    let report = check_env(|| -> Faulty { panic!("cannot build") }, &OPTIONS);
    let text = report.to_string();
    assert!(!text.contains("ok    "), "{text}");
    assert!(text.contains("n/a   no allocation in step: not run"), "{text}");
}

#[test]
fn two_envs_of_one_constructor_with_other_spaces_are_a_spaces_problem_not_a_trajectory_difference() {
    static BUILT: AtomicU64 = AtomicU64::new(0);
    /// Each env built has one more observation element than the one before.
    struct Growing(usize);
    impl Env for Growing {
        type Obs = f32;
        type Action = i64;
        fn observation_space(&self) -> Space {
            Space::boxed(DType::F32, &[self.0], 0.0, 1.0)
        }
        fn action_space(&self) -> Space {
            Space::discrete(2)
        }
        fn reset(&mut self, obs: &mut [f32], _: &mut Ctx) {
            obs.fill(0.0);
        }
        fn step(&mut self, _: &[i64], obs: &mut [f32], _: &mut Ctx) -> Step {
            obs.fill(0.5);
            Step { truncated: true, ..Step::default() }
        }
    }
    let report = check_env(|| Growing(4 + BUILT.fetch_add(1, Ordering::Relaxed) as usize), &OPTIONS);
    let [problem] = report.problems.as_slice() else { panic!("{report}") };
    assert_eq!(problem.kind, ProblemKind::Spaces);
    assert!(problem.message.starts_with("the second env's spaces differ from the first's"), "{}", problem.message);
    assert!(!report.to_string().contains("0 vs 0"), "{report}");
}

#[test]
fn a_panic_in_the_first_reset_passes_no_check() {
    let report = check_env(|| faulty(Fault::PanicsInReset), &OPTIONS);
    let [problem] = report.problems.as_slice() else { panic!("{report}") };
    assert_eq!(problem.kind, ProblemKind::Panic);
    assert!(problem.message.starts_with("run 1: reset(seed=3) panicked: fault in reset"), "{}", problem.message);
    assert_eq!((report.steps, report.allocations), (0, None));
    assert!(!report.is_ok());
    let text = report.to_string();
    // no observation, reward or step was seen: none of their checks says ok (the spaces were checked)
    assert_eq!(text.matches("ok    ").count(), 1, "{text}");
    assert!(text.contains("ok    spaces valid"), "{text}");
    for line in [
        "n/a   observations in the observation space",
        "n/a   rewards finite",
        "n/a   episodes end",
        "n/a   no allocation in step: not run",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
}

#[test]
fn a_check_of_zero_steps_is_not_a_pass() {
    let report = check_env(|| faulty(Fault::None), &CheckOptions { steps: 0, seed: 1 });
    assert!(report.problems.is_empty() && !report.is_ok(), "{report}");
    let text = report.to_string();
    assert!(!text.contains("ok    rewards") && !text.contains("PASSED"), "{text}");
    assert!(text.ends_with("NOTHING CHECKED (no step ran: steps is 0)"), "{text}");
    assert!(text.contains("n/a   rewards finite: not run (no step ran: steps is 0)"), "{text}");
}

#[test]
fn an_env_that_never_ends_an_episode_is_a_problem() {
    let report = check_env(|| faulty(Fault::NeverEnds), &OPTIONS);
    assert_eq!(report.problems.iter().map(|p| p.kind).collect::<Vec<_>>(), [ProblemKind::NeverEnds], "{report}");
    assert_eq!(report.episodes, 0);
    assert!(report.problems[0]
        .message
        .starts_with("no episode ended (terminated or truncated) in 200 steps from seed 3"));
    assert!(report.to_string().contains("FAIL  episodes end (terminated or truncated) within the run"), "{report}");
    // the same env ends its first episode at step 25 for the default one
    let report = check_env(|| faulty(Fault::None), &CheckOptions { steps: 25, seed: 3 });
    assert!(report.is_ok() && report.episodes == 1, "{report}");
    let report = check_env(|| faulty(Fault::None), &CheckOptions { steps: 24, seed: 3 });
    assert!(report.has(ProblemKind::NeverEnds), "{report}");
}
