"""Errors: env exceptions re-raised in the caller, start-up failures, bad actions, and the
async protocol errors."""

from __future__ import annotations

import functools
import multiprocessing
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError

import ringenv
from helper_envs import (
    ColourSpace,
    CounterEnv,
    OddNotesEnv,
    RaisingEnv,
    SizedEnv,
    SlowEnv,
    StepError,
    StringRewardEnv,
    failing_factory,
)
from ringenv.errors import RemoteEnvError, RemoteTraceback, WorkerStartupError
from vec_asserts import assert_identical, child_pids, notes_by_env, wait_new_children_gone, wait_pids_gone

N = 4


def _counter_envs(closing, cls=CounterEnv, num_envs=N, num_workers=2, **kwargs):
    fns = [functools.partial(cls, i, **kwargs) for i in range(num_envs)]
    return closing(ringenv.AsyncVectorEnv(fns, num_workers=num_workers))


def _ones(n=N):
    return np.ones(n, dtype=np.int64)


# -- exceptions raised by an env ------------------------------------------------------------------


def test_env_exception_is_reraised_with_type_and_message(closing):
    envs = _counter_envs(closing, RaisingEnv, fail_env=3, fail_at=3)
    envs.reset(seed=0)
    envs.step(_ones())
    envs.step(_ones())
    with pytest.raises(StepError, match=r"^boom in env 3 at step 3$") as info:
        envs.step(_ones())
    exc = info.value
    assert type(exc) is StepError
    assert exc.env_id == 3


def test_env_exception_cause_holds_the_remote_traceback(closing):
    envs = _counter_envs(closing, RaisingEnv, fail_env=2, fail_at=1)
    envs.reset(seed=0)
    with pytest.raises(StepError) as info:
        envs.step(_ones())
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    text = str(cause)
    # The worker's formatted traceback: the frames down to the raising function, then the error.
    assert "Traceback (most recent call last)" in text, text
    assert "helper_envs.py" in text, text
    assert "_explode" in text, text
    assert "boom in env 2 at step 1" in text


@pytest.mark.parametrize("layout", [{"num_workers": 4, "inline": False}, {"num_workers": 3, "inline": True}],
                         ids=["workers", "inline-share"])
def test_when_every_env_raises_the_first_envs_error_is_raised_with_the_others_as_notes(closing, layout):
    """One env per worker process (and one in the main process's share): the four errors of one
    step come back together. The lowest env id's is raised, as ``SyncVectorEnv`` raises it;
    each other env's is a note naming it, with its own traceback: none is lost."""
    fns = [functools.partial(RaisingEnv, i, fail_env=(0, 1, 2, 3), fail_at=1) for i in range(N)]
    envs = closing(ringenv.AsyncVectorEnv(fns, **layout))
    envs.reset(seed=0)
    with pytest.raises(StepError) as info:
        envs.step(_ones())
    assert str(info.value) == "boom in env 0 at step 1"  # (pytest's match= reads the notes too)
    notes = notes_by_env(info.value)
    assert sorted(notes) == [1, 2, 3]
    for env_id, note in notes.items():
        assert "Traceback (most recent call last)" in note and "_explode" in note, note
        assert note.rstrip().endswith(f"StepError: boom in env {env_id} at step 1"), note
    envs.reset(seed=0)  # usable again, as after one env's error
    assert not envs.closed


def test_an_env_error_that_takes_no_note_is_raised_as_it_is(closing):
    """An exception whose own ``__notes__`` is not a list refuses ``add_note``: the first env's
    error is raised all the same, not a ``TypeError`` about its notes."""
    fns = [functools.partial(OddNotesEnv, i, fail_env=(0, 1, 2, 3), fail_at=1) for i in range(N)]
    envs = closing(ringenv.AsyncVectorEnv(fns, num_workers=4, inline=False))
    envs.reset(seed=0)
    with pytest.raises(StepError) as info:
        envs.step(_ones())
    assert str(info.value) == "boom in env 0 at step 1"
    assert info.value.__notes__ == "not a list"


