//! A worker that writes over the shared segment must not hang, panic or crash the main process
//! (issue 13, item 3). Here the test plays the corrupting worker: it writes into the pool's own
//! mapping (the same pages its `ringenv-worker` processes map) between commands, and checks that
//! the pool answers with a typed [`Failure::Corrupt`] naming the worker, or, under
//! [`FailurePolicy::Restart`], restarts that worker and carries on. No assertion depends on
//! timing: waits use the pool's own timeouts, and a test that used to hang now returns the error.
//!
//! A proptest writes random bytes over a ring and drives both of its sides: every call returns,
//! nothing panics (overflow checks are on in test builds), `len` stays within the capacity.

use proptest::prelude::*;
use ringenv_runtime::{
    Command, CommandKind, Completion, Failure, FailurePolicy, HeapMemory, Memory, Pool, PushError, RestartPolicy, Ring,
    WaitError,
};
use std::sync::Arc;
use std::time::Duration;

#[path = "support/builtin_pool.rs"]
mod builtin_pool;

/// A ring's header: `head`, `tail`, then capacity and claim, each on its own 128-byte line
/// (`CachePadded`); then the cells, each a `u64` stamp and a 16-byte descriptor.
const TAIL: usize = 128;
const CELLS: usize = 384;
const CELL: usize = 24;
const CAPACITY: usize = ringenv_runtime::COMMAND_RING_CAPACITY;

/// Long enough for any loaded machine; only reached by a pool that fails to notice.
const PATIENCE: Duration = Duration::from_secs(60);

fn pool(num_workers: usize, on_failure: FailurePolicy) -> Pool {
    assert_eq!(Ring::<Command>::mem_size(CAPACITY), CELLS + CAPACITY * CELL, "the ring layout these tests write");
    let mut config = builtin_pool::builtin_config("CartPole-v1", 2 * num_workers, num_workers);
    config.on_failure = on_failure;
    let mut pool = Pool::spawn(config).unwrap();
    pool.reset(&vec![Some(1); 2 * num_workers]).unwrap();
    pool
}

/// Writes `bytes` at `offset` of the pool's segment, as a worker mapping it could.
fn scribble(pool: &Pool, offset: usize, bytes: &[u8]) {
    let mem = pool.segment().memory();
    assert!(offset + bytes.len() <= mem.len());
    // SAFETY: in bounds (checked above); no command is in flight, so nothing in this process
    // holds a reference into these bytes, and racing the worker is what the test simulates.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), mem.as_ptr().add(offset), bytes.len()) };
}

fn read_u64(pool: &Pool, offset: usize) -> u64 {
    let mem = pool.segment().memory();
    assert!(offset + 8 <= mem.len());
    // SAFETY: in bounds; an unaligned plain read of bytes another process may write (Pod).
    unsafe { mem.as_ptr().add(offset).cast::<u64>().read_volatile() }
}

/// Sets every cell stamp of worker `w`'s command ring to `stamp`.
fn stamp_command_cells(pool: &Pool, w: usize, stamp: u64) {
    let ring = pool.layout().command_ring_offset(w);
    for cell in 0..CAPACITY {
        scribble(pool, ring + CELLS + cell * CELL, &stamp.to_ne_bytes());
    }
}

fn step(pool: &mut Pool) -> Result<ringenv_runtime::Outcome, WaitError> {
    let n = pool.layout().num_envs;
    let slot = pool.next_slot();
    pool.batch_mut(slot).rows_mut(ringenv_runtime::Array::Action(0), 0..n).fill(0);
    pool.submit(CommandKind::Step, None)?;
    pool.wait(Some(PATIENCE))
}

fn assert_corrupt(result: Result<ringenv_runtime::Outcome, WaitError>, worker: usize, what: &str) {
    match result {
        Err(WaitError::Failed(Failure::Corrupt { what: found, failure })) => {
            assert_eq!(failure.worker, worker);
            assert!(found.contains(what), "{found:?} should mention {what:?}");
            let message = Failure::Corrupt { what: found, failure }.to_string();
            assert!(message.contains(&format!("worker {worker} ")), "{message}");
        }
        Err(other) => panic!("expected Corrupt for worker {worker}, got {other}"),
        Ok(out) => panic!("expected Corrupt for worker {worker}, got {out:?}"),
    }
}

