//! Integration tests of the Rust pool API with the `ringenv-worker` binary: results equal an
//! in-process reference, worker death is a typed error, bad start-up input is reported.

use ringenv_runtime::Failure;
use ringenv_runtime::{
    Array, ArraySpec, DType, ExitStatus, Layout, Pool, PoolConfig, SpawnError, StateError, SubmitError, WaitError,
    WorkerCommand,
};
use ringenv_worker::envs::CartPole;
use std::time::{Duration, Instant};

#[path = "support/builtin_pool.rs"]
mod builtin_pool;

fn pool(id: &str, num_envs: usize, num_workers: usize) -> Result<Pool, SpawnError> {
    Pool::spawn(builtin_pool::builtin_config(id, num_envs, num_workers))
}

/// A layout of `num_envs` envs with CartPole's arrays (float32[4] observations, int64 actions).
fn cartpole_shaped_layout(num_envs: usize) -> Layout {
    let (obs, act) = (ArraySpec::new(DType::F32, &[4]), ArraySpec::new(DType::I64, &[]));
    Layout::single(num_envs, 1, 2, obs, act, DType::F32).unwrap()
}

fn obs_of(pool: &Pool, slot: usize) -> Vec<f32> {
    bytemuck::cast_slice(pool.batch(slot).rows(Array::Obs(0), 0..pool.layout().num_envs)).to_vec()
}

#[test]
fn cartpole_pool_matches_in_process_envs_with_next_step_autoreset() {
    const N: usize = 5;
    let mut pool = pool("CartPole-v1", N, 2).unwrap();
    let mut reference: Vec<CartPole> = (0..N).map(|_| CartPole::default()).collect();
    let seeds: Vec<Option<u64>> = (0..N as u64).map(|i| Some(100 + i)).collect();
    let out = pool.reset(&seeds).unwrap();
    let mut want = vec![0f32; 4 * N];
    for (i, env) in reference.iter_mut().enumerate() {
        env.reset(seeds[i], &mut want[4 * i..4 * i + 4]);
    }
    assert_eq!(obs_of(&pool, out.slot), want);
    let mut done = [false; N];
    let mut episodes = 0;
    for t in 0..700u64 {
        let actions: Vec<i64> = (0..N as u64).map(|i| ((t * 7 + i * 3) / 5 % 2) as i64).collect();
        let out = pool.step(bytemuck::cast_slice(&actions)).unwrap();
        assert!(out.errors.is_empty() && out.messages.is_empty());
        let batch = pool.batch(out.slot);
        let rewards: &[f32] = bytemuck::cast_slice(batch.rows(Array::Reward, 0..N));
        let terminated = batch.rows(Array::Terminated, 0..N);
        let truncated = batch.rows(Array::Truncated, 0..N);
        for i in 0..N {
            let obs = &mut want[4 * i..4 * i + 4];
            let (reward, term, trunc) = if done[i] {
                reference[i].reset(None, obs);
                episodes += 1;
                (0.0, false, false)
            } else {
                let s = reference[i].step(&actions[i..i + 1], obs);
                (s.reward, s.terminated, s.truncated)
            };
            assert_eq!((rewards[i], terminated[i] == 1, truncated[i] == 1), (reward, term, trunc), "env {i} step {t}");
            done[i] = term || trunc;
        }
        assert_eq!(obs_of(&pool, out.slot), want, "step {t}");
    }
    assert!(episodes > 10, "the run must cross many autoresets, saw {episodes}");
    pool.close(Duration::from_secs(5));
}

#[test]
fn killed_worker_is_a_typed_error_naming_worker_envs_and_signal() {
    let mut pool = pool("CartPole-v1", 6, 2).unwrap();
    pool.reset(&[Some(1); 6]).unwrap();
    let pids = pool.worker_pids();
    let victim = rustix::process::Pid::from_raw(pids[1] as i32).unwrap();
    rustix::process::kill_process(victim, rustix::process::Signal::KILL).unwrap();
    let start = Instant::now();
    let mut result = Ok(());
    for _ in 0..1000 {
        if let Err(e) = pool.step(bytemuck::cast_slice(&[0i64; 6])) {
            result = Err(e);
            break;
        }
    }
    let elapsed = start.elapsed();
    match result {
        Err(WaitError::Failed(Failure::WorkerDied(f))) => {
            assert_eq!((f.worker, f.env_ids.clone(), f.status), (1, 3..6, ExitStatus::Signaled(9)));
            assert!(f.to_string().contains("SIGKILL"), "{f}");
        }
        other => panic!("expected WorkerDied, got {other:?}"),
    }
    assert!(elapsed < Duration::from_secs(1), "death noticed after {elapsed:?}");
    // The survivor was stopped too, and the pool refuses further work with the same error.
    let survivor = rustix::process::Pid::from_raw(pids[0] as i32).unwrap();
    assert!(rustix::process::test_kill_process(survivor).is_err(), "worker 0 still running");
    assert!(matches!(pool.step(bytemuck::cast_slice(&[0i64; 6])), Err(WaitError::Failed(Failure::WorkerDied(_)))));
}