def test_a_recv_batch_in_which_two_envs_raised_raises_the_first_with_the_other_as_a_note(closing):
    """Asynchronous batches of two workers' envs, first in first out: envs 0 and 1 (then 2 and 3)
    come back together, and the batch in which both raised gives env 0's (env 2's) error with the
    other's as a note."""
    fns = [functools.partial(RaisingEnv, i, fail_env=(0, 1, 2, 3), fail_at=1) for i in range(N)]
    envs = closing(ringenv.AsyncVectorEnv(fns, num_workers=4, inline=False, batch_size=2, deterministic=True))
    envs.async_reset(seed=0)
    for _ in range(2):  # the two batches of reset results; the steps sent raise
        *_, infos = envs.recv()
        envs.send(np.ones(2, dtype=np.int64), infos["env_id"])
    with pytest.raises(StepError) as info:
        envs.recv()
    first = info.value.env_id
    assert first in (0, 2) and str(info.value) == f"boom in env {first} at step 1"
    notes = notes_by_env(info.value)
    assert sorted(notes) == [first + 1]
    assert notes[first + 1].rstrip().endswith(f"StepError: boom in env {first + 1} at step 1")


def test_env_stays_usable_after_an_env_exception(closing):
    envs = _counter_envs(closing, RaisingEnv, fail_env=1, fail_at=2)
    envs.reset(seed=0)
    envs.step(_ones())
    with pytest.raises(StepError):
        envs.step(_ones())
    assert not envs.closed
    obs, _ = envs.reset(seed=0)
    assert_identical(obs, np.array([[i, 0] for i in range(N)], dtype=np.float32))
    obs, rewards, terminated, truncated, _ = envs.step(_ones())
    assert_identical(obs, np.array([[i, 1] for i in range(N)], dtype=np.float32))
    assert_identical(rewards, np.ones(N))
    assert not terminated.any() and not truncated.any()


def test_unpicklable_env_exception_becomes_remote_env_error(closing):
    envs = _counter_envs(closing, RaisingEnv, fail_env=0, fail_at=2, unpicklable=True)
    envs.reset()
    envs.step(_ones())
    with pytest.raises(RemoteEnvError) as info:
        envs.step(_ones())
    exc = info.value
    assert exc.env_id == 0
    assert exc.remote_type == "UnpicklableError"
    assert exc.remote_message == "unpicklable x y"
    assert isinstance(exc.__cause__, RemoteTraceback)
    assert "unpicklable x y" in str(exc.__cause__)
    envs.reset()
    obs, *_ = envs.step(_ones())  # usable again
    assert_identical(obs, np.array([[i, 1] for i in range(N)], dtype=np.float32))


@pytest.mark.parametrize("layout", [{"num_workers": 2}, {"num_workers": 1, "inline": True}],
                         ids=["workers", "inline-share"])
def test_a_reward_that_is_not_a_number_names_the_env_and_the_reward(closing, layout):
    """A str reward: a ``TypeError`` whose message names the env, the reward and its type, in a
    worker process and in the main process's share alike."""
    envs = closing(ringenv.AsyncVectorEnv([StringRewardEnv] * 4, **layout))
    envs.reset(seed=0)
    with pytest.raises(TypeError, match=r"env 0: step returned a reward of type str; a reward must be a real number"):
        envs.step(np.zeros(4, np.int64))


# -- start-up failures ----------------------------------------------------------------------------


def test_factory_exception_raises_worker_startup_error():
    before = child_pids()
    fns = [functools.partial(failing_factory, i, 3) for i in range(N)]
    with pytest.raises(WorkerStartupError) as info:
        ringenv.AsyncVectorEnv(fns, num_workers=2, startup_timeout=30.0)
    exc = info.value
    assert isinstance(exc.__cause__, ValueError)
    assert "factory of env 3 refuses to build" in str(exc.__cause__)
    assert exc.worker == 1 and exc.env_ids == (2, 3)
    assert exc.remote_type == "ValueError"
    assert not wait_new_children_gone(before, timeout=2.0), "workers left after a failed start"


def test_a_first_factory_that_raises_raises_its_own_exception_as_gymnasium():
    """``env_fns[0]`` is called once in this process to read the spaces, as Gymnasium's
    ``AsyncVectorEnv`` calls it: when it raises, its own exception comes out as it is there (a
    bad keyword argument stays Gymnasium's ``TypeError``), before any worker starts."""
    before = child_pids()
    with pytest.raises(ValueError, match="factory of env 0 refuses to build") as info:
        ringenv.AsyncVectorEnv([functools.partial(failing_factory, 0, 0)] * N)
    assert not isinstance(info.value, WorkerStartupError)
    assert child_pids() == before  # nothing was started


