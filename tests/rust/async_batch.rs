//! Integration tests of the pool's asynchronous batches (`send` / `recv`) with the
//! `ringenv-worker` binary: every env's result comes back exactly once, the rows equal an
//! in-process reference, `RecvOrder::Sent` is first-in first-out, and misuse is refused before
//! anything is sent.

use ringenv_runtime::{Array, CommandKind, Failure, Pool, RecvOrder, StateError, SubmitError, WaitError};
use ringenv_worker::envs::CartPole;
use std::time::Duration;

#[path = "support/builtin_pool.rs"]
mod builtin_pool;

fn pool(num_envs: usize, num_workers: usize) -> Pool {
    Pool::spawn(builtin_pool::builtin_config("CartPole-v1", num_envs, num_workers)).unwrap()
}

fn obs_rows(pool: &Pool, slot: usize, envs: std::ops::Range<usize>) -> Vec<f32> {
    bytemuck::cast_slice(pool.batch(slot).rows(Array::Obs(0), envs)).to_vec()
}

/// Runs `rounds` recv/send rounds of `per_recv` workers out of 4 (2 envs each) and checks every
/// returned worker's rows against in-process CartPoles stepped with the same actions; returns
/// the sequence of returned workers.
fn run(order: RecvOrder, per_recv: usize, rounds: usize) -> Vec<usize> {
    const N: usize = 8;
    let mut pool = pool(N, 4);
    let mut reference: Vec<CartPole> = (0..N).map(|_| CartPole::default()).collect();
    let mut want = [0f32; 4 * N];
    let seeds: Vec<Option<u64>> = (0..N as u64).map(|i| Some(7 + i)).collect();
    pool.write_seeds(&seeds);
    for (i, env) in reference.iter_mut().enumerate() {
        env.reset(seeds[i], &mut want[4 * i..4 * i + 4]);
    }
    pool.send(&[0, 1, 2, 3], CommandKind::Reset, None).unwrap();
    let mut done = [false; N];
    let mut returned = vec![];
    let mut results_per_worker = [0usize; 4];
    for round in 0..rounds {
        let batch = pool.recv(per_recv, order, Some(Duration::from_secs(30))).unwrap();
        assert_eq!(batch.len(), per_recv);
        for b in &batch {
            assert!(b.error.is_none() && b.restarted.is_none(), "{b:?}");
            assert!(!pool.is_busy(b.worker));
            let envs = pool.layout().worker_envs(b.worker);
            assert_eq!(obs_rows(&pool, b.slot, envs.clone()), want[4 * envs.start..4 * envs.end], "round {round}");
            returned.push(b.worker);
            results_per_worker[b.worker] += 1;
            // Actions for this worker's envs, then the in-process reference steps the same.
            let next = pool.next_slot_of(b.worker);
            let mut slot = pool.batch_mut(next);
            let actions: Vec<i64> = envs.clone().map(|i| ((round * 5 + i * 3) % 2) as i64).collect();
            slot.rows_mut(Array::Action(0), envs.clone()).copy_from_slice(bytemuck::cast_slice(&actions));
            for (k, i) in envs.clone().enumerate() {
                let obs = &mut want[4 * i..4 * i + 4];
                done[i] = if done[i] {
                    reference[i].reset(None, obs);
                    false
                } else {
                    let s = reference[i].step(&actions[k..k + 1], obs);
                    s.terminated || s.truncated
                };
            }
        }
        let workers: Vec<usize> = batch.iter().map(|b| b.worker).collect();
        pool.send(&workers, CommandKind::Step, None).unwrap();
    }
    // Every command sent came back exactly once: the rest are still in flight.
    assert_eq!(pool.in_flight(), 4);
    let rest = pool.recv(4, order, Some(Duration::from_secs(30))).unwrap();
    let mut rest: Vec<usize> = rest.iter().map(|b| b.worker).collect();
    rest.sort_unstable();
    assert_eq!(rest, [0, 1, 2, 3]);
    assert_eq!(results_per_worker.iter().sum::<usize>(), rounds * per_recv);
    pool.close(Duration::from_secs(5));
    returned
}

#[test]
fn arrival_order_returns_every_result_once_and_matches_the_reference() {
    let seq = run(RecvOrder::Arrival, 2, 300);
    assert_eq!(seq.len(), 600);
}

#[test]
fn sent_order_is_first_in_first_out_whatever_finishes_first() {
    let seq = run(RecvOrder::Sent, 1, 200);
    // One worker per recv, re-sent at once: the workers come back in strict rotation.
    let expected: Vec<usize> = (0..200).map(|i| i % 4).collect();
    assert_eq!(seq, expected);
    let seq = run(RecvOrder::Sent, 2, 100);
    let expected: Vec<usize> = (0..200).map(|i| i % 4).collect();
    assert_eq!(seq, expected);
}