#[test]
fn unknown_id_fails_start_up_with_the_id_and_the_known_ids() {
    let layout = cartpole_shaped_layout(2);
    let init = br#"{"id": "Nope-v9"}"#.to_vec();
    let cmd = WorkerCommand::new(env!("CARGO_BIN_EXE_ringenv-worker"));
    match Pool::spawn(PoolConfig::new(layout, cmd, init)) {
        Err(SpawnError::Startup { worker: 0, env_ids, error }) => {
            assert_eq!(env_ids, 0..2);
            assert!(error.message.contains("Nope-v9") && error.message.contains("CartPole-v1"), "{error}");
        }
        Err(e) => panic!("expected a start-up error, got {e}"),
        Ok(_) => panic!("expected a start-up error, got a pool"),
    }
}

#[test]
fn worker_refuses_a_layout_its_env_does_not_fit() {
    // CartPole observations are float32[4]; a uint8[44] segment must be refused, naming both.
    let (obs, act) = (ArraySpec::new(DType::U8, &[44]), ArraySpec::new(DType::I64, &[]));
    let layout = Layout::single(2, 1, 2, obs, act, DType::F32).unwrap();
    let init = br#"{"id": "CartPole-v1"}"#.to_vec();
    let cmd = WorkerCommand::new(env!("CARGO_BIN_EXE_ringenv-worker"));
    let err = Pool::spawn(PoolConfig::new(layout, cmd, init)).err().expect("a mismatch error");
    let text = err.to_string();
    assert!(text.contains("uint8[44]") && text.contains("float32[4]"), "{text}");
}

