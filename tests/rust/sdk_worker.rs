//! The SDK end to end in real worker processes: this test program is its own worker binary.
//!
//! `main` serves a [`Registry`] when a pool starts it with the worker arguments (or when asked to
//! `describe`), and otherwise runs the tests below, each of which starts pools of this very
//! executable: a Dict observation of every space kind laid out leaf by leaf and equal to an
//! in-process reference, infos crossing as typed messages and reset options as JSON, the reset
//! mask, a panic reported with its location (and the env's next step resetting it), a panic
//! ending the worker under `on_panic: exit` with the panic as its last error, a panic nothing
//! catches reported the same way, and the `describe` command. (`harness = false`: libtest's
//! `main` would refuse the worker arguments.)

use ringenv_runtime::{Array, CommandKind, ExitStatus, Layout, Outcome, Pool, PoolConfig, PoolError, WorkerCommand};
use ringenv_worker::rand::Rng;
use ringenv_worker::{entry, Ctx, DType, Env, LocalEnv, Registry, Space, Step};
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

#[path = "support/harness.rs"]
mod harness;

/// Every space kind in one Dict observation; a MultiDiscrete action.
struct Zoo {
    c: u64,
}

type ZooObs<'a> =
    (&'a mut [f64], &'a mut [u8], &'a mut [i64], &'a mut [i32], &'a mut [i8], &'a mut [i16], &'a mut [u64]);

impl Zoo {
    fn write(&self, (pos, mask, count, md, mb, small, big): ZooObs<'_>) {
        let c = self.c;
        pos.copy_from_slice(&[c as f64 * 0.5, -(c as f64)]);
        mask.copy_from_slice(&[(c % 2) as u8, 1, 0, c.is_multiple_of(3) as u8]);
        count[0] = (c % 5) as i64 - 2;
        md.copy_from_slice(&[(c % 3) as i32, 1 + (c % 4) as i32]);
        mb.copy_from_slice(&[1, 0, (c % 2) as i8]);
        small.copy_from_slice(&[(c % 11) as i16 - 5, 5]);
        big[0] = c * 1_000_000_007;
    }
}

impl Env for Zoo {
    type Obs = (f64, u8, i64, i32, i8, i16, u64);
    type Action = i64;
    fn observation_space(&self) -> Space {
        Space::dict([
            ("pos", Space::boxed(DType::F64, &[2], f64::NEG_INFINITY, f64::INFINITY)),
            ("mask", Space::boxed(DType::Bool, &[2, 2], 0.0, 1.0)),
            ("count", Space::Discrete { n: 5, start: -2 }),
            ("md", Space::MultiDiscrete { nvec: vec![3, 4], start: vec![0, 1], dtype: DType::I32 }),
            ("mb", Space::multi_binary(3)),
            (
                "t",
                Space::tuple([
                    Space::boxed(DType::I16, &[2], -5.0, 5.0),
                    Space::boxed(DType::U64, &[], 0.0, f64::INFINITY),
                ]),
            ),
        ])
    }
    fn action_space(&self) -> Space {
        Space::multi_discrete(&[3, 3])
    }
    fn reset(&mut self, obs: ZooObs<'_>, ctx: &mut Ctx) {
        let offset = ctx.options().get("offset").and_then(Value::as_u64).unwrap_or(0);
        self.c = ctx.rng().random_range(0..100) + offset;
        ctx.info().set("reset_c", self.c as i64);
        self.write(obs);
    }
    fn step(&mut self, action: &[i64], obs: ZooObs<'_>, ctx: &mut Ctx) -> Step {
        self.c += (action[0] + 1) as u64;
        if self.c.is_multiple_of(4) {
            ctx.info().set("c", self.c as i64);
            ctx.info().set("even", true);
        }
        self.write(obs);
        Step { reward: action[1] as f32, terminated: self.c > 200, truncated: false }
    }
}

/// Panics on action 1.
struct Panicky {
    n: f32,
}

impl Env for Panicky {
    type Obs = f32;
    type Action = i64;
    fn observation_space(&self) -> Space {
        Space::boxed(DType::F32, &[1], 0.0, f32::MAX as f64)
    }
    fn action_space(&self) -> Space {
        Space::discrete(2)
    }
    fn reset(&mut self, obs: &mut [f32], _: &mut Ctx) {
        self.n = 0.0;
        obs[0] = 0.0;
    }
    fn step(&mut self, action: &[i64], obs: &mut [f32], _: &mut Ctx) -> Step {
        assert!(action[0] == 0, "boom after {} steps", self.n);
        self.n += 1.0;
        obs[0] = self.n;
        Step { reward: 1.0, terminated: false, truncated: false }
    }
}

/// Panicky's spaces, but in a worker process started with `SDK_TEST_SPACE_PANIC` set its
/// observation space panics: when the worker checks its envs' spaces, outside any catch.
struct Unlucky;

impl Env for Unlucky {
    type Obs = f32;
    type Action = i64;
    fn observation_space(&self) -> Space {
        assert!(std::env::var_os("SDK_TEST_SPACE_PANIC").is_none(), "no observation space today");
        Panicky { n: 0.0 }.observation_space()
    }
    fn action_space(&self) -> Space {
        Space::discrete(2)
    }
    fn reset(&mut self, obs: &mut [f32], _: &mut Ctx) {
        obs[0] = 0.0;
    }
    fn step(&mut self, _: &[i64], obs: &mut [f32], _: &mut Ctx) -> Step {
        obs[0] = 0.0;
        Step { reward: 0.0, terminated: false, truncated: false }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ZooArgs {
    start: Option<u64>,
}

fn registry() -> Registry {
    Registry::new("sdk-test")
        .env("Zoo-v0", |a: ZooArgs| Zoo { c: a.start.unwrap_or(0) })
        .env("Panicky-v0", || Panicky { n: 0.0 })
        .env("Unlucky-v0", || Unlucky)
}

fn pool(id: &str, init: Value, num_envs: usize, num_workers: usize) -> Result<Pool, PoolError> {
    let (obs, act) = registry().spaces(id, &Value::Null).expect("spaces");
    let layout = Layout::new(num_envs, num_workers, 2, obs.leaves(), act.leaves(), DType::F32).expect("layout");
    let command = WorkerCommand::new(std::env::current_exe().expect("this test's path"));
    Pool::spawn(PoolConfig::new(layout, command, serde_json::to_vec(&init).expect("json")))
}

/// Every observation leaf of env `i`, as bytes.
fn obs_rows(pool: &Pool, slot: usize, i: usize) -> Vec<Vec<u8>> {
    let batch = pool.batch(slot);
    (0..pool.layout().obs.len()).map(|k| batch.rows(Array::Obs(k), i..i + 1).to_vec()).collect()
}

/// Each env's info of `out`'s typed messages, as `[env_id, {key: value}]`, by env id.
fn infos(out: &Outcome) -> Vec<Value> {
    use ringenv_runtime::infos::{parse, Value as V};
    let mut all = Vec::new();
    for (_, message) in &out.messages {
        for run in parse(message, 64).expect("a typed message") {
            for i in 0..run.count {
                let entries: serde_json::Map<String, Value> = (0..run.keys.len())
                    .map(|k| {
                        let v = match run.value(i, k, 0).unwrap() {
                            V::Bool(b) => json!(b),
                            V::Int(n) => json!(n),
                            V::Float(f) => json!(f),
                            other => panic!("a Rust env's info holds {other:?}"),
                        };
                        (run.keys[k].0.to_string(), v)
                    })
                    .collect();
                all.push(json!([run.first + i, entries]));
            }
        }
    }
    all.sort_by_key(|e| e[0].as_u64());
    all
}

fn zoo_matches_in_process_envs_leaf_by_leaf_with_infos_and_options() {
    const N: usize = 5;
    let mut p = pool("sdk-test:Zoo-v0", json!({"id": "Zoo-v0"}), N, 2).unwrap();
    let mut reference: Vec<LocalEnv<Zoo>> = (0..N).map(|_| LocalEnv::new(Zoo { c: 0 }).unwrap()).collect();
    let seeds: Vec<Option<u64>> = (0..N as u64).map(|i| Some(40 + i)).collect();
    p.write_seeds(&seeds);
    p.submit(CommandKind::Reset, Some(br#"{"offset": 1000}"#)).unwrap();
    let out = p.wait(Some(Duration::from_secs(30))).unwrap();
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let options = json!({"offset": 1000});
    for (i, env) in reference.iter_mut().enumerate() {
        env.reset_with_options(seeds[i], &options);
        assert!(env.env().c >= 1000);
        let want: Vec<Vec<u8>> = env.obs_bytes().into_iter().map(<[u8]>::to_vec).collect();
        assert_eq!(obs_rows(&p, out.slot, i), want, "reset of env {i}");
    }
    let want_infos: Vec<Value> = (0..N).map(|i| json!([i, {"reset_c": reference[i].env().c}])).collect();
    assert_eq!(infos(&out), want_infos);
    let (mut done, mut episodes) = ([false; N], 0);
    // Infos travel through the workers' info arenas: no control-socket message per step.
    let counts: Vec<(u64, u64)> = (0..2).map(|w| p.control_message_counts(w)).collect();
    let mut with_infos = 0;
    for t in 0..120i64 {
        let actions: Vec<i64> = (0..N as i64).flat_map(|i| [(t + i) % 3, (t * i) % 3]).collect();
        let out = p.step(bytemuck::cast_slice(&actions)).unwrap();
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        let batch = p.batch(out.slot);
        let rewards: &[f32] = bytemuck::cast_slice(batch.rows(Array::Reward, 0..N));
        let terminated = batch.rows(Array::Terminated, 0..N).to_vec();
        let mut want_infos = Vec::new();
        for (i, env) in reference.iter_mut().enumerate() {
            let reward = if done[i] {
                env.reset(None);
                done[i] = false;
                episodes += 1;
                0.0
            } else {
                let s = env.step(&actions[2 * i..2 * i + 2]);
                assert_eq!(terminated[i] == 1, s.terminated, "env {i} step {t}");
                done[i] = s.terminated;
                s.reward
            };
            assert_eq!(rewards[i], reward, "env {i} step {t}");
            let want: Vec<Vec<u8>> = env.obs_bytes().into_iter().map(<[u8]>::to_vec).collect();
            assert_eq!(obs_rows(&p, out.slot, i), want, "env {i} step {t}");
            if !env.info().is_empty() {
                let entries: serde_json::Map<String, Value> = env
                    .info()
                    .iter()
                    .map(|(k, v)| {
                        let v = match v {
                            ringenv_worker::InfoValue::Bool(b) => json!(b),
                            ringenv_worker::InfoValue::Int(n) => json!(n),
                            ringenv_worker::InfoValue::Float(f) => json!(f),
                        };
                        (k.to_string(), v)
                    })
                    .collect();
                want_infos.push(json!([i, entries]));
            }
        }
        with_infos += usize::from(!want_infos.is_empty());
        assert_eq!(infos(&out), want_infos, "step {t}");
        // Observations lie in the space (a leaf-level check, as check_env does).
        let space = reference[0].observation_space().clone();
        for i in 0..N {
            for ((_, part), leaf) in space.parts().into_iter().zip(obs_rows(&p, out.slot, i)) {
                ringenv_worker::values::contains(part, &leaf).unwrap();
            }
        }
    }
    assert!(episodes > N, "the run must cross autoresets, saw {episodes}");
    assert!(with_infos > 10, "the run must have steps with infos, saw {with_infos}");
    assert_eq!((0..2).map(|w| p.control_message_counts(w)).collect::<Vec<_>>(), counts);
    p.close(Duration::from_secs(5));
}

fn reset_mask_leaves_an_env_alone() {
    let mut p = pool("Zoo-v0", json!({"id": "Zoo-v0", "kwargs": {"start": 7}}), 2, 1).unwrap();
    p.reset(&[Some(1), Some(2)]).unwrap();
    p.step(bytemuck::cast_slice(&[2i64, 0, 2, 0])).unwrap(); // c += 3 in both envs
    let before = obs_rows(&p, p.next_slot() ^ 1, 1);
    p.write_seeds(&[Some(1), Some(9)]);
    let slot = p.next_slot();
    p.batch_mut(slot).rows_mut(Array::SeedFlags, 1..2)[0] |= ringenv_runtime::SeedFlags::SKIP_RESET;
    p.submit(CommandKind::Reset, None).unwrap();
    let out = p.wait(Some(Duration::from_secs(30))).unwrap();
    assert_eq!(infos(&out).len(), 1, "only env 0 reset: {:?}", infos(&out));
    // Env 1 kept its state: its next step continues from c + 3.
    let out = p.step(bytemuck::cast_slice(&[0i64, 0, 0, 0])).unwrap();
    let big = |rows: &[Vec<u8>]| u64::from_ne_bytes(rows[6][..8].try_into().unwrap()) / 1_000_000_007;
    assert_eq!(big(&obs_rows(&p, out.slot, 1)), big(&before) + 1);
    p.close(Duration::from_secs(5));
}

fn a_panic_is_reported_with_its_location_and_the_env_resets() {
    let mut p = pool("Panicky-v0", json!({"id": "Panicky-v0"}), 3, 1).unwrap();
    p.reset(&[Some(0); 3]).unwrap();
    p.step(bytemuck::cast_slice(&[0i64; 3])).unwrap();
    let out = p.step(bytemuck::cast_slice(&[0i64, 1, 0])).unwrap();
    let [(0, error)] = out.errors.as_slice() else { panic!("one error expected, got {:?}", out.errors) };
    assert_eq!((error.kind.as_str(), error.env_id), ("panic", Some(1)));
    assert!(error.message.starts_with("boom after 1 steps (panicked at "), "{}", error.message);
    assert!(error.message.contains("sdk_worker.rs:"), "{}", error.message);
    assert!(error.traceback.starts_with("env 1 panicked at "), "{}", error.traceback);
    let batch = p.batch(out.slot);
    assert_eq!(batch.rows(Array::Truncated, 0..3), [0, 1, 0]);
    let obs: &[f32] = bytemuck::cast_slice(batch.rows(Array::Obs(0), 0..3));
    assert_eq!((obs[0], obs[2]), (2.0, 2.0), "the other envs stepped");
    // The pool goes on; env 1's next step is its autoreset.
    let out = p.step(bytemuck::cast_slice(&[0i64; 3])).unwrap();
    assert!(out.errors.is_empty());
    let batch = p.batch(out.slot);
    let obs: &[f32] = bytemuck::cast_slice(batch.rows(Array::Obs(0), 0..3));
    assert_eq!(obs, [3.0, 0.0, 3.0]);
    p.close(Duration::from_secs(5));
}

fn on_panic_exit_makes_the_panic_a_worker_death() {
    let mut p = pool("Panicky-v0", json!({"id": "Panicky-v0", "on_panic": "exit"}), 2, 1).unwrap();
    p.reset(&[Some(0); 2]).unwrap();
    match p.step(bytemuck::cast_slice(&[1i64, 0])) {
        Err(PoolError::WorkerDied(f)) => {
            assert_eq!(f.status, ExitStatus::Exited(101));
            // The worker left the panic's text and location for the pool before it exited.
            let e = f.last_error.as_deref().expect("the panic as the death's last error");
            assert_eq!((e.kind.as_str(), e.env_id), ("panic", Some(0)));
            assert!(e.message.starts_with("boom after 0 steps (panicked at "), "{}", e.message);
            assert!(e.message.contains("sdk_worker.rs:"), "{}", e.message);
            let text = f.to_string();
            assert!(text.contains("died: exited with code 101; its last error: panic: boom after 0 steps"), "{text}");
        }
        other => panic!("expected a dead worker, got {other:?}"),
    }
}

fn a_panic_nothing_catches_is_the_deaths_last_error() {
    let (obs, act) = registry().spaces("Unlucky-v0", &Value::Null).expect("spaces");
    let layout = Layout::new(2, 1, 2, obs.leaves(), act.leaves(), DType::F32).expect("layout");
    let command =
        WorkerCommand::new(std::env::current_exe().expect("this test's path")).env("SDK_TEST_SPACE_PANIC", "1");
    let init = serde_json::to_vec(&json!({"id": "Unlucky-v0"})).expect("json");
    match Pool::spawn(PoolConfig::new(layout, command, init)) {
        Err(PoolError::WorkerDied(f)) => {
            assert_eq!(f.status, ExitStatus::Exited(101), "{f}");
            let e = f.last_error.as_deref().expect("the panic as the death's last error");
            assert_eq!((e.kind.as_str(), e.env_id), ("panic", None));
            assert!(e.message.starts_with("no observation space today (panicked at "), "{}", e.message);
            assert!(e.message.contains("sdk_worker.rs:"), "{}", e.message);
        }
        Err(other) => panic!("expected a dead worker, got {other}"),
        Ok(_) => panic!("expected a dead worker, got a pool"),
    }
}

fn describe_prints_the_spaces_and_names_bad_arguments() {
    let exe = std::env::current_exe().unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&exe).args(args).output().unwrap();
        (out.status.code(), serde_json::from_slice::<Value>(&out.stdout).unwrap())
    };
    let (code, d) = run(&["describe", "sdk_test:Zoo-v0", "--kwargs", r#"{"start": 3}"#]);
    assert_eq!(code, Some(0));
    assert_eq!(Space::from_json(&d["observation_space"]).unwrap(), Zoo { c: 0 }.observation_space());
    assert_eq!(d["arguments"], json!(["start"]));
    let (code, d) = run(&["describe", "Zoo-v0", "--kwargs", r#"{"start": -1}"#]);
    assert_eq!(code, Some(1));
    assert!(d["error"]["message"].as_str().unwrap().contains("argument \"start\" = -1"), "{d}");
    let (_, d) = run(&["list"]);
    assert_eq!(d["envs"][1]["id"], "Panicky-v0");
    assert_eq!(d["envs"][2]["id"], "Unlucky-v0");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let serving = args.iter().any(|a| a == "--segment-fd")
        || args.get(1).is_some_and(|a| ["describe", "list", "check"].contains(&a.as_str()));
    if serving {
        std::process::exit(entry::run_cli(&registry(), &args, &mut std::io::stdout().lock()));
    }
    let tests: [(&str, fn()); 6] = [
        (
            "zoo_matches_in_process_envs_leaf_by_leaf_with_infos_and_options",
            zoo_matches_in_process_envs_leaf_by_leaf_with_infos_and_options,
        ),
        ("reset_mask_leaves_an_env_alone", reset_mask_leaves_an_env_alone),
        (
            "a_panic_is_reported_with_its_location_and_the_env_resets",
            a_panic_is_reported_with_its_location_and_the_env_resets,
        ),
        ("on_panic_exit_makes_the_panic_a_worker_death", on_panic_exit_makes_the_panic_a_worker_death),
        ("a_panic_nothing_catches_is_the_deaths_last_error", a_panic_nothing_catches_is_the_deaths_last_error),
        ("describe_prints_the_spaces_and_names_bad_arguments", describe_prints_the_spaces_and_names_bad_arguments),
    ];
    harness::run_tests(&tests);
}
