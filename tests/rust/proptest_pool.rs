//! Property test of the pool: random interleavings of step, reset (with and without options),
//! call (answered or failed) and protocol misuse, over 1..=4 worker processes and 1..=9 envs,
//! return every env's result exactly once per command, in command order, with the right values.
//!
//! The workers are this test binary, re-executed: a deterministic counter env serves each env id.
//! Its observation is `int64[3] = [env id, counter, events]`: the counter is the reset seed (0
//! without one) plus the reset options' offset, plus every action since; `events` counts the
//! commands the env has seen. So a command lost, run twice, run out of order, delivered to the
//! wrong worker or written to the wrong slot shows in the numbers. Rewards are the env id,
//! `terminated` is `counter % 5 == 0`. A call answers with every env's `(id, counter, events)` and
//! echoes the request, or fails with a `ValueError` naming the worker's first env. An odd action
//! on a worker's first env makes it linger 100 µs, so workers complete in varying orders; the
//! main process spins first or sleeps at once, at random.
//!
//! It has its own `main` (`harness = false`): the supervisor appends `--segment-fd N ...` to a
//! worker's command line, which libtest would refuse. Cases: 24 (`PROPTEST_CASES` to change).

#[path = "support/endpoint_args.rs"]
mod endpoint_args;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use ringenv_runtime::{
    Array, ArraySpec, CommandKind, DType, Layout, Outcome, Pool, PoolConfig, RemoteError, SpinPolicy, StateError,
    SubmitError, WaitError, WorkerCommand, WorkerEndpoint,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The init payload: what the worker checks it was started for.
const INIT: &[u8] = b"proptest-counter-env";
/// The request that makes a call fail in every worker.
const FAIL: &[u8] = b"fail";
/// Most envs a case has: actions and seeds are generated for this many and cut to the case's.
const MAX_ENVS: usize = 9;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--segment-fd") {
        serve(&args);
        return;
    }
    // Behave like a libtest binary for the arguments cargo passes on: `--list`, a name filter.
    if args.iter().any(|a| a == "--list") {
        println!("pool_interleavings: test");
        return;
    }
    let filter = args.iter().skip(1).find(|a| !a.starts_with('-'));
    if filter.is_some_and(|f| !"pool_interleavings".contains(f.as_str())) || args.iter().any(|a| a == "--ignored") {
        println!("running 0 tests (filtered out)");
        return;
    }
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(24);
    let config = Config { cases, failure_persistence: None, max_shrink_iters: 256, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let (ops, workers) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let result = runner.run(&case(), |case| {
        ops.fetch_add(case.ops.len(), Ordering::Relaxed);
        workers.fetch_add(case.num_workers, Ordering::Relaxed);
        run_case(&case)
    });
    let (ops, workers) = (ops.into_inner(), workers.into_inner());
    match result {
        Ok(()) => {
            println!("test pool_interleavings ... ok ({cases} cases: {ops} operations, {workers} worker processes)")
        }
        Err(e) => {
            eprintln!("test pool_interleavings ... FAILED\n{e}");
            std::process::exit(1);
        }
    }
}

// ---- the worker: a deterministic counter env per env id ------------------------------------