#[test]
fn command_ring_stamps_ahead_of_its_tail_are_corruption_not_a_hang() {
    let mut pool = pool(2, FailurePolicy::Raise);
    // Before the fix, `push` re-read `tail` for ever, with the GIL held in Python.
    stamp_command_cells(&pool, 1, u64::MAX / 2);
    assert_corrupt(step(&mut pool), 1, "command ring");
    assert!(
        matches!(step(&mut pool), Err(WaitError::Failed(Failure::Corrupt { .. }))),
        "the pool is closed with the error"
    );
}

#[test]
fn a_command_ring_that_reads_full_is_corruption_not_a_panic() {
    let mut pool = pool(1, FailurePolicy::Raise);
    // Old stamps: every cell looks unpopped. Before the fix: `expect` panicked.
    stamp_command_cells(&pool, 0, 0);
    assert_corrupt(step(&mut pool), 0, "full");
}

#[test]
fn command_ring_positions_near_the_end_of_u64_never_overflow() {
    let mut pool = pool(1, FailurePolicy::Raise);
    let ring = pool.layout().command_ring_offset(0);
    // A consistent ring at position 2^64 - 1: tail, head and the cell's stamp agree. Before the
    // fix `pos + 1` overflowed (a panic with overflow checks on). Now it wraps: whatever the
    // worker makes of it, the pool answers and never panics.
    let pos = u64::MAX;
    scribble(&pool, ring, &pos.to_ne_bytes());
    scribble(&pool, ring + TAIL, &pos.to_ne_bytes());
    scribble(&pool, ring + CELLS + (pos as usize % CAPACITY) * CELL, &pos.to_ne_bytes());
    match step(&mut pool) {
        Ok(_)
        | Err(WaitError::Failed(Failure::Corrupt { .. } | Failure::WorkerDied(_)) | WaitError::Timeout { .. }) => {}
        Err(other) => panic!("unexpected {other}"),
    }
}

#[test]
fn completion_ring_indices_out_of_range_are_corruption_not_a_wait_for_ever() {
    let mut pool = pool(2, FailurePolicy::Raise);
    let ring = pool.layout().completion_ring_offset(0);
    // `head` (which only this process writes) pushed far past `tail`: no completion can ever be
    // popped. Before the fix the wait ran until its timeout (for ever without one).
    let tail = read_u64(&pool, ring + TAIL);
    scribble(&pool, ring, &(tail + 1000).to_ne_bytes());
    assert_corrupt(step(&mut pool), 0, "completion ring");
}

#[test]
fn a_completion_for_a_command_not_in_flight_is_corruption() {
    let mut pool = pool(1, FailurePolicy::Raise);
    let ring = pool.layout().completion_ring_offset(0);
    // A well-formed completion, pushed by "the worker", for a command it was never sent.
    let head = read_u64(&pool, ring);
    let cell = ring + CELLS + (head as usize % CAPACITY) * CELL;
    scribble(&pool, cell + 8, bytemuck::bytes_of(&Completion::new(0, 999, false, false)));
    scribble(&pool, cell, &(head + 1).to_ne_bytes());
    scribble(&pool, ring + TAIL, &(head + 1).to_ne_bytes());
    assert_corrupt(step(&mut pool), 0, "unexpected completion");
}

#[test]
fn a_completion_naming_another_worker_is_corruption() {
    let mut pool = pool(2, FailurePolicy::Raise);
    let ring = pool.layout().completion_ring_offset(1);
    let head = read_u64(&pool, ring);
    let cell = ring + CELLS + (head as usize % CAPACITY) * CELL;
    scribble(&pool, cell + 8, bytemuck::bytes_of(&Completion::new(u32::MAX, 1, false, false)));
    scribble(&pool, cell, &(head + 1).to_ne_bytes());
    scribble(&pool, ring + TAIL, &(head + 1).to_ne_bytes());
    assert_corrupt(step(&mut pool), 1, "unexpected completion");
}

