//! Integration tests of the pool's inline worker (`PoolConfig::inline`): the layout's last worker
//! is served by the calling process with the same host a worker process runs
//! (`registration::build_host_for`), and its rows, seeds and completions are those of a worker.
//! A pool with an inline share (also one of only the inline worker, with no process) steps
//! exactly as one where every worker is a process; waiting
//! before the inline command ran, or completing one that is not there, is refused; whatever sits
//! in the inline worker's unused completion ring is ignored.

use ringenv_runtime::{Array, CommandKind, Completion, Pool, PoolConfig, RecvOrder, SubmitError, WaitError};
use ringenv_worker::host::EnvHost;
use ringenv_worker::registration;
use std::time::Duration;

#[path = "support/builtin_pool.rs"]
mod builtin_pool;

const N: usize = 8;

fn inline_pool(num_envs: usize, num_workers: usize) -> (Pool, Box<dyn EnvHost>) {
    let config = PoolConfig { inline: true, ..builtin_pool::builtin_config("CartPole-v1", num_envs, num_workers) };
    let init = config.init[0].clone();
    let pool = Pool::spawn(config).unwrap();
    let w = pool.inline_worker().expect("an inline worker");
    let host = registration::build_host_for(&init, pool.layout().worker_envs(w), pool.layout()).unwrap();
    (pool, host)
}

/// Runs the inline worker's pending command on `host`, as the Python binding does.
fn run_inline(pool: &mut Pool, host: &mut dyn EnvHost) {
    let (kind, slot, message) = pool.inline_command().expect("an inline command to run");
    let message = message.map(<[u8]>::to_vec);
    let result = match kind {
        CommandKind::Step => host.step(&mut pool.batch_mut(slot), slot, message.as_deref()),
        CommandKind::Reset => host.reset(&mut pool.batch_mut(slot), slot, message.as_deref()),
        other => panic!("unexpected {other:?}"),
    };
    pool.complete_inline(result, Duration::ZERO).unwrap();
}

fn rows(pool: &Pool, slot: usize) -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
    let b = pool.batch(slot);
    (
        b.rows(Array::Obs(0), 0..N).to_vec(),
        b.rows(Array::Reward, 0..N).to_vec(),
        b.rows(Array::Terminated, 0..N).to_vec(),
        b.rows(Array::Truncated, 0..N).to_vec(),
    )
}

fn write_actions(pool: &mut Pool, round: usize) {
    let actions: Vec<i64> = (0..N).map(|i| ((round * 7 + i * 3) % 2) as i64).collect();
    let slot = pool.next_slot();
    pool.batch_mut(slot).rows_mut(Array::Action(0), 0..N).copy_from_slice(bytemuck::cast_slice(&actions));
}

#[test]
fn an_inline_share_steps_exactly_as_worker_processes() {
    steps_exactly_as_worker_processes(2);
}

#[test]
fn a_pool_of_only_the_inline_worker_has_no_process_and_steps_exactly_as_one() {
    steps_exactly_as_worker_processes(1);
}

/// A pool of `num_workers` workers, the last inline, against one of `num_workers` processes.
fn steps_exactly_as_worker_processes(num_workers: usize) {
    let (mut pool, mut host) = inline_pool(N, num_workers);
    assert_eq!(pool.worker_pids().len(), num_workers - 1, "the worker processes beside the inline worker");
    assert_eq!(pool.inline_worker(), Some(num_workers - 1));
    let mut reference = Pool::spawn(builtin_pool::builtin_config("CartPole-v1", N, num_workers)).unwrap();
    let seeds: Vec<Option<u64>> = (0..N as u64).map(|i| Some(40 + i)).collect();
    pool.write_seeds(&seeds);
    pool.submit(CommandKind::Reset, None).unwrap();
    run_inline(&mut pool, host.as_mut());
    let got = pool.wait(Some(Duration::from_secs(30))).unwrap();
    let want = reference.reset(&seeds).unwrap();
    assert_eq!(rows(&pool, got.slot), rows(&reference, want.slot));
    let mut episodes_ended = 0;
    for round in 0..300 {
        write_actions(&mut pool, round);
        write_actions(&mut reference, round);
        pool.submit(CommandKind::Step, None).unwrap();
        run_inline(&mut pool, host.as_mut());
        let got = pool.wait(Some(Duration::from_secs(30))).unwrap();
        assert!(got.errors.is_empty() && got.restarted.is_empty(), "{got:?}");
        let slot = reference.next_slot();
        reference.submit(CommandKind::Step, None).unwrap();
        let want = reference.wait(Some(Duration::from_secs(30))).unwrap();
        assert_eq!(want.slot, slot);
        let (g, w) = (rows(&pool, got.slot), rows(&reference, want.slot));
        assert_eq!(g, w, "round {round}");
        episodes_ended += g.2.iter().filter(|&&t| t != 0).count();
    }
    assert!(episodes_ended > 0, "the run covered autoresets");
    assert_eq!(pool.control_message_counts(num_workers - 1), (0, 0), "the inline worker has no socket");
}