#[test]
fn protocol_misuse_is_named_and_a_closed_pool_refuses_work() {
    let mut pool = pool("CartPole-v1", 3, 1).unwrap();
    assert!(matches!(pool.wait(Some(Duration::ZERO)), Err(WaitError::State(StateError::NoPendingCall))));
    pool.submit(ringenv_runtime::CommandKind::Reset, None).unwrap();
    assert!(matches!(
        pool.submit(ringenv_runtime::CommandKind::Step, None),
        Err(SubmitError::State(StateError::AlreadyPending))
    ));
    let out = pool.wait(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(out.kind, ringenv_runtime::CommandKind::Reset);
    assert!(matches!(pool.step(&[0u8; 3]), Err(WaitError::InvalidArgument(_))));
    pool.close(Duration::from_secs(5));
    assert!(matches!(pool.step(bytemuck::cast_slice(&[0i64; 3])), Err(WaitError::State(StateError::Closed))));
}

#[test]
fn set_next_slot_picks_the_slot_a_command_writes_and_refuses_while_one_is_in_flight() {
    const N: usize = 4;
    let mut pool = pool("CartPole-v1", N, 2).unwrap();
    let depth = pool.layout().depth;
    let seeds: Vec<Option<u64>> = (0..N as u64).map(Some).collect();
    let first = pool.reset(&seeds).unwrap().slot;
    let before = obs_of(&pool, first);
    // The slot after the last is the default; make the next command write the same slot again.
    assert_eq!(pool.next_slot(), (first + 1) % depth);
    pool.set_next_slot(None, first).unwrap();
    assert_eq!(pool.next_slot(), first);
    let out = pool.step(bytemuck::cast_slice(&[1i64; N])).unwrap();
    assert_eq!(out.slot, first, "the step wrote the slot set");
    assert_ne!(obs_of(&pool, first), before, "the step rewrote that slot");
    // Per worker, out of range, and while a command is in flight.
    pool.set_next_slot(Some(1), first).unwrap();
    assert_eq!(pool.next_slot_of(1), first);
    assert!(matches!(pool.set_next_slot(None, depth), Err(SubmitError::InvalidArgument(m)) if m.contains("no slot")));
    assert!(
        matches!(pool.set_next_slot(Some(2), 0), Err(SubmitError::InvalidArgument(m)) if m.contains("no worker 2"))
    );
    pool.submit(ringenv_runtime::CommandKind::Step, None).unwrap();
    assert!(matches!(pool.set_next_slot(None, 0), Err(SubmitError::State(StateError::AlreadyPending))));
    assert!(matches!(pool.set_next_slot(Some(0), 0), Err(SubmitError::State(StateError::AlreadyPending))));
    pool.wait(Some(Duration::from_secs(10))).unwrap();
    pool.close(Duration::from_secs(5));
    assert!(matches!(pool.set_next_slot(None, 0), Err(SubmitError::State(StateError::Closed))));
}

#[test]
fn a_running_pool_is_listed_and_its_metrics_read_from_outside() {
    use ringenv_runtime::{list_pools, Monitor};
    let mut pool = pool("CartPole-v1", 7, 2).unwrap(); // 7 envs: no other test uses 7
    pool.reset(&[Some(3); 7]).unwrap();
    for t in 0..40i64 {
        pool.step(bytemuck::cast_slice(&[t % 2; 7])).unwrap();
    }
    let me = std::process::id();
    let entries: Vec<_> = list_pools().into_iter().filter(|e| e.pid == me).collect();
    let entry = entries
        .iter()
        .find(|e| Monitor::open(e).map(|m| m.snapshot().num_envs == 7).unwrap_or(false))
        .expect("this pool is listed")
        .clone();
    let view = Monitor::open(&entry).unwrap().snapshot();
    assert_eq!(view.pool.main_pid, me);
    assert_eq!(view.pool.commands, 41, "1 reset + 40 steps");
    assert_eq!(view.workers.iter().map(|w| w.metrics.pid).collect::<Vec<_>>(), pool.worker_pids());
    assert_eq!(view.workers.iter().map(|w| w.env_ids.clone()).collect::<Vec<_>>(), vec![0..4, 4..7]);
    for w in &view.workers {
        let envs = w.env_ids.len() as u64;
        assert_eq!((w.metrics.commands, w.metrics.env_steps), (41, 41 * envs));
        assert!(w.metrics.busy_ns > 0 && w.metrics.last_error.is_empty());
    }
    pool.close(Duration::from_secs(5));
    // Not `!list_pools().contains(&entry)`: the tests of this file run in parallel threads of one
    // process, and a pool another test opens meanwhile may get the closed segment's descriptor
    // number. What must be gone is a pool of 7 envs listed under this process.
    let sevens = list_pools()
        .into_iter()
        .filter(|e| e.pid == me && Monitor::open(e).map(|m| m.snapshot().num_envs == 7).unwrap_or(false))
        .count();
    assert_eq!(sevens, 0, "a closed pool leaves no entry behind");
}

#[test]
fn workers_run_in_the_batch_scheduling_class_and_the_main_process_keeps_its_own() {
    // A woken SCHED_BATCH worker does not preempt the main process (supervisor.rs).
    // SAFETY: sched_getscheduler only reads the scheduling class of a pid.
    let policy = |pid: u32| unsafe { libc::sched_getscheduler(pid as i32) };
    let mine = policy(0);
    let mut pool = pool("CartPole-v1", 4, 2).unwrap();
    pool.reset(&[Some(1); 4]).unwrap();
    for pid in pool.worker_pids() {
        assert_eq!(policy(pid), libc::SCHED_BATCH, "worker {pid}");
    }
    assert_eq!(policy(0), mine, "spawning workers left the main process's class alone");
    pool.close(Duration::from_secs(5));
}

#[test]
fn an_idle_worker_watched_by_its_watcher_thread_looks_at_its_ring_once_a_second() {
    // Once its pool is idle (no command for 100 ms), a worker whose watcher thread watches the
    // main process sleeps a second at a time (endpoint.rs, IDLE_RECHECK), not 100 ms: over 3 s,
    // at most 3 sleeps and the ends of the window, where the 100 ms check made about 30. A busy
    // machine only delays wake-ups, so it can only lower the count.
    let mut pool = pool("CartPole-v1", 3, 1).unwrap();
    pool.reset(&[Some(1); 3]).unwrap();
    let wakeup = pool.segment().command_wakeup(0).unwrap();
    std::thread::sleep(Duration::from_millis(300)); // past the 100 ms that make the pool idle
    let before = wakeup.sleeps();
    std::thread::sleep(Duration::from_secs(3));
    let slept = wakeup.sleeps().wrapping_sub(before);
    assert!(slept <= 5, "the idle worker slept {slept} times in 3 s (at most 5 expected)");
    // It still answers at once: the command's futex wake-up ends the long sleep.
    pool.step(bytemuck::cast_slice(&[0i64; 3])).unwrap();
    pool.close(Duration::from_secs(5));
}

#[test]
fn the_cancel_hook_ends_a_wait_and_leaves_the_command_pending() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let cancel = Arc::new(AtomicBool::new(false));
    let mut config = builtin_pool::builtin_config("CartPole-v1", 2, 1);
    let asked = Arc::clone(&cancel);
    config.cancel = Some(Arc::new(move || asked.load(Ordering::Relaxed)));
    let mut pool = Pool::spawn(config).unwrap();
    pool.reset(&[Some(1); 2]).unwrap();
    // A stopped worker cannot complete: only the timeout or the hook ends the wait.
    let worker = rustix::process::Pid::from_raw(pool.worker_pids()[0] as i32).unwrap();
    rustix::process::kill_process(worker, rustix::process::Signal::STOP).unwrap();
    pool.submit(ringenv_runtime::CommandKind::Step, None).unwrap();
    assert!(matches!(pool.wait(Some(Duration::from_millis(300))), Err(WaitError::Timeout { .. })));
    cancel.store(true, Ordering::Relaxed);
    let cancelled = pool.wait(Some(Duration::from_secs(60)));
    assert!(matches!(cancelled, Err(WaitError::Cancelled)), "{cancelled:?}");
    assert!(pool.is_pending(), "a cancelled wait leaves its command pending");
    cancel.store(false, Ordering::Relaxed);
    rustix::process::kill_process(worker, rustix::process::Signal::CONT).unwrap();
    let out = pool.wait(Some(Duration::from_secs(60))).unwrap();
    assert_eq!(out.kind, ringenv_runtime::CommandKind::Step);
}