def test_startup_error_carries_the_remote_traceback():
    fns = [functools.partial(failing_factory, i, 1) for i in range(2)]
    with pytest.raises(WorkerStartupError) as info:
        ringenv.AsyncVectorEnv(fns, num_workers=2, startup_timeout=30.0)
    text = info.value.remote_traceback
    assert "Traceback (most recent call last)" in text, text
    assert "helper_envs.py" in text and "failing_factory" in text, text
    assert "factory of env 1 refuses to build" in text


def test_differing_observation_spaces_raise_worker_startup_error():
    before = child_pids()
    fns = [functools.partial(SizedEnv, i, 2 if i != 2 else 3) for i in range(N)]
    with pytest.raises(WorkerStartupError, match=r"env 2\b") as info:
        ringenv.AsyncVectorEnv(fns, num_workers=2, startup_timeout=30.0)
    exc = info.value
    assert isinstance(exc.__cause__, ValueError)
    assert "observation space" in str(exc)
    assert exc.worker == 1 and exc.env_ids == (2, 3)
    assert not wait_new_children_gone(before, timeout=2.0), "workers left after a failed start"


# -- bad actions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [np.ones(N - 1, dtype=np.int64), np.ones((N, 1), dtype=np.int64),
                                 np.int64(1)], ids=["short", "2d", "scalar"])
def test_bad_action_shape_is_refused_and_env_stays_usable(closing, bad):
    envs = _counter_envs(closing)
    envs.reset(seed=0)
    # A scalar is not a batch: TypeError, as Gymnasium raises (its iterate cannot split it).
    with pytest.raises(TypeError if np.ndim(bad) == 0 else ValueError, match="shape"):
        envs.step(bad)
    obs, rewards, *_ = envs.step(np.array([0, 1, 0, 1]))
    # The rejected action changed nothing: every env made exactly one step, with these actions.
    assert_identical(obs, np.array([[i, 1] for i in range(N)], dtype=np.float32))
    assert_identical(rewards, np.array([0.0, 1.0, 0.0, 1.0]))


@pytest.mark.parametrize("bad", [np.ones(N, dtype=np.float64), np.full(N, 0.5, dtype=np.float32),
                                 ["0", "1", "0", "1"]], ids=["float64", "float32", "str"])
def test_non_integer_discrete_actions_raise_value_error(closing, bad):
    envs = _counter_envs(closing)
    envs.reset(seed=0)
    with pytest.raises(ValueError):
        envs.step(bad)
    obs, rewards, *_ = envs.step(np.array([1, 1, 0, 0]))
    assert_identical(obs, np.array([[i, 1] for i in range(N)], dtype=np.float32))
    assert_identical(rewards, np.array([1.0, 1.0, 0.0, 0.0]))


def test_bad_box_action_shape_raises_value_error(closing):
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(gym.make, "Pendulum-v1")] * 2, num_workers=2))
    envs.reset(seed=0)
    with pytest.raises(ValueError, match="shape"):
        envs.step(np.zeros(2, dtype=np.float32))  # (2,) instead of (2, 1)
    obs, rewards, *_ = envs.step(np.zeros((2, 1), dtype=np.float32))
    assert obs.shape == (2, 3) and rewards.shape == (2,)


# -- protocol errors ------------------------------------------------------------------------------


def test_step_wait_without_step_async(closing):
    envs = _counter_envs(closing)
    envs.reset()
    with pytest.raises(NoAsyncCallError):
        envs.step_wait()
    with pytest.raises(NoAsyncCallError):
        envs.reset_wait()
    envs.step(_ones())  # still usable


def test_step_async_twice(closing):
    envs = _counter_envs(closing)
    envs.reset()
    envs.step_async(_ones())
    with pytest.raises(AlreadyPendingCallError):
        envs.step_async(_ones())
    with pytest.raises(AlreadyPendingCallError):
        envs.reset_async()
    # The first step is still the pending one, and it ran once.
    obs, *_ = envs.step_wait()
    assert_identical(obs, np.array([[i, 1] for i in range(N)], dtype=np.float32))
    with pytest.raises(NoAsyncCallError):
        envs.step_wait()


