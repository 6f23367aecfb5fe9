//! How long worker processes live, against the main process's threads and forks, with the
//! `ringenv-worker` binary (CartPole):
//!
//! - a pool spawned in a thread that then exits keeps its workers (they watch the main
//!   *process*, not the thread that forked them: `PR_SET_PDEATHSIG` killed them with the thread);
//! - a worker restarted (`FailurePolicy::Restart`) from another short-lived thread lives on too;
//! - a `fork` child that drops its copy of a pool leaves the parent's workers running, every
//!   call on the copy is `StateError::ForkedChild`, and its `write_seeds` writes nothing into the
//!   (shared) slots;
//! - a worker given `--segment-fd=-1` exits with its `BadFd` error, not a panic.
//!
//! `harness = false`: the fork tests need a single-threaded process (libtest runs tests on
//! threads, and a fork child of a multi-threaded process may only make async-signal-safe calls).

use ringenv_runtime::{FailurePolicy, Pool, PoolConfig, RestartPolicy, StateError, SubmitError, WaitError};
use std::time::Duration;

#[path = "support/builtin_pool.rs"]
mod builtin_pool;
#[path = "support/harness.rs"]
mod harness;

const WORKER: &str = env!("CARGO_BIN_EXE_ringenv-worker");

fn config(num_envs: usize, num_workers: usize) -> PoolConfig {
    builtin_pool::builtin_config("CartPole-v1", num_envs, num_workers)
}

fn steps(pool: &mut Pool, n: usize) -> Result<(), WaitError> {
    let actions = vec![1i64; pool.layout().num_envs];
    for _ in 0..n {
        let out = pool.step(bytemuck::cast_slice(&actions))?;
        assert!(out.errors.is_empty() && out.restarted.is_empty(), "{out:?}");
    }
    Ok(())
}

fn alive(pid: u32) -> bool {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    // A zombie still answers kill(0); the pool reaps its workers, so a zombie here is a dead one.
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero())).unwrap_or_default();
    let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
    rustix::process::test_kill_process(pid).is_ok() && state != Some(Some('Z'))
}

fn a_pool_spawned_in_a_thread_outlives_the_thread() {
    let mut pool = std::thread::spawn(|| {
        let mut pool = Pool::spawn(config(4, 2)).unwrap();
        pool.reset(&[Some(7); 4]).unwrap();
        pool
    })
    .join()
    .unwrap();
    // The thread that forked the workers is gone; a parent-death signal would have killed them.
    std::thread::sleep(Duration::from_millis(200));
    for pid in pool.worker_pids() {
        assert!(alive(pid), "worker {pid} died with the thread that started it");
    }
    steps(&mut pool, 20).expect("the pool works after the thread that built it ended");
    pool.reset(&[None; 4]).unwrap();
    pool.close(Duration::from_secs(5));
}

