"""Vector envs against the main process's threads: workers live as long as the main *process*,
not the thread that started them. A pool built in a thread that then ends, and a worker restarted
(``on_worker_failure="restart"``) from another short-lived thread, keep working. (Before, the
kernel's parent-death signal, which fires when the forking *thread* exits, killed them:
``WorkerDiedError ... killed by signal 9``.)"""

from __future__ import annotations

import os
import signal
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

import ringenv
from helper_envs import FaultEnv
from vec_asserts import pid_exists


def _in_thread(fn):
    """Runs ``fn()`` in a new thread, joins it, and returns its result (or raises its error)."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # re-raised in the caller
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert not t.is_alive()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _settle():
    # Gives a parent-death signal (the bug) time to land; the assertions below do not depend on it.
    time.sleep(0.3)


def test_a_rust_env_built_in_a_thread_works_after_the_thread_ends(closing):
    envs = closing(_in_thread(lambda: ringenv.make_vec("CartPole-v1", 4, vector_kwargs={"num_workers": 2})))
    _settle()
    assert all(pid_exists(p) for p in envs._pool.worker_pids())
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (4, 4)
    for _ in range(5):
        obs, *_ = envs.step(np.ones(4, dtype=np.int64))
    assert obs.shape == (4, 4)


@pytest.mark.parametrize("num_workers", [2, 0])  # 0: the pool with no worker process
def test_a_python_env_built_in_a_thread_works_after_the_thread_ends(closing, num_workers):
    make = lambda: ringenv.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4, num_workers=num_workers)  # noqa: E731
    envs = closing(_in_thread(make))
    _settle()
    obs, _ = envs.reset(seed=0)
    for _ in range(5):
        obs, *_ = envs.step(np.ones(4, dtype=np.int64))
    assert obs.shape == (4, 4)


def test_a_worker_restarted_from_another_thread_lives_after_that_thread_ends(closing):
    envs = closing(_in_thread(
        lambda: ringenv.AsyncVectorEnv([FaultEnv] * 4, num_workers=2, on_worker_failure="restart")))
    envs.reset(seed=0)
    old = envs._pool.worker_pids()
    os.kill(old[1], signal.SIGKILL)
    ones = np.ones(4, dtype=np.int64)
    # The step that notices the death restarts worker 1: from this short-lived thread.
    infos = _in_thread(lambda: envs.step(ones)[4])
    assert infos["worker_restarted"].tolist() == [False, False, True, True]
    new = envs._pool.worker_pids()
    assert new[0] == old[0] and new[1] != old[1]
    _settle()
    assert pid_exists(new[1]), "the restarted worker died with the thread that restarted it"
    obs, rewards, *_ = envs.step(ones)
    assert obs[:, 0].tolist() == [2.0, 2.0, 1.0, 1.0] and rewards.tolist() == [1.0] * 4
