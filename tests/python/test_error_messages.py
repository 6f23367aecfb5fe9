"""What an error's message says: the env it is about (its index), and for an observation that
does not fit its space, the leaf, the space and both shapes; a start-up error's remote traceback
printed once; a timeout naming the envs that are late and whether this process steps them."""

from __future__ import annotations

import functools
import multiprocessing
import os
import re
import time
import traceback
from collections import OrderedDict

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import ringenv
from helper_envs import BlockingEnv, ColourSpace, StepError, failing_factory
from ringenv.errors import WorkerStartupError

N = 4
HOSTS = {"worker process": {"num_workers": 2, "inline": False}, "this process": {"num_workers": 0}}

BOX = spaces.Box(0, 1, (25,), np.float32)
TREE = spaces.Dict({"a": spaces.Discrete(3), "img": BOX,
                    "t": spaces.Tuple((spaces.Box(0, 1, (2,), np.float32), spaces.Discrete(2)))})


class MisfitEnv(gym.Env):
    """Observations of ``space`` (:data:`BOX` or :data:`TREE`); env 1's reset returns ``bad``
    (a whole observation for a Box, the values to replace for the Dict), in a ``dict_type``."""

    def __init__(self, env_id, space, bad, dict_type=dict):
        self.env_id, self.bad, self.dict_type = env_id, bad, dict_type
        self.observation_space, self.action_space = space, spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        if isinstance(self.observation_space, spaces.Box):
            return (self.bad if self.env_id == 1 else np.zeros(25, np.float32)), {}
        obs = {"a": 0, "img": np.zeros(25, np.float32), "t": (np.zeros(2, np.float32), 1)}
        if self.env_id == 1:
            obs.update(self.bad)
            obs = {k: v for k, v in obs.items() if v is not None}
        return self.dict_type(obs), {}

    def step(self, action):
        raise AssertionError("not stepped")


def _reset_error(closing, host, space, bad, **kwargs):
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(MisfitEnv, i, space, bad, **kwargs) for i in range(N)],
                                          **HOSTS[host]))
    with pytest.raises(Exception) as info:
        envs.reset(seed=0)
    return info.value


@pytest.mark.parametrize("host", HOSTS)
def test_an_observation_of_the_wrong_shape_names_the_env_the_space_and_both_shapes(closing, host):
    error = _reset_error(closing, host, BOX, np.zeros(9, np.float32))
    assert type(error) is ValueError
    assert str(error) == ("env 1 returned an observation of shape (9,), but its observation space "
                          "Box(0.0, 1.0, (25,), float32) has shape (25,)")
    assert error.env_id == 1


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("dict_type", [dict, OrderedDict], ids=["dict", "OrderedDict"])
@pytest.mark.parametrize("bad,path,space,shape", [
    ({"img": np.zeros(9, np.float32)}, "['img']", "Box(0.0, 1.0, (25,), float32)", "(9,)"),
    ({"t": (np.zeros(2, np.float32), np.zeros(3))}, "['t'][1]", "Discrete(2)", "(3,)"),
    ({"t": [np.zeros((2, 2), np.float32), 1]}, "['t'][0]", "Box(0.0, 1.0, (2,), float32)", "(2, 2)"),
], ids=["dict-leaf", "tuple-leaf", "list-for-tuple"])
def test_a_leaf_of_the_wrong_shape_names_the_env_its_path_its_space_and_both_shapes(closing, host, dict_type, bad,
                                                                                      path, space, shape):
    """The same text whether the leaf is copied by the native host (a plain dict) or written by
    the whole observation's Python writer (an OrderedDict, a list for a Tuple)."""
    error = _reset_error(closing, host, TREE, bad, dict_type=dict_type)
    assert type(error) is ValueError
    expected = space.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")
    assert re.fullmatch(rf"env 1 returned an observation whose value at {re.escape(path)} has shape "
                        rf"{re.escape(shape)}, but the space there, {expected}, has shape \(\d*,?\)", str(error)), error
    assert error.env_id == 1


@pytest.mark.parametrize("host", HOSTS)
def test_a_missing_key_names_the_env_and_the_key(closing, host):
    error = _reset_error(closing, host, TREE, {"img": None})
    assert type(error) is KeyError
    assert "env 1 returned a Dict observation without the key 'img' of its space Dict(" in str(error)


class SplitDictEnv(gym.Env):
    """A Dict of a Box (laid out in shared memory) and a :class:`ColourSpace` (pickled), as
    MiniGrid's; env 1's reset leaves the colour out."""

    def __init__(self, env_id):
        self.env_id = env_id
        self.observation_space = spaces.Dict({"img": BOX, "colour": ColourSpace()})
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        obs = {"img": np.zeros(25, np.float32), "colour": "red"}
        if self.env_id == 1:
            del obs["colour"]
        return obs, {}