#[test]
fn under_restart_a_corrupting_worker_is_killed_and_restarted_and_the_run_continues() {
    let policy = RestartPolicy { max_failures: 10, window: Duration::from_secs(600) };
    let mut pool = pool(2, FailurePolicy::Restart(policy));
    let before = pool.worker_pids();
    stamp_command_cells(&pool, 1, u64::MAX / 2);
    let out = step(&mut pool).expect("the corrupting worker is restarted");
    let [(w, failure)] = out.restarted.as_slice() else { panic!("one restart expected: {:?}", out.restarted) };
    assert_eq!(*w, 1);
    let last = failure.last_error.as_ref().expect("the corruption is recorded");
    assert_eq!(last.kind, "SharedMemoryCorrupt");
    let after = pool.worker_pids();
    assert_eq!(after[0], before[0]);
    assert_ne!(after[1], before[1]);
    // Its envs were reset; the next steps run normally on every worker.
    for _ in 0..3 {
        let out = step(&mut pool).unwrap();
        assert!(out.restarted.is_empty() && out.errors.is_empty());
    }
    // The completion side too.
    let ring = pool.layout().completion_ring_offset(0);
    scribble(&pool, ring, &u64::MAX.to_ne_bytes());
    let out = step(&mut pool).expect("restarted again");
    assert_eq!(out.restarted.iter().map(|r| r.0).collect::<Vec<_>>(), vec![0]);
    step(&mut pool).unwrap();
}

#[test]
fn every_wrapping_pool_error_keeps_its_cause_chain() {
    use std::error::Error;
    let mut pool = pool(1, FailurePolicy::Raise);
    stamp_command_cells(&pool, 0, u64::MAX / 2);
    let err = step(&mut pool).unwrap_err();
    // Corrupt -> WorkerFailure -> its RemoteError naming the corruption.
    let failure = err.source().expect("the failure");
    let remote = failure.source().expect("the failure's last error");
    assert!(remote.to_string().contains("SharedMemoryCorrupt"), "{remote}");
}

/// One operation on a ring whose memory holds garbage.
#[derive(Clone, Debug)]
enum Op {
    Push(u64),
    Pop,
    Check,
    /// Overwrite `len` bytes at `at` (modulo the region) with `byte`.
    Scribble {
        at: usize,
        len: usize,
        byte: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<u64>().prop_map(Op::Push),
        Just(Op::Pop),
        Just(Op::Check),
        (any::<usize>(), 1usize..64, any::<u8>()).prop_map(|(at, len, byte)| Op::Scribble { at, len, byte }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random bytes over a ring's whole region, then random pushes, pops, checks and more
    /// scribbles: every call returns (push within its retry bound), nothing panics, `len` never
    /// exceeds the capacity, and a corrupt report names what it read.
    #[test]
    fn random_bytes_over_a_ring_never_panic_or_hang_its_producer_or_consumer(
        garbage in proptest::collection::vec(any::<u8>(), Ring::<Command>::mem_size(4)),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        let size = Ring::<Command>::mem_size(4);
        let mem: Arc<dyn Memory> = Arc::new(HeapMemory::new(size));
        // SAFETY: a fresh zeroed block of the ring's size.
        let ring = unsafe { Ring::<Command>::init(mem.clone(), 0, 4) };
        let consumer = ring.acquire_consumer().unwrap();
        let write = |at: usize, bytes: &[u8]| {
            let at = at % size;
            let len = bytes.len().min(size - at);
            // SAFETY: in bounds (clamped above); this single-threaded test holds no reference
            // into the ring's bytes.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), mem.as_ptr().add(at), len) };
        };
        write(0, &garbage);
        for op in ops {
            match op {
                Op::Push(seq) => match ring.push(Command::new(CommandKind::Step, 0, seq, false)) {
                    Ok(()) | Err(PushError::Full(_)) => {}
                    Err(PushError::Corrupt(_, what)) => prop_assert!(!what.to_string().is_empty()),
                },
                Op::Pop => {
                    let _ = consumer.pop();
                }
                Op::Check => {
                    let _ = consumer.check();
                }
                Op::Scribble { at, len, byte } => write(at, &vec![byte; len]),
            }
            prop_assert!(ring.len() <= ring.capacity());
            let _ = ring.has_ready();
        }
    }
}
