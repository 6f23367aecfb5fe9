"""A worker that dies, hangs or stops: killed (SIGKILL mid-run or between steps), exiting or
crashing inside an env (an exit code, a segfault, a Rust panic), dying before its handshake, in
reset or in a call, with the restart policy and its crash loop, in asynchronous batches, or whose
factory never returns; and the main process killed. Each ends in a typed error naming the worker
(its index, pid, env ids, exit code or signal, last error) or in a recovery, never a hang, and
leaves no process or file behind. Also: the resources a worker gets (one thread, no GPU, only its
own descriptors)."""

from __future__ import annotations

import functools
import glob
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ClosedEnvironmentError
from rich.console import Console

import ringenv
from ringenv import _native
from ringenv.cli import top
from ringenv.errors import CrashLoopError, StartupTimeoutError, WorkerDiedError

from helper_envs import ONES, CounterEnv, ExitEnv, exiting_factory, ExitOnceEnv, FaultEnv, faulty as _faulty


from vec_asserts import child_pids, pid_exists, wait_pids_gone

# -- worker death ---------------------------------------------------------------------------


N, WORKERS = 6, 2


ENV_IDS = [(0, 1, 2), (3, 4, 5)]  # the contiguous groups of 6 envs over 2 workers (env indices)


def _cartpole(closing, builtin):
    envs = closing(ringenv.make_vec("CartPole-v1", N, vector_kwargs={"num_workers": WORKERS},
                                    prefer_builtin=builtin))
    pids = list(envs._pool.worker_pids())
    assert len(pids) == WORKERS and len(set(pids)) == WORKERS
    assert all(pid_exists(p) for p in pids)
    return envs, pids


def _assert_dead_and_closed(envs, pids):
    left = wait_pids_gone(pids, timeout=1.0)
    assert not left, f"worker processes {left} still exist after the death of a worker"
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert envs.closed
    with pytest.raises(ClosedEnvironmentError):
        envs.step(np.zeros(envs.num_envs, dtype=np.int64))
    with pytest.raises(ClosedEnvironmentError):
        envs.reset(seed=0)
    envs.close()  # harmless on a closed env


@pytest.mark.parametrize("builtin,victim", [(True, 1), (False, 0)], ids=["rust-worker1", "python-worker0"])
def test_sigkill_mid_run_raises_worker_died_error_within_a_second(closing, builtin, victim):
    envs, pids = _cartpole(closing, builtin)
    rng = np.random.default_rng(0)
    envs.reset(seed=0)
    killed_at = []

    def kill():
        killed_at.append(time.monotonic())
        os.kill(pids[victim], signal.SIGKILL)

    timer = threading.Timer(0.3, kill)
    timer.start()
    steps, raised_at = 0, None
    try:
        with pytest.raises(WorkerDiedError) as info:
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:
                envs.step(rng.integers(0, 2, size=N))
                steps += 1
        raised_at = time.monotonic()
    finally:
        timer.cancel()
        timer.join()
    assert killed_at, "the worker was never killed"
    assert steps > 0
    # A hang check, not a latency bound (benches measure the latency): the death is noticed by the
    # pidfd poll of the very next wait, long before the 10 s loop would end.
    assert raised_at - killed_at[0] < 10.0, f"WorkerDiedError came {raised_at - killed_at[0]:.3f} s after the kill"

    exc = info.value
    assert exc.worker == victim
    assert exc.pid == pids[victim]
    assert exc.env_ids == ENV_IDS[victim]
    assert exc.signal == signal.SIGKILL == 9
    assert exc.exitcode is None
    assert str(victim) in str(exc)
    _assert_dead_and_closed(envs, pids)


def test_sigkill_between_steps_is_reported_on_the_next_call(closing):
    envs, pids = _cartpole(closing, True)
    envs.reset(seed=1)
    envs.step(np.ones(N, dtype=np.int64))
    os.kill(pids[1], signal.SIGKILL)
    with pytest.raises(WorkerDiedError) as info:
        for _ in range(100):  # the death is noticed by the first call that needs the worker
            envs.step(np.ones(N, dtype=np.int64))
    exc = info.value
    assert (exc.worker, exc.pid, exc.env_ids, exc.signal) == (1, pids[1], (3, 4, 5), 9)
    _assert_dead_and_closed(envs, pids)


