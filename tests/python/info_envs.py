"""Envs returning non-empty infos on every step, for the info-arena tests (test_infos_shm.py).

They live in a module of their own so that worker processes import them by reference.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class EveryStepInfoEnv(gym.Env):
    """A deterministic (given its seed) env with episodes of 4 to 9 steps whose infos are
    non-empty on every reset and step: ints, floats, bools, NumPy scalars, a string, and, with
    ``blob > 0``, a ``uint8`` array of ``blob`` bytes (to overflow the info arena)."""

    metadata = {"render_modes": []}

    def __init__(self, blob: int = 0):
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self.blob = blob
        self.t = 0
        self.length = 0

    def _info(self, action: int) -> dict:
        info = {
            "t": self.t,
            "score": 0.5 * self.t + action,
            "even": self.t % 2 == 0,
            "energy": np.float32(self.t / 3.0),
            "phase": "early" if self.t < 3 else "late",
        }
        if self.blob:
            info["blob"] = np.full(self.blob, self.t % 256, dtype=np.uint8)
        return info

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.length = int(self.np_random.integers(4, 10))
        obs = self.np_random.random(4).astype(np.float32)
        return obs, self._info(-1)

    def step(self, action):
        action = int(action)
        self.t += 1
        obs = self.np_random.random(4).astype(np.float32)
        done = self.t >= self.length
        return obs, float(self.t + action), done and self.t % 2 == 0, done and self.t % 2 == 1, self._info(action)


class LambdaInfoEnv(EveryStepInfoEnv):
    """Infos holding a lambda, which plain pickle refuses (the worker falls back to cloudpickle)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        t = self.t
        info["fn"] = lambda x: x + t
        return obs, reward, terminated, truncated, info