fn a_worker_restarted_from_a_short_lived_thread_lives_on() {
    let mut cfg = config(4, 2);
    cfg.on_failure = FailurePolicy::Restart(RestartPolicy { max_failures: 5, window: Duration::from_secs(60) });
    // Built in one thread, restarted in another, used from the main thread after both ended.
    let mut pool = std::thread::spawn(move || Pool::spawn(cfg).unwrap()).join().unwrap();
    pool.reset(&[Some(1); 4]).unwrap();
    let victim = pool.worker_pids()[1];
    let mut pool = std::thread::spawn(move || {
        let pid = rustix::process::Pid::from_raw(victim as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
        let actions = [0i64; 4];
        let out = pool.step(bytemuck::cast_slice(&actions)).expect("the dead worker is restarted");
        assert_eq!(out.restarted.iter().map(|(w, _)| *w).collect::<Vec<_>>(), vec![1]);
        pool
    })
    .join()
    .unwrap();
    let replacement = pool.worker_pids()[1];
    assert_ne!(replacement, victim);
    std::thread::sleep(Duration::from_millis(200));
    assert!(alive(replacement), "the restarted worker died with the thread that started it");
    steps(&mut pool, 20).expect("the pool works after the restarting thread ended");
    pool.close(Duration::from_secs(5));
}

/// Forks; the child runs `child` (its return value is its exit status, with `_exit`: no
/// destructor or atexit handler of the parent's state runs in the child besides what `child`
/// drops itself). Returns the child's exit status.
fn in_fork_child(child: impl FnOnce() -> i32) -> i32 {
    // SAFETY: this test program is single-threaded here (harness = false, no thread running),
    // so the child may allocate and use the pool's descriptors freely.
    match unsafe { libc::fork() } {
        -1 => panic!("fork: {}", std::io::Error::last_os_error()),
        0 => {
            let status = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(101);
            // SAFETY: ends the child at once, running nothing of the parent's (no atexit).
            unsafe { libc::_exit(status) }
        }
        pid => {
            let mut status = 0;
            // SAFETY: waits for our own child; `status` is a valid out-pointer.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            assert!(libc::WIFEXITED(status), "the fork child ended with status {status:#x}");
            libc::WEXITSTATUS(status)
        }
    }
}

fn a_fork_child_dropping_its_copy_leaves_the_parents_workers_running() {
    let mut pool = Pool::spawn(config(4, 2)).unwrap();
    pool.reset(&[Some(3); 4]).unwrap();
    let pids = pool.worker_pids();
    let mut slot = Some(pool);
    let status = in_fork_child(|| {
        let pool = slot.take().unwrap();
        let owner = pool.is_owner();
        drop(pool); // closes this process's copy: must neither command, signal nor reap a worker
        i32::from(owner)
    });
    let mut pool = slot.take().unwrap();
    assert_eq!(status, 0, "the child saw itself as the pool's owner");
    assert!(pool.is_owner());
    assert_eq!(pool.worker_pids(), pids);
    steps(&mut pool, 20).expect("the parent's pool works after a fork child dropped its copy");

    // The same with an explicit close in the child, then std::process::exit.
    let mut slot = Some(pool);
    let status = in_fork_child(|| {
        let mut pool = slot.take().unwrap();
        pool.close(Duration::from_secs(1));
        std::mem::forget(pool);
        0
    });
    let mut pool = slot.take().unwrap();
    assert_eq!(status, 0);
    steps(&mut pool, 20).expect("the parent's pool works after a fork child closed its copy");
    pool.close(Duration::from_secs(5));
}

fn every_call_in_a_fork_child_is_a_forked_child_error() {
    let mut pool = Pool::spawn(config(2, 1)).unwrap();
    pool.reset(&[Some(3); 2]).unwrap();
    let parent = std::process::id();
    let mut slot = Some(pool);
    let status = in_fork_child(|| {
        let mut pool = slot.take().unwrap();
        let me = std::process::id();
        let forked = |r: Result<ringenv_runtime::Outcome, WaitError>, what: &str| match r {
            Err(WaitError::State(StateError::ForkedChild { creator_pid, pid }))
                if creator_pid == parent && pid == me => {}
            other => panic!("{what}: expected ForkedChild, got {other:?}"),
        };
        let err = pool.step(bytemuck::cast_slice(&[0i64; 2])).unwrap_err();
        let text = err.to_string();
        let want =
            format!("this ringenv pool was created by process {parent} and cannot be used in process {me}, a fork");
        assert!(text.starts_with(&want), "{text}");
        forked(Err(err), "step");
        forked(pool.reset(&[None; 2]), "reset");
        assert!(matches!(
            pool.submit(ringenv_runtime::CommandKind::Step, None),
            Err(SubmitError::State(StateError::ForkedChild { .. }))
        ));
        forked(pool.wait(Some(Duration::ZERO)), "wait");
        assert!(matches!(
            pool.send(&[0], ringenv_runtime::CommandKind::Step, None),
            Err(SubmitError::State(StateError::ForkedChild { .. }))
        ));
        assert!(!pool.is_owner());
        0
    });
    let mut pool = slot.take().unwrap();
    assert_eq!(status, 0, "a call in the fork child did not return ForkedChild (see its panic above)");
    steps(&mut pool, 10).expect("the parent's pool is untouched");
    pool.close(Duration::from_secs(5));
}

fn a_fork_child_writes_no_seed_into_the_parents_slots() {
    let mut pool = Pool::spawn(config(2, 1)).unwrap();
    let obs =
        |pool: &Pool, slot: usize| -> Vec<u8> { pool.batch(slot).rows(ringenv_runtime::Array::Obs(0), 0..2).to_vec() };
    let out = pool.reset(&[Some(3); 2]).unwrap();
    let want = obs(&pool, out.slot);
    pool.write_seeds(&[Some(3); 2]);
    let mut slot = Some(pool);
    let status = in_fork_child(|| {
        let mut pool = slot.take().unwrap();
        pool.write_seeds(&[Some(999); 2]); // shared memory: must not reach the parent's next reset
        0
    });
    let mut pool = slot.take().unwrap();
    assert_eq!(status, 0);
    pool.submit(ringenv_runtime::CommandKind::Reset, None).unwrap();
    let out = pool.wait(Some(Duration::from_secs(30))).unwrap();
    assert_eq!(obs(&pool, out.slot), want, "the parent's reset ran with the fork child's seeds");
    pool.close(Duration::from_secs(5));
}

fn a_negative_descriptor_is_a_bad_fd_error_not_a_panic() {
    let me = std::process::id().to_string();
    for (args, named) in [
        (["--segment-fd=-1", "--control-fd=0"], "segment descriptor -1 is not open in the worker"),
        (["--segment-fd=0", "--control-fd=-1"], "control descriptor -1 is not open in the worker"),
    ] {
        let out = std::process::Command::new(WORKER)
            .args(args)
            .args(["--worker", "0", "--parent-pid", &me])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

fn main() {
    let tests: [(&str, fn()); 6] = [
        ("a_pool_spawned_in_a_thread_outlives_the_thread", a_pool_spawned_in_a_thread_outlives_the_thread),
        (
            "a_worker_restarted_from_a_short_lived_thread_lives_on",
            a_worker_restarted_from_a_short_lived_thread_lives_on,
        ),
        (
            "a_fork_child_dropping_its_copy_leaves_the_parents_workers_running",
            a_fork_child_dropping_its_copy_leaves_the_parents_workers_running,
        ),
        ("every_call_in_a_fork_child_is_a_forked_child_error", every_call_in_a_fork_child_is_a_forked_child_error),
        ("a_fork_child_writes_no_seed_into_the_parents_slots", a_fork_child_writes_no_seed_into_the_parents_slots),
        ("a_negative_descriptor_is_a_bad_fd_error_not_a_panic", a_negative_descriptor_is_a_bad_fd_error_not_a_panic),
    ];
    harness::run_tests(&tests);
}