fn serve(args: &[String]) {
    let endpoint_args = endpoint_args::endpoint_args(args);
    // SAFETY: the supervisor handed these two descriptors to this process for this purpose.
    let mut ep = unsafe { WorkerEndpoint::connect(&endpoint_args) }.expect("the segment is valid");
    assert_eq!(ep.recv_init().expect("an init payload"), INIT);
    ep.send_ready().expect("the main process is there");
    let envs = ep.env_ids();
    let n = envs.len();
    let (mut counter, mut events) = (vec![0i64; n], vec![0i64; n]);
    loop {
        let command = ep.next_command();
        let kind = command.kind().expect("a known command kind");
        let slot = command.slot as usize;
        let result = match kind {
            CommandKind::Close => return,
            CommandKind::Reset => {
                let offset = if command.has_message() { decode_i64(&ep.recv_payload().unwrap()) } else { 0 };
                let mut view = ep.slot(slot);
                let seeds: Vec<u64> = values(view.rows(Array::Seed, envs.clone()));
                let flags = view.rows(Array::SeedFlags, envs.clone()).to_vec();
                for i in 0..n {
                    counter[i] = if flags[i] & 1 == 1 { seeds[i] as i64 } else { 0 } + offset;
                    events[i] += 1;
                }
                write_results(&mut view, &envs, &counter, &events, false);
                Ok(None)
            }
            CommandKind::Step => {
                let mut view = ep.slot(slot);
                let actions: Vec<i64> = values(view.rows(Array::Action(0), envs.clone()));
                for i in 0..n {
                    counter[i] += actions[i];
                    events[i] += 1;
                }
                write_results(&mut view, &envs, &counter, &events, true);
                if actions[0] % 2 != 0 {
                    std::thread::sleep(Duration::from_micros(100));
                }
                Ok(None)
            }
            CommandKind::Call => {
                let request = if command.has_message() { ep.recv_payload().unwrap() } else { Vec::new() };
                events.iter_mut().for_each(|e| *e += 1);
                if request == FAIL {
                    let message = format!("worker {} refused", ep.worker());
                    let env_id = Some(envs.start as u64);
                    Err(RemoteError { env_id, kind: "ValueError".into(), message, ..Default::default() })
                } else {
                    let mut answer: Vec<u8> = Vec::new();
                    for (i, env) in envs.clone().enumerate() {
                        for v in [env as i64, counter[i], events[i]] {
                            answer.extend_from_slice(&v.to_le_bytes());
                        }
                    }
                    answer.extend_from_slice(&request);
                    Ok(Some(answer))
                }
            }
        };
        ep.complete(command.seq, result).expect("the main process is there");
    }
}

fn write_results(
    view: &mut ringenv_runtime::SlotView<'_>,
    envs: &std::ops::Range<usize>,
    c: &[i64],
    e: &[i64],
    step: bool,
) {
    let obs: Vec<i64> = envs.clone().enumerate().flat_map(|(i, env)| [env as i64, c[i], e[i]]).collect();
    view.rows_mut(Array::Obs(0), envs.clone()).copy_from_slice(bytemuck::cast_slice(&obs));
    let rewards: Vec<f32> = envs.clone().map(|env| if step { env as f32 } else { 0.0 }).collect();
    view.rows_mut(Array::Reward, envs.clone()).copy_from_slice(bytemuck::cast_slice(&rewards));
    let terminated: Vec<u8> = c.iter().map(|&c| u8::from(step && c % 5 == 0)).collect();
    view.rows_mut(Array::Terminated, envs.clone()).copy_from_slice(&terminated);
    view.rows_mut(Array::Truncated, envs.clone()).fill(0);
}

/// The values in `bytes` (rows of a slot array, not necessarily aligned for `T`).
fn values<T: bytemuck::Pod>(bytes: &[u8]) -> Vec<T> {
    bytes.chunks_exact(std::mem::size_of::<T>()).map(bytemuck::pod_read_unaligned).collect()
}

fn decode_i64(bytes: &[u8]) -> i64 {
    i64::from_le_bytes(bytes[..8].try_into().expect("an 8-byte offset"))
}

// ---- the main side: random operations against a model -------------------------------------

#[derive(Clone, Debug)]
enum Op {
    /// `Pool::step` with these actions (cut to the case's envs).
    Step(Vec<i64>),
    /// `submit(Step)`, then `wait` with zero timeouts until it completes (a pending command
    /// survives timeouts), checking that a second submit is refused meanwhile.
    PolledStep(Vec<i64>),
    /// A reset with these seeds, and options carrying an offset when given.
    Reset { seeds: Vec<Option<u64>>, offset: Option<i64> },
    /// A call with this request (`FAIL`: every worker raises), sent as a message when not empty.
    Call(Vec<u8>),
    /// `wait` with nothing pending must say so.
    WaitWithoutSubmit,
}

#[derive(Clone, Debug)]
struct Case {
    num_envs: usize,
    num_workers: usize,
    depth: usize,
    sleep_at_once: bool,
    ops: Vec<Op>,
}

