"""A worker that writes garbage over the shared segment (buggy native code, a hostile env) never
hangs or panics the main process (issue 13, item 3): the env below, inside its worker, maps its own
segment (the descriptor named by ``--segment-fd N`` on its command line) with :mod:`mmap` and
overwrites its worker's rings. The main process answers with
:class:`ringenv.errors.SharedMemoryCorruptError` naming the worker (never
``pyo3_runtime.PanicException``, never a hang with the GIL held), or, under
``on_worker_failure="restart"``, restarts the worker and the run goes on.

The garbage is pseudo-random with a fixed seed, so each run writes the same bytes."""

from __future__ import annotations

import mmap
import os
import random

import gymnasium as gym
import numpy as np
import pytest

import ringenv
from ringenv.errors import InternalError, RingenvError, SharedMemoryCorruptError, WorkerDiedError
from vec_asserts import wait_pids_gone


def _segment_fd() -> int:
    with open("/proc/self/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    return int(argv[argv.index(b"--segment-fd") + 1])


class CorruptingEnv(gym.Env):
    """Observation ``[t]``; ``corrupt(targets)`` overwrites, in the worker whose pid is a key of
    ``targets``, each ``(offset, length)`` region of the segment with seeded random bytes."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], dtype=np.float32), 1.0, False, False, {}

    def corrupt(self, targets):
        regions = targets.get(os.getpid())
        if not regions:
            return False
        rng = random.Random(13)
        with mmap.mmap(_segment_fd(), 0) as segment:  # the whole segment, MAP_SHARED
            for offset, length in regions:
                segment[offset:offset + length] = rng.randbytes(length)
        return True


ONES = np.ones(4, dtype=np.int64)


def _envs(closing, **kwargs):
    return closing(ringenv.AsyncVectorEnv([CorruptingEnv] * 4, num_workers=2, **kwargs))


def _corrupt(envs, worker, ring):
    """Makes worker ``worker`` overwrite its ``ring`` (``"command"`` or ``"completion"``) during a
    ``call``; a corrupt command ring shows at the next command, a corrupt completion ring at once
    (the call's own completion goes through it)."""
    layout = envs._pool.layout()
    command, completion = layout["ring_offsets"][worker]
    offset = command if ring == "command" else completion
    pid = envs._pool.worker_pids()[worker]
    done = envs.call("corrupt", {pid: [(offset, layout["ring_bytes"])]})
    assert sum(done) == 2, "both envs of the worker wrote (the same bytes)"


def _corrupt_then_step(envs, worker, ring):
    _corrupt(envs, worker, ring)
    return envs.step(ONES)


@pytest.mark.parametrize("ring", ["command", "completion"])
def test_a_worker_corrupting_its_ring_is_a_typed_error_naming_it(closing, ring):
    envs = _envs(closing)
    envs.reset(seed=0)
    pids = envs._pool.worker_pids()
    with pytest.raises(SharedMemoryCorruptError) as caught:
        _corrupt_then_step(envs, 1, ring)
    err = caught.value
    assert isinstance(err, WorkerDiedError) and isinstance(err, RingenvError) and isinstance(err, Exception)
    assert err.worker == 1 and err.env_ids == (2, 3) and err.pid == pids[1]
    assert f"{ring} ring" in err.what and "worker 1 " in str(err)
    assert wait_pids_gone(pids) == [], "the corrupting worker is killed, the others stopped"
    with pytest.raises((SharedMemoryCorruptError, gym.error.ClosedEnvironmentError)):
        envs.step(ONES)  # the env is closed after the error


def test_close_returns_after_a_worker_corrupted_its_command_ring(closing):
    envs = _envs(closing)
    envs.reset(seed=0)
    pids = envs._pool.worker_pids()
    _corrupt(envs, 0, "command")
    envs.close()  # used to spin for ever pushing the Close command, the GIL held
    assert wait_pids_gone(pids, timeout=10.0) == []


def test_under_restart_a_worker_corrupting_its_command_ring_is_restarted_and_the_run_goes_on(closing):
    envs = _envs(closing, on_worker_failure="restart")
    envs.reset(seed=0)
    envs.step(ONES)
    old = envs._pool.worker_pids()
    obs, rewards, terminated, truncated, infos = _corrupt_then_step(envs, 1, "command")
    assert infos["worker_restarted"].tolist() == [False, False, True, True]
    assert truncated.tolist() == [False, False, True, True]
    assert obs[:, 0].tolist() == [2.0, 2.0, 0.0, 0.0]
    new = envs._pool.worker_pids()
    assert new[0] == old[0] and new[1] != old[1]
    assert wait_pids_gone([old[1]], timeout=10.0) == []
    obs, rewards, *_ = envs.step(ONES)
    assert obs[:, 0].tolist() == [3.0, 3.0, 1.0, 1.0] and rewards.tolist() == [1.0] * 4


def test_under_restart_a_worker_corrupting_its_completion_ring_fails_only_its_call(closing):
    envs = _envs(closing, on_worker_failure="restart")
    envs.reset(seed=0)
    old = envs._pool.worker_pids()
    with pytest.raises(ringenv.errors.RemoteEnvError, match="restarted"):
        _corrupt(envs, 1, "completion")  # a call cannot be replayed: it fails, the pool goes on
    new = envs._pool.worker_pids()
    assert new[0] == old[0] and new[1] != old[1]
    assert wait_pids_gone([old[1]], timeout=10.0) == []
    envs.reset(seed=0)
    obs, rewards, *_ = envs.step(ONES)
    assert obs[:, 0].tolist() == [1.0] * 4 and rewards.tolist() == [1.0] * 4


def test_a_native_panic_is_an_internal_error_not_a_panic_exception():
    with pytest.raises(InternalError, match="internal error in ringenv's native code.*boom") as caught:
        ringenv._native._panic_for_tests("boom")
    assert isinstance(caught.value, RingenvError) and isinstance(caught.value, RuntimeError)
