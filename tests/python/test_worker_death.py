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
from helper_envs import ExitEnv
from ringenv.errors import WorkerDiedError
from vec_asserts import pid_exists, wait_pids_gone

N, WORKERS = 6, 2
ENV_IDS = [(0, 3), (3, 6)]  # the contiguous groups of 6 envs over 2 workers


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
    assert (exc.worker, exc.pid, exc.env_ids, exc.signal) == (1, pids[1], (3, 6), 9)
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
    assert exc.env_ids == (3, 6)
    assert exc.exitcode == 3
    assert exc.signal is None
    _assert_dead_and_closed(envs, pids)
