"""Smoke test of an installed ringenv wheel, run by scripts/wheel_smoke.sh under each CPython from
3.10 on, from outside the source tree. Prints ``ok`` per check; a failing check raises (exit
status 1, with its traceback).

    python scripts/smoke.py
"""

from __future__ import annotations

import gc
import importlib
import os
import signal
import sys
import warnings

import gymnasium as gym
import numpy as np

import ringenv
from ringenv import _native
from ringenv.errors import WorkerDiedError


def _cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def check_import() -> str:
    so = os.path.basename(_native.__file__ or "")
    assert so == "_native.abi3.so", f"ringenv._native is {so!r}, not the abi3 build _native.abi3.so"
    site = os.path.dirname(os.path.dirname(ringenv.__file__))
    assert "site-packages" in site, f"ringenv imported from {site}, not from the installed wheel"
    importlib.import_module("ringenv.cli")  # the CLI's modules import on this interpreter too
    return f"ringenv {ringenv.__version__} from {so}"


def check_rust_env() -> str:
    env = ringenv.make_vec("CartPole-v1", 4)
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4, 4) and obs.dtype == np.float32, (obs.shape, obs.dtype)
        for _ in range(20):
            obs, reward, terminated, truncated, _ = env.step(np.ones(4, dtype=np.int64))
        assert reward.shape == (4,) and reward.dtype == np.float64, (reward.shape, reward.dtype)
        assert terminated.dtype == np.bool_ and truncated.dtype == np.bool_
    finally:
        env.close()
    return "make_vec('CartPole-v1', 4): reset, 20 steps, close (Rust worker)"


def check_python_envs() -> str:
    env = ringenv.AsyncVectorEnv([_cartpole] * 4, num_workers=2)
    try:
        obs, _ = env.reset(seed=0)
        reference = gym.vector.SyncVectorEnv([_cartpole] * 4)
        expected, _ = reference.reset(seed=0)
        assert np.array_equal(obs, expected), "reset observations differ from SyncVectorEnv's"
        actions = np.array([0, 1, 0, 1])
        obs, reward, *_ = env.step(actions)
        expected, expected_reward, *_ = reference.step(actions)
        reference.close()
        assert np.array_equal(obs, expected) and np.array_equal(reward, expected_reward)
    finally:
        env.close()
    return "AsyncVectorEnv of 4 gym.make('CartPole-v1'): reset, step equal SyncVectorEnv's, close"


def check_view_outlives_close() -> str:
    env = ringenv.AsyncVectorEnv([_cartpole] * 2, num_workers=1, copy=False)
    env.reset(seed=0)
    obs, *_ = env.step(np.zeros(2, dtype=np.int64))
    before = obs.tolist()
    env.close()
    # The segment is exported through NumPy's array interface (no buffer protocol in the 3.10
    # stable ABI): the view holds the mapping through its bases, down to a Segment.
    base = obs
    while isinstance(base, (np.ndarray, memoryview)):
        base = base.obj if isinstance(base, memoryview) else base.base
    assert type(base).__name__ == "Segment", f"the view's last base is {type(base)!r}"
    assert obs.tolist() == before, "a view read different values after close"
    del obs, base
    gc.collect()
    return "a copy=False observation outlives close() and holds the mapping (its base is a Segment)"


def check_worker_death() -> str:
    env = ringenv.AsyncVectorEnv([_cartpole] * 4, num_workers=2)
    try:
        env.reset(seed=0)
        pid = env._pool.worker_pids()[1]
        os.kill(pid, signal.SIGKILL)
        try:
            env.step(np.zeros(4, dtype=np.int64))
        except WorkerDiedError as e:
            message = str(e)
        else:
            raise AssertionError("step after SIGKILL of a worker did not raise WorkerDiedError")
    finally:
        env.close()
    assert env.closed
    return f"SIGKILL of worker pid {pid}, then step: WorkerDiedError ({message.splitlines()[0][:60]}...); close"


def check_fork_with_open_pools() -> str:
    python_pool = ringenv.AsyncVectorEnv([_cartpole] * 2, num_workers=1)
    rust_pool = ringenv.make_vec("CartPole-v1", 2)
    try:
        python_pool.reset(seed=0)
        rust_pool.reset(seed=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pid = os.fork()
            if pid == 0:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert status == 0, f"the fork child ended with status {status:#x}"
        # Python 3.12+ warn at a fork when the process has other threads than the caller's.
        threaded = [str(w.message) for w in caught if "multi-threaded" in str(w.message)]
        assert not threaded, f"the fork warned: {threaded}"
        python_pool.step(np.zeros(2, dtype=np.int64))
        rust_pool.step(np.zeros(2, dtype=np.int64))
    finally:
        python_pool.close()
        rust_pool.close()
    return "os.fork() with a Python and a Rust pool open: no multi-threaded warning; both step on"


def main() -> int:
    version = ".".join(map(str, sys.version_info[:3]))
    for check in (check_import, check_rust_env, check_python_envs, check_view_outlives_close, check_worker_death,
                  check_fork_with_open_pools):
        print(f"python {version}: ok   {check()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