def test_calls_after_close_raise_closed_environment_error():
    envs = ringenv.AsyncVectorEnv([functools.partial(CounterEnv, i) for i in range(2)], num_workers=2)
    pids = list(envs._pool.worker_pids())
    try:
        envs.reset()
    finally:
        envs.close()
    assert envs.closed
    with pytest.raises(ClosedEnvironmentError):
        envs.reset()
    with pytest.raises(ClosedEnvironmentError):
        envs.step(_ones(2))
    with pytest.raises(ClosedEnvironmentError):
        envs.step_wait()
    envs.close()  # closing twice is harmless
    assert not wait_pids_gone(pids, timeout=2.0)


def test_step_wait_timeout_keeps_the_step_pending(closing):
    envs = _counter_envs(closing, SlowEnv, num_envs=2, delay=0.5)
    envs.reset()
    envs.step_async(_ones(2))
    with pytest.raises(multiprocessing.TimeoutError):
        envs.step_wait(timeout=0.05)
    with pytest.raises(AlreadyPendingCallError):
        envs.step_async(_ones(2))
    obs, rewards, terminated, truncated, infos = envs.step_wait()
    assert_identical(obs, np.array([[0, 1], [1, 1]], dtype=np.float32))
    assert_identical(rewards, np.ones(2))
    assert not terminated.any() and not truncated.any() and infos == {}


# -- failures of the operating system --------------------------------------------------------------

_OPEN_FILE_LIMIT = r"""
import errno, resource
import gymnasium as gym, ringenv
resource.setrlimit(resource.RLIMIT_NOFILE, (40, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
try:
    ringenv.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 64, num_workers=32).close()
    print("started")
except ringenv.errors.RingenvError as e:
    print(type(e).__name__, errno.errorcode.get(e.errno), "ulimit -n" in str(e))
"""


def test_an_os_failure_carries_its_errno_and_names_the_limit():
    # 32 workers need more than 40 descriptors: starting one fails with EMFILE, which the error
    # carries as `errno` (as an OSError would) and explains with the limit that caused it.
    done = subprocess.run([sys.executable, "-c", _OPEN_FILE_LIMIT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["RingenvError", "EMFILE", "True"], done.stdout


def test_a_runtime_error_that_is_not_the_systems_has_no_errno():
    assert ringenv.errors.RingenvError("a protocol error").errno is None
    assert ringenv.errors._from_native("runtime", "no OS call failed", {}).errno is None


class LockInfoEnv(CounterEnv):
    """A :class:`CounterEnv` whose info holds a lock (which cannot be pickled) while it is env
    ``holder``."""

    def __init__(self, env_index: int, holder: int):
        super().__init__(env_index)
        self.holder = holder

    def step(self, action):
        import threading

        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, ({"handle": threading.Lock()} if self.env_index == self.holder else {})


def test_an_info_that_cannot_leave_its_worker_names_the_env_and_the_key(closing):
    """Before: ``TypeError: cannot pickle '_thread.lock' object``, which read as the env's own
    error and named neither the env nor the key."""
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(LockInfoEnv, i, 1) for i in range(N)],
                                          num_workers=2, inline=False))
    envs.reset(seed=0)
    with pytest.raises(TypeError, match=r"^env 1: the value of its info key 'handle' \(lock\) cannot be pickled to "
                                        r"leave its worker process \(TypeError: cannot pickle '_thread.lock' object\)"):
        envs.step(_ones())
    envs.set_attr("holder", [-1] * N)
    obs = envs.step(_ones())[0]  # usable again; the failed step had stepped every env
    assert_identical(obs, np.array([[i, 2] for i in range(N)], dtype=np.float32))


class LockObservationEnv(gym.Env):
    """An env of a custom observation space (its observations travel pickled) whose step returns
    a lock (which cannot be pickled) as the observation while it is env ``holder``."""

    def __init__(self, env_index: int, holder: int):
        self.observation_space, self.action_space = ColourSpace(), gym.spaces.Discrete(2)
        self.env_index, self.holder = env_index, holder

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "red", {}

    def step(self, action):
        import threading

        return threading.Lock() if self.env_index == self.holder else "blue", 0.0, False, False, {}


def test_an_observation_that_cannot_leave_its_worker_names_the_env(closing):
    """Env 3 is the second env of the second worker: named by its id, not its place in the block."""
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(LockObservationEnv, i, 3) for i in range(N)],
                                          num_workers=2, inline=False))
    envs.reset(seed=0)
    with pytest.raises(TypeError, match=r"^env 3: its observation \(lock\) cannot be pickled to leave its worker "
                                        r"process \(TypeError: cannot pickle '_thread.lock' object\)"):
        envs.step(np.zeros(N, dtype=np.int64))