def test_worker_exiting_inside_step_reports_its_exit_code(closing):
    fns = [functools.partial(ExitEnv, i, exit_env=4, exit_at=2, code=3) for i in range(N)]
    envs = closing(ringenv.AsyncVectorEnv(fns, num_workers=WORKERS))
    pids = list(envs._pool.worker_pids())
    envs.reset(seed=0)
    envs.step(np.ones(N, dtype=np.int64))
    with pytest.raises(WorkerDiedError) as info:
        envs.step(np.ones(N, dtype=np.int64))
    exc = info.value
    assert exc.worker == 1
    assert exc.pid == pids[1]
    assert exc.env_ids == (3, 4, 5)
    assert exc.exitcode == 3
    assert exc.signal is None
    _assert_dead_and_closed(envs, pids)


def _recv_until(envs, stop, what):
    """recv()/send() round after round (actions 1) until ``stop(infos)`` holds; returns those
    infos (not sent again). The deadline only ends a run that would otherwise go on for ever
    (before the test's own limit of 60 s)."""
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        infos = envs.recv()[4]
        if stop(infos):
            return infos
        envs.send(np.ones(len(infos["env_id"]), np.int64), infos["env_id"])
    raise AssertionError(f"{what}: not seen in 45 s of batches")


def test_a_worker_dying_in_asynchronous_batches_is_reported_while_the_others_keep_finishing(closing):
    """recv() hands back whichever workers finished first. A worker that died is noticed even while
    the others' batches keep coming (until 2026-11-27 only a wait with nothing arriving looked, so
    recv() returned the live worker's batches for ever and never reported the dead one)."""
    fns = [functools.partial(ExitEnv, i, exit_env=0, exit_at=3, code=3) for i in range(4)]
    envs = closing(ringenv.AsyncVectorEnv(fns, num_workers=2, inline=False, batch_size=2))
    pids = list(envs._pool.worker_pids())
    envs.async_reset(seed=0)
    with pytest.raises(WorkerDiedError) as info:
        _recv_until(envs, lambda infos: False, "WorkerDiedError")
    assert (info.value.worker, info.value.exitcode, info.value.env_ids) == (0, 3, (0, 1))
    _assert_dead_and_closed(envs, pids)


def test_a_worker_dying_in_asynchronous_batches_is_restarted_while_the_others_keep_finishing(closing, tmp_path):
    fns = [functools.partial(ExitOnceEnv, i, exit_env=0, exit_at=3, code=3, marker=str(tmp_path / "exited"))
           for i in range(4)]
    envs = closing(ringenv.AsyncVectorEnv(fns, num_workers=2, inline=False, batch_size=2,
                                          on_worker_failure="restart"))
    envs.async_reset(seed=0)
    with pytest.warns(UserWarning, match="restarted"):
        infos = _recv_until(envs, lambda infos: "worker_restarted" in infos, "the restarted worker's batch")
    assert infos["env_id"].tolist() == [0, 1] and infos["worker_restarted"].all()
    # Both workers go on: each one's batches keep coming after the restart.
    envs.send(np.ones(2, np.int64), infos["env_id"])
    seen = set()
    _recv_until(envs, lambda infos: seen.update(infos["env_id"].tolist()) or seen == {0, 1, 2, 3}, "both workers")

# -- the restart policy, hangs, the main process killed, the resources workers get --------------




def test_restart_policy_replaces_a_killed_worker_and_the_run_goes_on(closing):
    envs = _faulty(closing, on_worker_failure="restart")
    envs.reset(seed=0)
    for _ in range(3):
        envs.step(ONES)
    old = envs._pool.worker_pids()
    os.kill(old[1], signal.SIGKILL)
    obs, rewards, terminated, truncated, infos = envs.step(ONES)
    # Envs 2 and 3 (worker 1) were reset: first observation, reward 0, truncated, flagged.
    assert truncated.tolist() == [False, False, True, True]
    assert terminated.tolist() == [False] * 4 and rewards.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert obs[:, 0].tolist() == [4.0, 4.0, 0.0, 0.0]
    assert infos["worker_restarted"].tolist() == [False, False, True, True]
    assert infos["_worker_restarted"].tolist() == [False, False, True, True]
    new = envs._pool.worker_pids()
    assert new[0] == old[0] and new[1] != old[1]
    assert wait_pids_gone([old[1]]) == []
    obs, rewards, *_ = envs.step(ONES)  # the run goes on, the restarted envs from their reset
    assert obs[:, 0].tolist() == [5.0, 5.0, 1.0, 1.0] and rewards.tolist() == [1.0] * 4


