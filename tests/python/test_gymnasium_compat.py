"""What Gymnasium's own ``tests/vector`` suite (scripts/gymnasium_suite.sh) checks of an
``AsyncVectorEnv``, checked here on ringenv directly: actions reach the envs unchecked unless
``check_actions=True``, a scalar is not a batch of actions, ``close`` warns about a pending call,
sub-envs with different spaces raise Gymnasium's text, and a float Box of shape ``()`` hands its
envs a Python ``float`` subclass."""

from __future__ import annotations

import functools
import re
import time
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.error import AlreadyPendingCallError

import ringenv
from ringenv.errors import WorkerStartupError


class EchoEnv(gym.Env):
    """Observes 0; each step returns the action it got in ``info["action"]`` and its type's name
    in ``info["type"]``; ends when the action is 3 or more (Gymnasium's ``test_final_obs_info``
    ends an episode with action 4 of ``Discrete(4)``)."""

    def __init__(self, action_space=None, observation_space=None):
        self.action_space = action_space if action_space is not None else spaces.Discrete(4)
        self.observation_space = observation_space if observation_space is not None else spaces.Discrete(4)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return 0, 0.0, bool(np.all(np.asarray(action) >= 3)), False, {"action": action, "type": type(action).__name__}


class SleepEnv(EchoEnv):
    """Gymnasium's ``SlowEnv``: ``time.sleep(action)`` with a float32 Box action of shape ()."""

    def __init__(self):
        super().__init__(spaces.Box(0.0, 1.0, (), np.float32), spaces.Box(0, 255, (2,), np.uint8))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.uint8), {}

    def step(self, action):
        time.sleep(action)  # refuses a numpy.float32: not a float, no __index__
        return np.zeros(2, np.uint8), float(action), False, False, {"action": action, "type": type(action).__name__}


@pytest.mark.parametrize("shared_memory", [True, False])
def test_an_action_outside_the_space_reaches_the_env_by_default_as_in_gymnasium(closing, shared_memory):
    ours = closing(ringenv.AsyncVectorEnv([EchoEnv] * 2, num_workers=2, shared_memory=shared_memory))
    ref = closing(gym.vector.SyncVectorEnv([EchoEnv] * 2))
    ours.reset(seed=0)
    ref.reset(seed=0)
    out, ref_out = ours.step(np.array([4, 1])), ref.step(np.array([4, 1]))
    assert out[4]["action"].tolist() == ref_out[4]["action"].tolist() == [4, 1]
    assert out[2].tolist() == ref_out[2].tolist() == [True, False]


def test_check_actions_true_refuses_an_action_outside_the_space_naming_the_env(closing):
    envs = closing(ringenv.AsyncVectorEnv([EchoEnv] * 2, num_workers=2, check_actions=True))
    envs.reset(seed=0)
    with pytest.raises(ValueError, match=r"action 4 of env 1 is outside Discrete\(4\)"):
        envs.step(np.array([0, 4]))
    _, _, _, _, infos = envs.step(np.array([1, 2]))  # nothing was sent: still usable
    assert infos["action"].tolist() == [1, 2]


def test_an_integer_that_does_not_fit_the_slot_dtype_is_refused_even_unchecked(closing):
    space = spaces.Discrete(4, dtype=np.int8)
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(EchoEnv, space)] * 2, num_workers=1))
    envs.reset(seed=0)
    with pytest.raises(ValueError, match=r"action 300 of env 1 does not fit the action space's dtype int8"):
        envs.step(np.array([0, 300]))  # would reach the env as 44
    _, _, _, _, infos = envs.step(np.array([-5, 100]))  # out of the space but fits int8: passed on
    assert infos["action"].tolist() == [-5, 100]


@pytest.mark.parametrize("shared_memory", [True, False])
def test_a_scalar_is_not_a_batch_of_actions_type_error(closing, shared_memory):
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(gym.make, "CartPole-v1")] * 4, num_workers=2,
                                          shared_memory=shared_memory))
    envs.reset(seed=0)
    with pytest.raises(TypeError, match="must be a batch of 4 actions"):
        envs.step(0)
    with pytest.raises(ValueError):
        envs.step(np.zeros(3, np.int64))
    assert envs.step(np.zeros(4, np.int64))[0].shape == (4, 4)  # nothing was sent