fn op() -> impl Strategy<Value = Op> {
    let actions = || vec(-3i64..=3, MAX_ENVS);
    prop_oneof![
        4 => actions().prop_map(Op::Step),
        2 => actions().prop_map(Op::PolledStep),
        2 => (vec(option::of(0u64..1000), MAX_ENVS), option::of(-50i64..50))
            .prop_map(|(seeds, offset)| Op::Reset { seeds, offset }),
        1 => vec(any::<u8>(), 0..12).prop_map(Op::Call),
        1 => Just(Op::Call(FAIL.to_vec())),
        1 => Just(Op::WaitWithoutSubmit),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (1..=MAX_ENVS).prop_flat_map(|num_envs| {
        (1..=num_envs.min(4), 2..=4usize, any::<bool>(), vec(op(), 1..30)).prop_map(
            move |(num_workers, depth, sleep_at_once, ops)| Case { num_envs, num_workers, depth, sleep_at_once, ops },
        )
    })
}

/// What every env should hold: the reference the pool's results are compared with.
struct Model {
    layout: Layout,
    counter: Vec<i64>,
    events: Vec<i64>,
    next_slot: usize,
}

macro_rules! check {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err(TestCaseError::fail(format!($($why)+)));
        }
    };
}

impl Model {
    /// Checks the outcome of a command of `kind` against the model (already advanced).
    fn check(&mut self, pool: &Pool, out: &Outcome, kind: CommandKind) -> Result<(), TestCaseError> {
        check!(out.kind == kind, "outcome of {:?} for a {kind:?}", out.kind);
        check!(out.slot == self.next_slot, "slot {} used, {} expected", out.slot, self.next_slot);
        check!(out.restarted.is_empty(), "workers restarted: {:?}", out.restarted);
        self.next_slot = (self.next_slot + 1) % self.layout.depth;
        if kind == CommandKind::Call {
            return Ok(());
        }
        check!(out.errors.is_empty() && out.messages.is_empty(), "unexpected {:?} {:?}", out.errors, out.messages);
        let n = self.layout.num_envs;
        let batch = pool.batch(out.slot);
        let obs: Vec<i64> = values(batch.rows(Array::Obs(0), 0..n));
        let rewards: Vec<f32> = values(batch.rows(Array::Reward, 0..n));
        let (terminated, truncated) = (batch.rows(Array::Terminated, 0..n), batch.rows(Array::Truncated, 0..n));
        let step = kind == CommandKind::Step;
        for env in 0..n {
            let want = [env as i64, self.counter[env], self.events[env]];
            check!(
                obs[3 * env..3 * env + 3] == want,
                "{kind:?}: env {env} holds {:?}, expected {want:?}",
                &obs[3 * env..3 * env + 3]
            );
            check!(rewards[env] == if step { env as f32 } else { 0.0 }, "env {env} reward {}", rewards[env]);
            let done = step && self.counter[env] % 5 == 0;
            check!(terminated[env] == u8::from(done) && truncated[env] == 0, "env {env} flags");
        }
        Ok(())
    }

    /// Checks a call's answers: from every worker exactly once, each listing its envs in order.
    fn check_call(&self, out: &Outcome, request: &[u8]) -> Result<(), TestCaseError> {
        let workers = self.layout.num_workers;
        if request == FAIL {
            check!(out.messages.is_empty(), "a failed call carried answers");
            let mut from: Vec<usize> = out.errors.iter().map(|(w, _)| *w).collect();
            from.sort_unstable();
            check!(from == (0..workers).collect::<Vec<_>>(), "errors from workers {from:?}");
            for (w, e) in &out.errors {
                let first = self.layout.worker_envs(*w).start as u64;
                check!(e.kind == "ValueError" && e.env_id == Some(first), "worker {w} error {e:?}");
            }
            return Ok(());
        }
        check!(out.errors.is_empty(), "errors {:?}", out.errors);
        let mut from: Vec<usize> = out.messages.iter().map(|(w, _)| *w).collect();
        from.sort_unstable();
        check!(from == (0..workers).collect::<Vec<_>>(), "answers from workers {from:?}");
        for (w, answer) in &out.messages {
            let envs = self.layout.worker_envs(*w);
            let (values, echo) = answer.split_at(envs.len() * 24);
            check!(echo == request, "worker {w} echoed {echo:?}");
            let got: Vec<i64> = values.chunks(8).map(decode_i64).collect();
            let want: Vec<i64> = envs.flat_map(|e| [e as i64, self.counter[e], self.events[e]]).collect();
            check!(got == want, "worker {w} answered {got:?}, expected {want:?}");
        }
        Ok(())
    }
}