@pytest.mark.parametrize("host", HOSTS)
def test_a_missing_key_of_a_split_dict_names_the_env_and_the_key(closing, host):
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(SplitDictEnv, i) for i in range(N)], **HOSTS[host]))
    with pytest.raises(KeyError) as info:
        envs.reset(seed=0)
    assert "env 1 returned a Dict observation without the key 'colour'" in str(info.value), info.value


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("space,bad,where", [
    (BOX, np.array(["x"] * 25), "an observation (dtype <U1) that cannot be written as float32, the dtype of its "
                                "observation space Box(0.0, 1.0, (25,), float32)"),
    (TREE, {"img": np.array(["x"] * 25)}, "an observation whose value at ['img'] (dtype <U1) cannot be written as "
                                          "float32, the dtype of the space there, Box(0.0, 1.0, (25,), float32)"),
], ids=["box", "dict-leaf"])
def test_a_value_numpy_cannot_convert_names_the_env_the_leaf_and_the_dtypes(closing, host, space, bad, where):
    error = _reset_error(closing, host, space, bad)
    assert type(error) is ValueError
    assert str(error).startswith(f"env 1 returned {where} (could not convert string to float"), error


# -- start-up -------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", [{"num_workers": 2, "inline": False}, {"num_workers": 1, "inline": True}],
                         ids=["worker-process", "inline-share"])
def test_a_startup_error_names_the_env_and_prints_its_traceback_once(layout):
    with pytest.raises(WorkerStartupError) as info:
        ringenv.AsyncVectorEnv([functools.partial(failing_factory, i, 3) for i in range(N)], startup_timeout=30.0,
                               **layout)
    error = info.value
    assert re.fullmatch(r"env 3 \(worker \d\) failed to start: ValueError: factory of env 3 refuses to build",
                        str(error)), error
    assert error.env_id == 3 and 3 in error.env_ids
    printed = "".join(traceback.format_exception(error))
    assert printed.count('raise ValueError(f"factory of env {env_index} refuses to build")') == 1, printed


# -- an env's own exception -----------------------------------------------------------------------


class QuietEnv(gym.Env):
    """Raises :class:`StepError` with a message that names no env, in env 2's first step."""

    def __init__(self, env_id):
        self.env_id = env_id
        self.observation_space, self.action_space = spaces.Box(0, 1, (1,), np.float32), spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        if self.env_id == 2:
            raise StepError("the motor stalled")
        return np.zeros(1, np.float32), 0.0, False, False, {}


@pytest.mark.parametrize("layout", [{"num_workers": 2, "inline": False}, {"num_workers": 1, "inline": True}],
                         ids=["worker-process", "inline-share"])
def test_an_envs_own_exception_keeps_its_message_and_names_the_env_in_a_note(closing, layout):
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(QuietEnv, i) for i in range(N)], **layout))
    envs.reset(seed=0)
    with pytest.raises(StepError) as info:
        envs.step(np.zeros(N, np.int64))
    error = info.value
    assert str(error) == "the motor stalled" and error.env_id == 2
    assert error.__notes__ == ["(raised in env 2)"]
    assert "StepError: the motor stalled\n(raised in env 2)" in "".join(traceback.format_exception(error))


# -- timeouts -------------------------------------------------------------------------------------


def test_a_timeout_names_the_late_envs_of_the_worker_processes(closing, tmp_path):
    """Envs 0 and 1 (worker 0) and 2 (worker 1) block until released; env 3, in this process,
    returns at once."""
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(BlockingEnv, os.getpid(), str(tmp_path))] * N,
                                          num_workers=2, inline=True))
    envs.reset(seed=0)
    envs.step_async(np.zeros(N, np.int64))
    with pytest.raises(multiprocessing.TimeoutError) as info:
        envs.step_wait(timeout=0.05)
    assert str(info.value) == "timed out after 0.05 s waiting for envs [0, 1, 2] (workers 0, 1)"
    assert info.value.env_ids == (0, 1, 2)
    (tmp_path / "release").touch()
    envs.step_wait()


def test_a_recv_timeout_names_the_late_envs(closing, tmp_path):
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(BlockingEnv, os.getpid(), str(tmp_path))] * N,
                                          num_workers=2, inline=False, batch_size=2))
    envs.async_reset(seed=0)
    envs.recv()
    envs.recv()
    envs.send(np.zeros(2, np.int64), [0, 1])
    with pytest.raises(multiprocessing.TimeoutError) as info:
        envs.recv(timeout=0.05)
    assert str(info.value) == "timed out after 0.05 s waiting for envs [0, 1] (worker 0)"
    (tmp_path / "release").touch()
    envs.recv()


class MainProcessNapEnv(gym.Env):
    """Sleeps ``NAP_S`` in each step it takes in the process ``main_pid``."""

    NAP_S = 0.05

    def __init__(self, main_pid):
        self.main_pid = main_pid
        self.observation_space, self.action_space = spaces.Box(0, 1, (1,), np.float32), spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        if os.getpid() == self.main_pid:
            time.sleep(self.NAP_S)
        return np.zeros(1, np.float32), 0.0, False, False, {}


def test_a_timeout_the_inline_share_outlasted_says_so_and_points_to_inline_false(closing):
    """Envs 2 and 3 step in this process for at least ``NAP_S`` each, more than the timeout."""
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(MainProcessNapEnv, os.getpid())] * N,
                                          num_workers=1, inline=True))
    envs.reset(seed=0)
    envs.step_async(np.zeros(N, np.int64))
    with pytest.raises(multiprocessing.TimeoutError) as info:
        envs.step_wait(timeout=MainProcessNapEnv.NAP_S / 10)
    text = str(info.value)
    assert text.startswith("timed out after 0.005 s waiting for envs [2, 3], which this process steps itself"), text
    assert "cannot interrupt them while they step" in text and "inline=False" in text, text
    assert info.value.env_ids == (2, 3)
    envs.step_wait()
