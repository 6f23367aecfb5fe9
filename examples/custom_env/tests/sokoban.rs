//! The Sokoban env on its own: every level is solved by a breadth-first planner over the env's
//! own state, deadlocks end episodes, the rules derive what the observation says, the env passes
//! `check_env` without allocating in `step`, and its arguments are checked by name.

use custom_env::{Sokoban, SokobanArgs, LEVELS, SIDE};
use ringenv_worker::{check_env, CheckOptions, InfoValue, LocalEnv, Registry};
use std::collections::{HashMap, VecDeque};

#[global_allocator]
static ALLOC: ringenv_worker::CountingAlloc = ringenv_worker::CountingAlloc;

fn env(level: usize) -> LocalEnv<Sokoban> {
    let args = SokobanArgs { level: Some(level), ..Default::default() };
    let mut env = LocalEnv::new(Sokoban::new(args).unwrap()).unwrap();
    env.reset(Some(0));
    env
}

/// (player cell, sorted box cells) after an action, as the env's rules of motion say.
fn apply(s: &Sokoban, (player, boxes): &(usize, Vec<usize>), a: usize) -> Option<(usize, Vec<usize>)> {
    let delta: [isize; 4] = [-(SIDE as isize), 1, SIDE as isize, -1];
    let next = player.checked_add_signed(delta[a]).filter(|&c| !s.is_wall(c))?;
    let mut boxes = boxes.clone();
    if let Some(i) = boxes.iter().position(|&b| b == next) {
        let beyond = next.checked_add_signed(delta[a]).filter(|&c| !s.is_wall(c) && !boxes.contains(&c))?;
        boxes[i] = beyond;
        boxes.sort_unstable();
    }
    Some((next, boxes))
}

/// A shortest plan from the env's current state to a solved one.
fn plan(env: &LocalEnv<Sokoban>, goals: &[usize]) -> Vec<i64> {
    let s = env.env();
    let start = (s.player(), (0..SIDE * SIDE).filter(|&c| s.has_box(c)).collect::<Vec<_>>());
    let mut parent = HashMap::from([(start.clone(), None)]);
    let mut queue = VecDeque::from([start]);
    while let Some(state) = queue.pop_front() {
        if state.1 == goals {
            let mut actions = Vec::new();
            let mut at = state;
            while let Some((prev, a)) = parent[&at].clone() {
                actions.push(a as i64);
                at = prev;
            }
            actions.reverse();
            return actions;
        }
        for a in 0..4 {
            if let Some(next) = apply(s, &state, a) {
                parent.entry(next.clone()).or_insert_with(|| {
                    queue.push_back(next);
                    Some((state.clone(), a))
                });
            }
        }
    }
    panic!("level unsolvable")
}

fn goals(level: usize) -> Vec<usize> {
    let mut g = Vec::new();
    for (r, row) in LEVELS[level].lines().enumerate() {
        g.extend(row.chars().enumerate().filter(|(_, ch)| matches!(ch, '.' | '*' | '+')).map(|(c, _)| r * SIDE + c));
    }
    g
}

#[test]
fn every_level_is_solved_by_its_shortest_plan() {
    let lengths: Vec<usize> = (0..LEVELS.len())
        .map(|level| {
            let mut env = env(level);
            let plan = plan(&env, &goals(level));
            for (t, &a) in plan.iter().enumerate() {
                let step = env.step(&[a]);
                let last = t + 1 == plan.len();
                assert_eq!(step.terminated, last, "level {level} step {t}");
                assert!(!env.env().deadlocked(), "a shortest plan never deadlocks");
            }
            assert!(env.env().solved());
            assert_eq!(env.info().get("is_success"), Some(InfoValue::Bool(true)));
            let (grid, facts) = env.obs();
            assert_eq!(grid.iter().filter(|&&c| c == 3).count(), 0, "no box off a goal");
            assert_eq!(facts[129], 1, "the `solved` fact is observed");
            plan.len()
        })
        .collect();
    assert_eq!(lengths, [1, 4, 15, 19]);
}

#[test]
fn a_box_pushed_into_a_corner_deadlocks_and_ends_the_episode() {
    // Level 0: player (2, 2), box (2, 3), goal (2, 4). Down, right, up pushes the box against the
    // top wall at (1, 3): stuck on one side only, so not dead.
    let mut env = env(0);
    let steps: Vec<_> = [2, 1, 0].iter().map(|&a| env.step(&[a])).collect();
    assert!(env.env().has_box(SIDE + 3) && !env.env().deadlocked());
    assert!(steps.iter().all(|s| !s.terminated) && env.info().is_empty());
    // Right, up, then left twice pushes it into the corner (1, 1): dead, and the episode ends.
    let steps: Vec<_> = [1, 0, 3, 3].iter().map(|&a| env.step(&[a])).collect();
    assert!(env.env().has_box(SIDE + 1) && env.env().deadlocked());
    assert_eq!(steps.iter().map(|s| s.terminated).collect::<Vec<_>>(), [false, false, false, true]);
    assert_eq!(env.info().get("deadlocked"), Some(InfoValue::Bool(true)));
    assert_eq!(env.info().get("is_success"), Some(InfoValue::Bool(false)));
    let (grid, facts) = env.obs();
    assert_eq!((grid[SIDE + 1], grid[SIDE + 2]), (3, 5), "box at (1, 1), player at (1, 2)");
    assert_eq!((facts[64 + SIDE + 1], facts[128], facts[129]), (1, 1, 0), "dead(1, 1), deadlocked, not solved");
    // Without end_on_deadlock the episode goes on until max_steps.
    let args = SokobanArgs { level: Some(0), max_steps: 7, end_on_deadlock: false };
    let mut env = LocalEnv::new(Sokoban::new(args).unwrap()).unwrap();
    env.reset(None);
    let flags: Vec<_> =
        [2, 1, 0, 1, 0, 3, 3].iter().map(|&a| env.step(&[a])).map(|s| (s.terminated, s.truncated)).collect();
    assert_eq!(flags[5..], [(false, false), (false, true)]);
}

#[test]
fn passes_check_env_without_allocating_in_step() {
    for level in [None, Some(2)] {
        let args = SokobanArgs { level, ..Default::default() };
        let report = check_env(|| Sokoban::new(args.clone()).unwrap(), &CheckOptions { steps: 3000, seed: 5 });
        assert!(report.is_ok(), "{report}");
        assert_eq!(report.allocations, Some(0));
        assert!(report.episodes >= 20, "{report}");
    }
}

#[test]
fn arguments_are_checked_by_name() {
    let registry = Registry::new("custom_env").env("Sokoban-v0", Sokoban::new);
    let err = registry.spaces("Sokoban-v0", &serde_json::json!({"level": 7})).unwrap_err();
    assert_eq!(err.message, "Sokoban-v0: level must be below 4, got 7");
    let err = registry.spaces("custom_env:Sokoban-v0", &serde_json::json!({"max_steps": "many"})).unwrap_err();
    assert!(err.message.starts_with("Sokoban-v0: argument \"max_steps\" = \"many\" does not fit"), "{}", err.message);
    assert_eq!(registry.arguments("Sokoban-v0").unwrap(), ["level", "max_steps", "end_on_deadlock"]);
}