@pytest.mark.parametrize("pending", ["step", "reset"])
def test_close_with_terminate_warns_about_the_pending_call_as_gymnasium(pending):
    envs = ringenv.AsyncVectorEnv([functools.partial(gym.make, "CartPole-v1")] * 2, num_workers=2)
    try:
        envs.reset(seed=0)
        if pending == "step":
            envs.step_async(np.zeros(2, np.int64))
            with pytest.raises(AlreadyPendingCallError):
                envs.reset_async()
        else:
            envs.reset_async()
            with pytest.raises(AlreadyPendingCallError):
                envs.step_async(np.zeros(2, np.int64))
        with pytest.warns(UserWarning, match=re.escape(
                f"Calling `close` while waiting for a pending call to `{pending}` to complete.")):
            envs.close(terminate=True)
        assert envs.closed
    finally:
        envs.close(terminate=True)


def test_close_with_nothing_pending_does_not_warn():
    envs = ringenv.AsyncVectorEnv([functools.partial(gym.make, "CartPole-v1")] * 2, num_workers=2)
    envs.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        envs.close(terminate=True)


def test_sub_envs_with_different_observation_spaces_raise_gymnasium_text_naming_the_env():
    fns = [functools.partial(EchoEnv, spaces.Discrete(4), spaces.Box(0.0, float(i + 1), (2,))) for i in range(3)]
    with pytest.raises(RuntimeError, match="the sub-environments observation spaces are not equivalent. .*If this "
                                           "is intentional, use `observation_mode='different'` instead.") as info:
        ringenv.AsyncVectorEnv(fns, num_workers=1, observation_mode="same")
    assert isinstance(info.value, WorkerStartupError) and "env 1 has observation space" in str(info.value)
    ringenv.AsyncVectorEnv(fns, num_workers=1, observation_mode="different").close()  # as the text says


@pytest.mark.parametrize("shared_memory", [True, False])
def test_a_float32_scalar_box_action_reaches_the_env_as_a_python_float(closing, shared_memory):
    """Gymnasium hands the env the element of the caller's float64 array (``numpy.float64``, a
    ``float``); ringenv's slot is the space's float32, read out as ``numpy.float64``, so
    ``time.sleep(action)`` works as under Gymnasium."""
    envs = closing(ringenv.AsyncVectorEnv([SleepEnv] * 2, num_workers=2, shared_memory=shared_memory))
    envs.reset(seed=0)
    _, rewards, _, _, infos = envs.step(np.array([0.001, 0.002]))
    assert infos["type"].tolist() == ["float64", "float64"]
    assert rewards.tolist() == [float(np.float32(0.001)), float(np.float32(0.002))]  # the slot's values


class PoppingEnv(gym.Env):
    """Reset pops ``"level"`` from its options (a common pattern) and reports what it got in
    ``info["level"]`` (-1: no level left)."""

    observation_space = spaces.Discrete(2)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {"level": (options or {}).pop("level", -1)}

    def step(self, action):
        return 0, 0.0, False, False, {}


@pytest.mark.parametrize("layout", [{}, {"num_workers": 0}, {"num_workers": 1, "inline": False},
                                    {"num_workers": 2}, {"num_workers": 4}],
                         ids=["default", "in-process", "one-worker", "two-workers", "four-workers"])
def test_each_env_gets_its_own_copy_of_the_reset_options_whatever_the_layout(closing, layout):
    """Every env sees the options as given, as with Gymnasium's AsyncVectorEnv (each of its
    processes unpickles its own copy), even when an env pops a key from them: the result does not
    depend on how many envs a worker steps. The caller's dict is left as it was."""
    envs = closing(ringenv.AsyncVectorEnv([PoppingEnv] * 4, **layout))
    options = {"level": 3}
    _, infos = envs.reset(seed=0, options=options)
    assert infos["level"].tolist() == [3, 3, 3, 3]
    assert options == {"level": 3}


@pytest.mark.parametrize("mode", ["same", "different"])
def test_observation_mode_and_repr_are_kept_as_gymnasium_keeps_them(closing, mode):
    fns = [lambda: gym.make("CartPole-v1")] * 2
    theirs = gym.vector.AsyncVectorEnv(fns, observation_mode=mode)
    try:
        ours = closing(ringenv.AsyncVectorEnv(fns, observation_mode=mode))
        assert ours.observation_mode == theirs.observation_mode == mode
        assert repr(ours) == "ringenv." + repr(theirs) == "ringenv.AsyncVectorEnv(num_envs=2)"
    finally:
        theirs.close()


