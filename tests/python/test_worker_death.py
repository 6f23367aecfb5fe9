"""A worker process that dies (killed, or exiting inside an env) is reported promptly as a
WorkerDiedError naming it; the vector env is then closed and no worker process is left."""

from __future__ import annotations

import functools
import os
import signal
import threading
import time

import numpy as np
import pytest
from gymnasium.error import ClosedEnvironmentError

import ringenv
from helper_envs import ExitEnv, ExitOnceEnv
from ringenv.errors import WorkerDiedError
from vec_asserts import pid_exists, wait_pids_gone

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


@pytest.mark.parametrize("builtin,victim", [(True, 1), (False, 0), (True, 0)],
                         ids=["rust-worker1", "python-worker0", "rust-worker0"])
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