#[test]
fn misuse_is_refused_before_anything_is_sent() {
    let mut pool = pool(4, 2);
    let err = |r: Result<_, WaitError>| match r {
        Err(WaitError::InvalidArgument(m)) => m,
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    assert!(err(pool.recv(1, RecvOrder::Arrival, None).map(drop)).contains("0 have a command in flight"));
    assert!(err(pool.send(&[2], CommandKind::Reset, None).map_err(WaitError::from)).contains("worker 2 out of range"));
    assert!(err(pool.send(&[1, 1], CommandKind::Reset, None).map_err(WaitError::from)).contains("worker 1 named twice"));
    assert!(err(pool.send(&[0], CommandKind::Call, None).map_err(WaitError::from)).contains("Step or Reset"));
    assert_eq!(pool.in_flight(), 0);
    pool.write_seeds(&[Some(1); 4]);
    pool.send(&[0], CommandKind::Reset, None).unwrap();
    assert!(err(pool.send(&[1, 0], CommandKind::Step, None).map_err(WaitError::from))
        .contains("worker 0 (envs 0..2) still has a command"));
    assert!(!pool.is_busy(1), "the refused send sent nothing to worker 1");
    assert!(matches!(pool.submit(CommandKind::Step, None), Err(SubmitError::State(StateError::AlreadyPending))));
    assert!(err(pool.recv(2, RecvOrder::Arrival, None).map(drop)).contains("recv waits for 2 workers but 1"));
    let b = pool.recv(1, RecvOrder::Arrival, None).unwrap();
    assert_eq!((b[0].worker, b[0].kind), (0, CommandKind::Reset));
    // Back to synchronous use: every worker on one slot.
    let out = pool.reset(&[Some(2); 4]).unwrap();
    assert!(out.errors.is_empty());
    pool.close(Duration::from_secs(5));
}

/// A worker that died is reported by `recv` even while another worker's results keep arriving
/// (until 2026-11-27 only a wait in which nothing arrived looked for dead workers, so `recv`
/// handed back the live worker's batches for ever).
#[test]
fn a_dead_worker_is_reported_while_another_keeps_finishing() {
    let mut pool = pool(4, 2);
    pool.write_seeds(&[Some(3); 4]);
    pool.send(&[0, 1], CommandKind::Reset, None).unwrap();
    let first = pool.recv(2, RecvOrder::Sent, None).unwrap();
    assert_eq!(first.iter().map(|b| b.worker).collect::<Vec<_>>(), vec![0, 1]);
    let victim = rustix::process::Pid::from_raw(pool.worker_pids()[0] as i32).unwrap();
    rustix::process::kill_process(victim, rustix::process::Signal::KILL).unwrap();
    // Worker 1 alone steps on; the deadline only ends a run that would otherwise go on for ever.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let error = loop {
        assert!(std::time::Instant::now() < deadline, "worker 0's death not reported in 30 s of batches");
        if let Err(e) = pool.send(&[1], CommandKind::Step, None) {
            break e.into();
        }
        match pool.recv(1, RecvOrder::Arrival, None) {
            Ok(batch) => assert_eq!(batch[0].worker, 1),
            Err(e) => break e,
        }
    };
    match error {
        WaitError::Failed(Failure::WorkerDied(f)) => assert_eq!((f.worker, f.env_ids.clone()), (0, 0..2), "{f:?}"),
        other => panic!("expected WorkerDied for worker 0, got {other:?}"),
    }
}

/// Under `FailurePolicy::Restart`, a worker that died with no command in flight (between `recv`
/// and `send`) is restarted while another worker's results keep arriving, and its next step
/// resets its new envs and reports the restart: rows truncated with reward 0, `restarted` set
/// (until 2026-11-27 the step ran on envs never reset, and the restart was not reported).
#[test]
fn a_worker_restarted_between_recv_and_send_reports_it_with_its_next_step() {
    use ringenv_runtime::{FailurePolicy, RestartPolicy};
    let mut config = builtin_pool::builtin_config("CartPole-v1", 4, 2);
    config.on_failure = FailurePolicy::Restart(RestartPolicy { max_failures: 10, window: Duration::from_secs(600) });
    let mut pool = Pool::spawn(config).unwrap();
    pool.write_seeds(&[Some(5); 4]);
    pool.send(&[0, 1], CommandKind::Reset, None).unwrap();
    pool.recv(2, RecvOrder::Sent, None).unwrap();
    let old = pool.worker_pids()[0];
    let victim = rustix::process::Pid::from_raw(old as i32).unwrap();
    rustix::process::kill_process(victim, rustix::process::Signal::KILL).unwrap();
    // Worker 1 alone steps on until worker 0 was restarted; the deadline only ends a run that
    // would otherwise go on for ever.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while pool.worker_pids()[0] == old {
        assert!(std::time::Instant::now() < deadline, "worker 0 not restarted in 30 s of batches");
        pool.send(&[1], CommandKind::Step, None).unwrap();
        let batch = pool.recv(1, RecvOrder::Arrival, None).unwrap();
        assert_eq!(batch[0].worker, 1);
        assert!(batch[0].restarted.is_none());
    }
    pool.send(&[0], CommandKind::Step, None).unwrap();
    let batch = pool.recv(1, RecvOrder::Arrival, None).unwrap();
    let b = &batch[0];
    assert_eq!((b.worker, b.kind), (0, CommandKind::Step));
    let failure = b.restarted.as_ref().expect("the restart is reported with worker 0's next step");
    assert_eq!((failure.worker, failure.pid), (0, old));
    assert!(b.error.is_none(), "{:?}", b.error);
    let view = pool.batch(b.slot);
    assert_eq!(view.rows(Array::Truncated, 0..2), &[1, 1]);
    assert_eq!(view.rows(Array::Terminated, 0..2), &[0, 0]);
    // Then worker 0 steps on as usual.
    pool.send(&[0], CommandKind::Step, None).unwrap();
    let again = pool.recv(1, RecvOrder::Sent, None).unwrap();
    assert!(again.iter().all(|b| b.error.is_none() && b.restarted.is_none()), "{again:?}");
    pool.close(Duration::from_secs(5));
}