def test_a_worker_that_dies_in_every_step_is_a_crash_loop(closing):
    envs = _faulty(closing, faults={3: {"die_always": True}}, on_worker_failure="restart", max_restarts=2)
    envs.reset(seed=0)
    pids = envs._pool.worker_pids()
    with pytest.raises(CrashLoopError) as info:
        for _ in range(10):
            envs.step(ONES)
    err = info.value
    assert err.failures == 3 and err.worker == 1 and err.env_ids == (2, 3) and err.exitcode == 3
    assert envs.closed
    assert wait_pids_gone(pids + envs._pool.worker_pids()) == []


def test_a_hung_worker_times_out_and_terminate_kills_it(closing):
    envs = _faulty(closing, faults={1: {"hang_at": 2}})
    envs.reset(seed=0)
    envs.step(ONES)
    pids = envs._pool.worker_pids()
    envs.step_async(ONES)
    start = time.monotonic()
    with pytest.raises(multiprocessing.TimeoutError):
        envs.step_wait(timeout=0.3)
    # The timeout is never cut short; the worker hangs for ever, so any return at all is the point.
    assert 0.25 <= time.monotonic() - start < 30.0
    envs.close(terminate=True)
    assert wait_pids_gone(pids, timeout=30.0) == []


def test_a_stopped_worker_times_out_and_close_kills_it(closing):
    envs = _faulty(closing)
    envs.reset(seed=0)
    pids = envs._pool.worker_pids()
    os.kill(pids[0], signal.SIGSTOP)
    envs.step_async(ONES)
    with pytest.raises(multiprocessing.TimeoutError):
        envs.step_wait(timeout=0.3)
    envs.close(timeout=0.5)  # asks, waits, then kills: a stopped process cannot answer
    assert wait_pids_gone(pids) == []


def test_a_worker_dying_before_its_handshake_is_reported(tmp_path):
    # Only this process's own children count: other programs on the machine start processes too.
    before = child_pids()
    with pytest.raises(WorkerDiedError) as info:
        ringenv.AsyncVectorEnv([FaultEnv, functools.partial(exiting_factory, 7)], num_workers=2)
    assert (info.value.worker, info.value.exitcode) == (1, 7)
    assert wait_pids_gone(child_pids() - before, timeout=30.0) == []


@pytest.mark.parametrize("kind", ["python", "rust"])
def test_killing_the_main_process_ends_every_worker_and_leaves_no_file(tmp_path, kind):
    make = ("ringenv.AsyncVectorEnv([lambda: gym.make('CartPole-v1')] * 4, num_workers=2)" if kind == "python"
            else "ringenv.make_vec('CartPole-v1', 4, vector_kwargs={'num_workers': 2})")
    script = tmp_path / "owner.py"
    script.write_text(textwrap.dedent(f"""
        import time, gymnasium as gym, numpy as np, ringenv
        envs = {make}
        envs.reset(seed=0)
        print(" ".join(map(str, envs._pool.worker_pids())), flush=True)
        while True:
            envs.step(np.ones(4, dtype=np.int64))
    """))
    shm_before = set(glob.glob("/dev/shm/*"))
    # A private TMPDIR: other programs on the machine write to /tmp as they please.
    private_tmp = tmp_path / "tmpdir"
    private_tmp.mkdir()
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "TMPDIR": str(private_tmp)})
    try:
        workers = [int(p) for p in owner.stdout.readline().split()]
        assert len(workers) == 2
        time.sleep(0.2)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=10)
        # Each worker's watcher thread is woken by the kernel when the main process ends; the bound
        # only catches a hang, not a latency (see benches for that).
        assert wait_pids_gone(workers, timeout=30.0) == [], "every worker exits with the main process"
        # Other processes (another test worker's torch or multiprocessing) may add to /dev/shm
        # meanwhile: what counts is an entry named after ringenv or the killed process.
        new = set(glob.glob("/dev/shm/*")) - shm_before
        assert [p for p in new if "ringenv" in p or str(owner.pid) in p] == []
        assert set(os.listdir(private_tmp)) == set(), "nothing left in the owner's TMPDIR"
        assert [p for p in ringenv._native.list_pools() if p["pid"] == owner.pid] == []
    finally:
        if owner.poll() is None:
            owner.kill()