#[test]
fn waiting_before_the_inline_command_ran_is_refused_and_the_command_stays_pending() {
    let (mut pool, mut host) = inline_pool(N, 2);
    assert!(
        matches!(pool.complete_inline(Ok(None), Duration::ZERO), Err(SubmitError::InvalidArgument(_))),
        "nothing to complete"
    );
    pool.write_seeds(&[Some(1); N]);
    pool.submit(CommandKind::Reset, None).unwrap();
    let refused = pool.wait(Some(Duration::from_secs(30)));
    assert!(matches!(&refused, Err(WaitError::InvalidArgument(m)) if m.contains("inline")), "{refused:?}");
    assert!(pool.is_pending());
    run_inline(&mut pool, host.as_mut());
    assert!(pool.inline_command().is_none());
    assert!(
        matches!(pool.complete_inline(Ok(None), Duration::ZERO), Err(SubmitError::InvalidArgument(_))),
        "completed twice"
    );
    pool.wait(Some(Duration::from_secs(30))).unwrap();
}

#[test]
fn an_inline_error_is_that_workers_error_and_the_pool_goes_on() {
    let (mut pool, mut host) = inline_pool(N, 2);
    pool.write_seeds(&[Some(1); N]);
    pool.submit(CommandKind::Reset, None).unwrap();
    let error =
        ringenv_runtime::RemoteError { kind: "ValueError".into(), message: "boom".into(), ..Default::default() };
    pool.complete_inline(Err(error), Duration::ZERO).unwrap();
    let out = pool.wait(Some(Duration::from_secs(30))).unwrap();
    assert_eq!(out.errors.len(), 1);
    assert_eq!((out.errors[0].0, out.errors[0].1.message.as_str()), (1, "boom"));
    pool.submit(CommandKind::Reset, None).unwrap();
    run_inline(&mut pool, host.as_mut());
    assert!(pool.wait(Some(Duration::from_secs(30))).unwrap().errors.is_empty());
}

#[test]
fn junk_in_the_inline_workers_completion_ring_is_ignored() {
    let (mut pool, mut host) = inline_pool(N, 2);
    // Whoever maps the segment could push into the unused ring of the inline worker.
    let ring = pool.segment().completion_ring(1);
    let _ = ring.push(Completion::new(1, 999, false, false));
    pool.write_seeds(&[Some(3); N]);
    pool.submit(CommandKind::Reset, None).unwrap();
    run_inline(&mut pool, host.as_mut());
    let out = pool.wait(Some(Duration::from_secs(30))).unwrap();
    assert!(out.errors.is_empty() && out.restarted.is_empty(), "{out:?}");
}

#[test]
fn the_inline_share_takes_its_turn_in_send_order() {
    let (mut pool, mut host) = inline_pool(N, 2);
    pool.write_seeds(&[Some(5); N]);
    pool.send(&[0, 1], CommandKind::Reset, None).unwrap();
    // The worker process's reset was sent first: the inline one is not due for one batch.
    assert!(!pool.inline_due(1));
    assert!(pool.inline_due(2));
    let batch = pool.recv(1, RecvOrder::Arrival, Some(Duration::from_secs(30))).unwrap();
    assert_eq!(batch.iter().map(|b| b.worker).collect::<Vec<_>>(), [0]);
    // Now the oldest in flight: recv refuses to wait for it until it has run.
    assert!(pool.inline_due(1));
    let refused = pool.recv(1, RecvOrder::Arrival, Some(Duration::ZERO));
    assert!(matches!(&refused, Err(WaitError::InvalidArgument(m)) if m.contains("inline")), "{refused:?}");
    pool.send(&[0], CommandKind::Step, None).unwrap();
    assert!(pool.inline_due(1), "still older than the worker's new command");
    run_inline(&mut pool, host.as_mut());
    assert!(!pool.inline_due(1));
    let batch = pool.recv(1, RecvOrder::Arrival, Some(Duration::from_secs(30))).unwrap();
    assert_eq!(batch[0].worker, 1, "the inline share arrived first");
    pool.send(&[1], CommandKind::Step, None).unwrap();
    assert!(!pool.inline_due(1), "the worker's step is older");
    assert_eq!(pool.recv(1, RecvOrder::Arrival, Some(Duration::from_secs(30))).unwrap()[0].worker, 0);
}
