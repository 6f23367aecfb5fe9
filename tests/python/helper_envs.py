"""Small envs used by the ringenv test suite.

They live in a module of their own (not in a test file) so that worker processes, which receive
the parent's ``sys.path``, import them by reference when unpickling the factories.
"""

from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class InfoEnv(gym.Env):
    """A deterministic (given its seed) env with episodes of 3 to 8 steps, ending either by
    termination (even length) or truncation (odd length), whose infos are non-empty on some
    steps only and differ in type (int, bool, float, str, nested dict)."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float64)
        self.action_space = spaces.Discrete(3)
        self.t = 0
        self.length = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.length = int(self.np_random.integers(3, 9))
        info = {"length": self.length}
        if options is not None:
            info["options"] = dict(options)  # echoes the options: a nested dict in the infos
            info["option_value"] = options.get("value", -1)
        obs = np.array([0.0, self.length, self.np_random.random()], dtype=np.float64)
        return obs, info

    def step(self, action):
        action = int(action)
        self.t += 1
        obs = np.array([self.t, action, self.np_random.random()], dtype=np.float64)
        reward = 0.25 * action + self.t
        done = self.t >= self.length
        terminated = done and self.length % 2 == 0
        truncated = done and self.length % 2 == 1
        info = {}
        if self.t % 3 == 0:
            info["step"] = self.t
            info["flag"] = action == 1
        if self.t % 4 == 0:
            info["half"] = 0.5 * self.t
        if done:
            info["outcome"] = "terminated" if terminated else "truncated"
        return obs, reward, terminated, truncated, info


class StepError(RuntimeError):
    """The exception :class:`RaisingEnv` raises (a type of its own, to check it survives)."""


class UnpicklableError(Exception):
    """An exception that pickles but cannot be unpickled (its ``__init__`` takes two arguments
    while ``args`` holds one)."""

    def __init__(self, a, b):
        super().__init__(f"unpicklable {a} {b}")


class CounterEnv(gym.Env):
    """Observation ``[env_index, t]``; Discrete(2) actions; never ends by itself."""

    metadata = {"render_modes": []}

    def __init__(self, env_index: int = 0):
        self.env_index = env_index
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def _obs(self):
        return np.array([self.env_index, self.t], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(action), False, False, {}


class RaisingEnv(CounterEnv):
    """A :class:`CounterEnv` that raises :class:`StepError` (from ``_explode``) at step
    ``fail_at`` of an episode when it is env ``fail_env``."""

    def __init__(self, env_index: int, fail_env: int, fail_at: int, unpicklable: bool = False):
        super().__init__(env_index)
        self.fail_env, self.fail_at, self.unpicklable = fail_env, fail_at, unpicklable

    def _explode(self):
        if self.unpicklable:
            raise UnpicklableError("x", "y")
        raise StepError(f"boom in env {self.env_index} at step {self.t}")

    def step(self, action):
        self.t += 1
        if self.env_index == self.fail_env and self.t == self.fail_at:
            self._explode()
        return self._obs(), float(action), False, False, {}


class SlowEnv(CounterEnv):
    """A :class:`CounterEnv` whose ``step`` sleeps ``delay`` seconds."""

    def __init__(self, env_index: int = 0, delay: float = 0.5):
        super().__init__(env_index)
        self.delay = delay

    def step(self, action):
        time.sleep(self.delay)
        return super().step(action)


class ExitEnv(CounterEnv):
    """A :class:`CounterEnv` whose process exits with ``code`` (``os._exit``) at step ``exit_at``
    when it is env ``exit_env``."""

    def __init__(self, env_index: int, exit_env: int, exit_at: int, code: int):
        super().__init__(env_index)
        self.exit_env, self.exit_at, self.code = exit_env, exit_at, code

    def step(self, action):
        self.t += 1
        if self.env_index == self.exit_env and self.t == self.exit_at:
            os._exit(self.code)
        return self._obs(), float(action), False, False, {}


class SizedEnv(CounterEnv):
    """A :class:`CounterEnv` whose observation has ``size`` entries (for space mismatches)."""

    def __init__(self, env_index: int = 0, size: int = 2):
        super().__init__(env_index)
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(size,), dtype=np.float32)

    def _obs(self):
        obs = np.zeros(self.observation_space.shape, dtype=np.float32)
        obs[0] = self.env_index
        return obs


def failing_factory(env_index: int, fail_env: int):
    """A factory that raises ``ValueError`` for env ``fail_env`` and builds a CounterEnv otherwise."""
    if env_index == fail_env:
        raise ValueError(f"factory of env {env_index} refuses to build")
    return CounterEnv(env_index)