class OtherFormsEnv(gym.Env):
    """A seeded walk whose ``reset`` and ``step`` return lists, not tuples, and whose infos are a
    ``form`` of mapping other than ``dict`` (``"userdict"``: ``collections.UserDict``,
    ``"proxy"``: ``types.MappingProxyType``), with a value that changes every step. Gymnasium's
    vector envs unpack any sequence and read any mapping's items; it ends every 5 steps."""

    observation_space = spaces.Box(-10, 10, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, form: str):
        self.form, self.t = form, 0

    def _info(self, **values):
        import collections
        import types

        return collections.UserDict(values) if self.form == "userdict" else types.MappingProxyType(values)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return [self.np_random.normal(size=2).astype(np.float32), self._info(start=self.t)]

    def step(self, action):
        self.t += 1
        obs = self.np_random.normal(size=2).astype(np.float32)
        return [obs, float(action), self.t % 5 == 0, False, self._info(t=self.t, name=f"step {self.t}")]


@pytest.mark.parametrize("form", ["userdict", "proxy"])
@pytest.mark.parametrize("layout", [{"num_workers": 2, "inline": False}, {"num_workers": 1, "inline": True},
                                    {"num_workers": 0}], ids=["workers", "default", "in-process"])
@pytest.mark.parametrize("autoreset_mode", [gym.vector.AutoresetMode.NEXT_STEP, gym.vector.AutoresetMode.SAME_STEP],
                         ids=["next-step", "same-step"])
def test_lists_for_tuples_and_mappings_for_infos_give_sync_vector_envs_results(form, layout, autoreset_mode):
    """Before: ``TypeError: 'list' object is not an instance of 'tuple'`` (and ``'UserDict' ...
    of 'dict'``), naming no env, where both Gymnasium vector envs step such envs."""
    from vec_compare import make_ref, run_lockstep

    fns = [functools.partial(OtherFormsEnv, form) for _ in range(4)]
    ours = ringenv.AsyncVectorEnv(fns, autoreset_mode=autoreset_mode, **layout)
    ref = make_ref(fns, autoreset_mode=autoreset_mode)
    try:
        assert run_lockstep(ours, ref, seed=3, steps=12, autoreset_mode=autoreset_mode) == 8
    finally:
        ours.close()
        ref.close()


class WrongFormsEnv(gym.Env):
    """Returns what no vector env can unpack: ``reset`` only the observation (the old Gym API)
    when ``wrong == "reset"``, ``step`` an info that is not a mapping when ``wrong == "info"``."""

    observation_space = spaces.Discrete(2)
    action_space = spaces.Discrete(2)

    def __init__(self, wrong: str):
        self.wrong = wrong

    def reset(self, *, seed=None, options=None):
        return 0 if self.wrong == "reset" else (0, {})

    def step(self, action):
        return 0, 0.0, False, False, (["not", "a", "mapping"] if self.wrong == "info" else {})


@pytest.mark.parametrize("layout", [{"num_workers": 2, "inline": False}, {"num_workers": 1, "inline": True}],
                         ids=["workers", "default"])
def test_returns_that_cannot_be_unpacked_are_errors_naming_the_env_and_the_form(layout):
    """The last env's reset returns only its observation, or its step an info that is a list:
    the error names that env and what was expected, where PyO3's bare cast error named neither."""
    fns = [functools.partial(WrongFormsEnv, "none")] * 3 + [functools.partial(WrongFormsEnv, "reset")]
    envs = ringenv.AsyncVectorEnv(fns, **layout)
    try:
        with pytest.raises(TypeError, match=r"^env 3: env\.reset must return \(observation, info\) \(a tuple\), got int$"):
            envs.reset(seed=0)
    finally:
        envs.close()
    fns = [functools.partial(WrongFormsEnv, "none")] * 3 + [functools.partial(WrongFormsEnv, "info")]
    envs = ringenv.AsyncVectorEnv(fns, **layout)
    try:
        envs.reset(seed=0)
        with pytest.raises(TypeError, match=r"^env 3: env\.step returned an info of type list; an info must be a dict$"):
            envs.step(np.zeros(4, np.int64))
        envs.reset(seed=0)  # usable again
    finally:
        envs.close()