def test_workers_get_one_thread_no_gpu_and_only_their_own_descriptors(closing):
    r, w = os.pipe()  # the main process's descriptors are close-on-exec: no worker sees them
    try:
        envs = _faulty(closing, n=2, workers=1, worker_env={"MY_FLAG": "on", "CUDA_VISIBLE_DEVICES": None})
        assert envs.call("environ", "OMP_NUM_THREADS") == ("1", "1")
        assert envs.call("environ", "MY_FLAG") == ("on", "on")
        assert envs.call("environ", "CUDA_VISIBLE_DEVICES") == (os.environ.get("CUDA_VISIBLE_DEVICES"),) * 2
        default = _faulty(closing, n=2, workers=1)
        assert default.call("environ", "CUDA_VISIBLE_DEVICES") == ("", "")
        fds = default.call("open_fds")[0]
        assert r not in fds or w not in fds
        assert len(fds) <= 12, f"a worker holds {len(fds)} descriptors: {fds}"
    finally:
        os.close(r)
        os.close(w)


def test_a_segfault_in_an_env_is_reported_with_its_signal(closing):
    envs = _faulty(closing, faults={1: {"segfault_at": 1}})
    envs.reset(seed=0)
    with pytest.raises(WorkerDiedError) as info:
        envs.step(ONES)
    assert (info.value.worker, info.value.signal, info.value.exitcode) == (0, signal.SIGSEGV, None)
    assert "SIGSEGV" in str(info.value)


def test_a_worker_dying_in_reset_is_restarted_and_the_reset_rerun(closing, tmp_path):
    marker = str(tmp_path / "died-once")
    envs = _faulty(closing, faults={3: {"die_in_reset_unless": marker}}, on_worker_failure="restart")
    obs, infos = envs.reset(seed=0)
    assert os.path.exists(marker)
    assert obs[:, 0].tolist() == [0.0] * 4
    assert infos["worker_restarted"].tolist() == [False, False, True, True]
    obs, *_ = envs.step(ONES)
    assert obs[:, 0].tolist() == [1.0] * 4


def test_a_worker_dying_in_a_call(closing):
    envs = _faulty(closing)
    envs.reset(seed=0)
    with pytest.raises(WorkerDiedError) as info:
        envs.call("crash")
    assert info.value.exitcode == 5
    restarting = _faulty(closing, on_worker_failure="restart")
    restarting.reset(seed=0)
    with pytest.raises(ringenv.errors.RemoteEnvError, match="restarted"):
        restarting.call("crash")  # a call cannot be replayed: it fails, the pool goes on
    obs, *_ = restarting.step(ONES)
    assert obs.shape == (4, 1)


PANIC_AT = r"\(panicked at workers/src/envs/cartpole\.rs:\d+:\d+\)"


PANIC = r"CartPole action 2 is out of range: valid actions are 0 and 1 " + PANIC_AT


def _my_snapshot() -> dict:
    [entry] = [p for p in _native.list_pools() if p["pid"] == os.getpid()]
    return _native.pool_snapshot(entry["pid"], entry["fd"])


def test_a_rust_env_panicking_under_restart_names_the_panic_and_its_location_everywhere(closing):
    # Under "restart" a Rust env's panic ends its worker (status 101). Before it exits, the worker
    # leaves the panic's text and location in shared memory: the restart warning, `ringenv top`'s
    # last error and the crash loop's error all say what happened, not only "exit code 101".
    envs = closing(ringenv.make_vec("CartPole-v1", 2, vector_kwargs={
        "num_workers": 1, "on_worker_failure": "restart", "max_restarts": 1, "check_actions": False}))
    envs.reset(seed=0)
    bad = np.array([0, 2])  # env 1's action is out of range: CartPole panics
    with pytest.warns(UserWarning, match=r"ringenv worker 0 \(pid \d+, envs \[0, 1\]\) exited with code 101; its "
                                         r"last error: panic: " + PANIC + r" \(env 1\); it was restarted") as caught:
        _, _, _, truncated, infos = envs.step(bad)
    assert len([w for w in caught if "was restarted" in str(w.message)]) == 1
    assert truncated.tolist() == [True, True] and infos["worker_restarted"].tolist() == [True, True]
    [worker] = _my_snapshot()["workers"]
    assert worker["restarts"] == 1 and worker["env_ids"] == range(0, 2)
    assert re.fullmatch(r"panic: " + PANIC + r" \(env 1\)", worker["last_error"]), worker["last_error"]
    shown = _render_top()
    assert re.search(r"panic: CartPole.*\u2026.*cartpole\.rs:\d+:\d+\) \(env 1\)", shown), shown  # location kept

    with pytest.raises(CrashLoopError) as info:
        envs.step(bad)  # the restarted worker's env 1 panics again: the second death is a crash loop
    err = info.value
    assert re.search(r"worker 0 \(pid \d+, envs \[0, 1\]\) died: exited with code 101; its last error: panic: "
                     + PANIC + r" \(env 1\)", str(err)), str(err)
    assert (err.worker, err.env_ids, err.exitcode, err.failures) == (0, (0, 1), 101, 2)
    assert (err.last_error["kind"], err.last_error["env_id"]) == ("panic", 1)
    assert re.fullmatch(PANIC, err.last_error["message"]), err.last_error


