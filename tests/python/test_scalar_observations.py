"""Observations of shape () returned as Python scalars (a Discrete's ``int``: FrozenLake, Taxi,
CliffWalking): the worker assigns an ``int``, ``float`` or ``bool`` to a row of dtype int64,
float64 or bool as it is, without checking its shape through NumPy first; the batches stay
Gymnasium's ``SyncVectorEnv``'s, and what that assignment refuses takes the checked path."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from helper_envs import CounterEnv

import ringenv
from ringenv import _worker

NUM_ENVS = 4


class ScalarEnv(CounterEnv):
    """Returns ``values[t % len(values)]`` as the observation of its t-th step (``values[0]`` at
    reset), each env offset by its ``shift`` steps (reset and step: :class:`CounterEnv`'s)."""

    def __init__(self, space, values, shift=0):
        self.observation_space, self.action_space = space, spaces.Discrete(2)
        self.values, self.shift, self.t = values, shift, 0

    def _obs(self):
        return self.values[(self.t + self.shift) % len(self.values)]


CASES = {
    "Discrete int": (spaces.Discrete(5), [0, 3, 4, 1]),
    "float64 float": (spaces.Box(-np.inf, np.inf, (), np.float64), [0.5, float("nan"), float("inf"), -1e300]),
    "bool bool": (spaces.Box(0, 1, (), np.bool_), [True, False, False, True]),
    # Not the row's own type: the checked path, as before.
    "float32 mixed": (spaces.Box(-1, 1, (), np.float32), [0.1, 1e300, 3, True]),
}


def _batches(env, steps):
    obs, _ = env.reset(seed=0)
    out = [(obs.dtype.str, obs.tobytes())]
    for _ in range(steps):
        obs, *_ = env.step(np.zeros(NUM_ENVS, np.int64))
        out.append((obs.dtype.str, obs.tobytes()))
    return out


@pytest.mark.parametrize("num_workers", [None, 0], ids=["default", "in-process"])
@pytest.mark.parametrize("case", list(CASES))
def test_python_scalar_observations_batch_as_sync_vector_envs(closing, case, num_workers):
    space, values = CASES[case]
    fns = [functools.partial(ScalarEnv, space, values, shift) for shift in range(NUM_ENVS)]
    ours = closing(ringenv.AsyncVectorEnv(fns, num_workers=num_workers))
    ref = closing(gym.vector.SyncVectorEnv(fns))
    assert _batches(ours, 2 * len(values)) == _batches(ref, 2 * len(values))


def test_an_int_beyond_int64_takes_the_checked_path(closing):
    """2**63 does not fit the int64 row, so plain assignment refuses it and the checked path
    writes it as before (``np.asarray`` makes it a uint64, which the row's assignment wraps)."""
    space = spaces.Box(-10, 10, (), np.int64)
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(ScalarEnv, space, [2**63, -5])] * NUM_ENVS))
    obs, _ = envs.reset(seed=0)
    expected = np.zeros((), np.int64)
    expected[...] = np.asarray(2**63)
    assert obs.tolist() == [int(expected)] * NUM_ENVS
    obs, *_ = envs.step(np.zeros(NUM_ENVS, np.int64))
    assert obs.tolist() == [-5] * NUM_ENVS


def test_a_discretes_int_skips_the_shape_check_and_a_list_does_not(closing, monkeypatch):
    """Counted in this process (``num_workers=0``): a Python int for a Discrete is assigned without
    ``_checked_obs``; a one-element list, which has no type the row takes as it is, is checked."""
    calls = []
    checked = _worker._checked_obs
    monkeypatch.setattr(_worker, "_checked_obs", lambda *a: calls.append(a) or checked(*a))
    ints = closing(ringenv.AsyncVectorEnv([functools.partial(ScalarEnv, spaces.Discrete(5), [1, 2])] * 2,
                                          num_workers=0))
    ints.reset(seed=0)
    ints.step(np.zeros(2, np.int64))
    assert calls == []
    lists = closing(ringenv.AsyncVectorEnv([functools.partial(ScalarEnv, spaces.Discrete(5), [np.int64(1)])] * 2,
                                           num_workers=0))
    lists.reset(seed=0)
    assert len(calls) == 0  # a NumPy scalar has a shape: the shape check passes without the helper
    with pytest.raises(ValueError, match=r"env 0 returned an observation of shape \(1,\)"):
        closing(ringenv.AsyncVectorEnv([functools.partial(ScalarEnv, spaces.Discrete(5), [[1]])] * 2,
                                       num_workers=0)).reset(seed=0)
    assert calls and all(c[0] == [1] for c in calls)  # only the lists were checked


#: A Dict of a ``np.longdouble`` scalar, whose numbers are wider than the segment's arrays hold
#: (laid out as their bytes), beside a Discrete.
LONGDOUBLE_DICT = spaces.Dict({"x": spaces.Box(-4.0, 4.0, (), np.longdouble), "n": spaces.Discrete(3)})


@pytest.mark.parametrize("num_workers", [None, 1], ids=["default", "one-worker"])
def test_a_dict_of_a_longdouble_scalar_batches_as_sync_vector_envs(closing, num_workers):
    """Gymnasium before 1.4 asks for such a leaf by its own typecode (1.4 as bytes); either way
    the vector env is made and its values are ``SyncVectorEnv``'s (compared as values: NumPy
    leaves the padding bytes of a longdouble undefined)."""
    values = [{"x": np.longdouble(k / 4), "n": np.int64(k % 3)} for k in range(5)]
    fns = [functools.partial(ScalarEnv, LONGDOUBLE_DICT, values, shift) for shift in range(NUM_ENVS)]
    ours = closing(ringenv.AsyncVectorEnv(fns, num_workers=num_workers))
    ref = closing(gym.vector.SyncVectorEnv(fns))
    for got, want in [(ours.reset(seed=0)[0], ref.reset(seed=0)[0])] + [
            (ours.step(np.zeros(NUM_ENVS, np.int64))[0], ref.step(np.zeros(NUM_ENVS, np.int64))[0]) for _ in range(3)]:
        assert got["x"].dtype == want["x"].dtype == np.longdouble and got["n"].dtype == want["n"].dtype
        assert got["x"].tolist() == want["x"].tolist() and got["n"].tolist() == want["n"].tolist()