fn run_case(case: &Case) -> Result<(), TestCaseError> {
    let n = case.num_envs;
    let (obs, act) = (ArraySpec::new(DType::I64, &[3]), ArraySpec::new(DType::I64, &[]));
    let layout = Layout::single(n, case.num_workers, case.depth, obs, act, DType::F32).expect("a valid layout");
    let exe = std::env::current_exe().expect("the test binary");
    let mut config = PoolConfig::new(layout.clone(), WorkerCommand::new(exe), INIT.to_vec());
    config.spin = if case.sleep_at_once { SpinPolicy { spin: Duration::ZERO } } else { SpinPolicy::default() };
    let mut pool = Pool::spawn(config).map_err(|e| TestCaseError::fail(format!("spawn: {e}")))?;
    let mut model = Model { layout, counter: vec![0; n], events: vec![0; n], next_slot: 0 };
    let fail = |e: WaitError| TestCaseError::fail(format!("pool error: {e}"));
    let refused = |e: SubmitError| fail(e.into());
    // The last step or reset: its slot and observations, which the next command must not touch.
    let mut last: Option<(usize, Vec<u8>)> = None;
    for op in &case.ops {
        let outcome = match op {
            Op::Step(actions) | Op::PolledStep(actions) => {
                let actions = &actions[..n];
                for (env, a) in actions.iter().enumerate() {
                    model.counter[env] += a;
                    model.events[env] += 1;
                }
                let out = if let Op::Step(_) = op {
                    pool.step(bytemuck::cast_slice(actions)).map_err(fail)?
                } else {
                    let slot = pool.next_slot();
                    pool.batch_mut(slot)
                        .rows_mut(Array::Action(0), 0..n)
                        .copy_from_slice(bytemuck::cast_slice(actions));
                    pool.submit(CommandKind::Step, None).map_err(refused)?;
                    let again = pool.submit(CommandKind::Step, None);
                    check!(
                        matches!(again, Err(SubmitError::State(StateError::AlreadyPending))),
                        "second submit: {again:?}"
                    );
                    loop {
                        match pool.wait(Some(Duration::ZERO)) {
                            Ok(out) => break out,
                            Err(WaitError::Timeout { .. }) => std::thread::yield_now(),
                            Err(e) => return Err(fail(e)),
                        }
                    }
                };
                model.check(&pool, &out, CommandKind::Step)?;
                Some(out)
            }
            Op::Reset { seeds, offset } => {
                let seeds = &seeds[..n];
                for (env, seed) in seeds.iter().enumerate() {
                    model.counter[env] = seed.map_or(0, |s| s as i64) + offset.unwrap_or(0);
                    model.events[env] += 1;
                }
                let out = match offset {
                    None => pool.reset(seeds).map_err(fail)?,
                    Some(o) => {
                        pool.write_seeds(seeds);
                        pool.submit(CommandKind::Reset, Some(&o.to_le_bytes())).map_err(refused)?;
                        pool.wait(None).map_err(fail)?
                    }
                };
                model.check(&pool, &out, CommandKind::Reset)?;
                Some(out)
            }
            Op::Call(request) => {
                model.events.iter_mut().for_each(|e| *e += 1);
                let message = (!request.is_empty()).then_some(request.as_slice());
                pool.submit(CommandKind::Call, message).map_err(refused)?;
                let out = pool.wait(None).map_err(fail)?;
                model.check(&pool, &out, CommandKind::Call)?;
                model.check_call(&out, request)?;
                None
            }
            Op::WaitWithoutSubmit => {
                let r = pool.wait(Some(Duration::ZERO));
                check!(
                    matches!(r, Err(WaitError::State(StateError::NoPendingCall))),
                    "wait with nothing pending: {r:?}"
                );
                continue;
            }
        };
        if let Some((slot, before)) = &last {
            let now = pool.batch(*slot).rows(Array::Obs(0), 0..n).to_vec();
            check!(&now == before, "slot {slot} of the previous result was overwritten by the next command");
        }
        last = outcome.map(|o| (o.slot, pool.batch(o.slot).rows(Array::Obs(0), 0..n).to_vec()));
    }
    pool.close(Duration::from_secs(5));
    Ok(())
}
