"""Envs for tests/python/test_ray.py, in their own module so that Ray actors import them by name
(the test cluster's processes get this folder on ``PYTHONPATH``)."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class WalkEnv(gym.Env):
    """A seeded random walk with a Dict observation and infos that differ between envs and steps:
    ``{"pos": float32 (2,), "steps": Discrete(50)}``; infos ``{"steps": int}`` every step and
    ``{"odd": True}`` on odd steps; an episode ends (terminated) when ``|pos|`` passes 3 and is
    truncated after 40 steps. Action 2 blocks the step for ``block_s`` seconds (an env to kill an
    actor in the middle of)."""

    def __init__(self, block_s: float = 600.0):
        self.observation_space = spaces.Dict({"pos": spaces.Box(-10, 10, (2,), np.float32),
                                              "steps": spaces.Discrete(50)})
        self.action_space = spaces.Discrete(3)
        self.block_s = block_s
        self._pos = np.zeros(2, np.float32)
        self._steps = 0

    def _obs(self):
        return {"pos": self._pos.copy(), "steps": self._steps}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._pos = self.np_random.normal(size=2).astype(np.float32)
        self._steps = 0
        return self._obs(), {"start": float(self._pos[0])}

    def step(self, action):
        if int(action) == 2:
            time.sleep(self.block_s)
        self._steps += 1
        self._pos += (self.np_random.normal(size=2) + (1 if int(action) else -1) * 0.1).astype(np.float32)
        info = {"steps": self._steps}
        if self._steps % 2:
            info["odd"] = True
        terminated = bool(np.abs(self._pos).max() > 3)
        return self._obs(), float(self._pos.sum()), terminated, self._steps >= 40, info


class BrokenFactoryError(Exception):
    pass


def broken_env():
    """A factory that raises (the vector env must re-raise it in the caller)."""
    raise BrokenFactoryError("this factory always fails")


class RaisingEnv(WalkEnv):
    """Raises ``ValueError`` in ``step`` on action 1 (an env error to re-raise in the driver)."""

    def step(self, action):
        if int(action) == 1:
            raise ValueError("RaisingEnv refuses action 1")
        return super().step(action)


class ExitEnv(WalkEnv):
    """Its worker process exits (status 3) in ``step`` on action 1: a worker death inside an actor."""

    def step(self, action):
        if int(action) == 1:
            import os

            os._exit(3)
        return super().step(action)


class SlowRebuildEnv(WalkEnv):
    """A :class:`WalkEnv` whose construction sleeps ``sleep_s`` seconds while the file ``marker``
    exists: an actor restarted then takes that long to come back."""

    def __init__(self, marker: str, sleep_s: float):
        import os

        if os.path.exists(marker):
            time.sleep(sleep_s)
        super().__init__()