def _render_top() -> str:
    """``ringenv top``'s view of this process's pools, as text."""
    console = Console(record=True, width=200, file=open(os.devnull, "w"))
    console.print(top._view(top._snapshots(), {}, 1.0, []))
    return console.export_text()


def test_top_cuts_a_long_error_in_its_middle_keeping_the_location():
    text = "panic: " + "x" * 200 + " (panicked at src/lib.rs:12:5) (env 3)"
    shown = top._printable_middle(text)
    assert len(shown) == top._MAX_LAST_ERROR_CHARS and shown.startswith("panic: xxx")
    assert shown.endswith("xx (panicked at src/lib.rs:12:5) (env 3)") and shown.count("\u2026") == 1
    assert top._printable_middle("short\n") == "short\\x0a"


def test_a_raised_panic_keeps_its_location_in_tops_last_error(closing):
    envs = closing(ringenv.make_vec("CartPole-v1", 2, vector_kwargs={"num_workers": 1, "check_actions": False}))
    envs.reset(seed=0)
    with pytest.raises(ringenv.errors.RemoteEnvError, match=PANIC):
        envs.step(np.array([2, 0]))
    [worker] = _my_snapshot()["workers"]
    assert re.fullmatch(r"panic: " + PANIC, worker["last_error"]), worker["last_error"]
    assert re.search(r"cartpole\.rs:\d+:\d+\)", _render_top())


def _never_returns():
    """An env factory that blocks for ever on an event nobody sets (a constructor that hangs)."""
    threading.Event().wait()


def test_a_worker_whose_factory_never_returns_is_named_with_its_factory_and_the_fix():
    before = child_pids()
    # Worker 2's factory never returns. The message says it was building its envs once the
    # worker joined the pool (its interpreter started) before the timeout: a loaded machine may
    # need a longer timeout for that, never gives a different report.
    for seconds in (2, 10, 60):
        with pytest.raises(multiprocessing.TimeoutError) as info:
            ringenv.AsyncVectorEnv([CounterEnv, CounterEnv, _never_returns], num_workers=3, startup_timeout=seconds)
        err = info.value
        if err.building:
            break
    assert isinstance(err, StartupTimeoutError) and err.building
    assert (err.worker, err.env_ids, err.seconds) == (2, (2,), seconds) and err.pid > 0
    text = str(err)
    assert text.startswith(f"worker 2 (pid {err.pid}, envs [2]) did not start within {seconds} s (startup_timeout): "
                           f"it was building its envs: their factories or constructors had not returned"), text
    assert "it runs the env factories env_fns[2] = <function _never_returns at " in text, text
    assert err.program.startswith("the env factories env_fns[2] = <function _never_returns")
    assert "pass a larger startup_timeout=" in text and "something in it hangs" in text
    assert wait_pids_gone(child_pids() - before, timeout=30.0) == []


def test_a_worker_that_had_not_joined_is_reported_as_still_starting():
    fields = {"worker": 1, "pid": 42, "env_ids": (4, 5, 6, 7, 8, 9, 10, 11, 12), "seconds": 0.5, "building": False,
              "program": "/bin/worker"}
    err = ringenv.errors._from_native("startup_timeout", "the runtime's text", fields)
    assert isinstance(err, StartupTimeoutError) and isinstance(err, multiprocessing.TimeoutError)
    assert str(err).startswith("worker 1 (pid 42, envs [4, 5, ..., 12] (9 envs)) did not start within 0.5 s "
                               "(startup_timeout): its program had not joined the pool yet"), str(err)
    assert "it runs /bin/worker." in str(err) and err.env_ids == fields["env_ids"]


def test_a_start_up_timeout_names_a_rust_envs_id_as_what_the_worker_runs(closing):
    envs = closing(ringenv.make_vec("CartPole-v1", 2, vector_kwargs={"num_workers": 1}))
    assert envs._program_text((0, 1)) == "ringenv's built-in Rust env 'CartPole-v1' (constructed in a worker process)"
    py = closing(ringenv.AsyncVectorEnv([CounterEnv] * 4, num_workers=2))
    text = py._program_text((2, 3))
    assert text.startswith("the env factories env_fns[2] = <class 'helper_envs.CounterEnv'>, env_fns[3] = "), text
    assert text.endswith(" in a Python worker process"), text
