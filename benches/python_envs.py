"""The Python envs the benches share: a ``(4,)`` float32 observation, ``Discrete(2)`` actions,
reward 0, never ending; each step busy-waits its cost on ``time.perf_counter`` (CPU work, which a
``time.sleep`` is not: it would leave the core free and overshoot by the timer slack).

>>> env = make_env(0.0)
>>> env.step(0)[0].shape
(4,)
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from ringenv.cli._measure import busy_wait

OBS_SHAPE = (4,)


class BusyEnv(gym.Env):
    """Returns one preallocated observation (float32, shape ``(4,)``); ``step`` busy-waits
    ``cost_s`` seconds first (none for 0: the null env, whose steps measure the runtime alone)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, OBS_SHAPE, np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, cost_s: float = 0.0):
        self.obs = np.zeros(OBS_SHAPE, np.float32)
        self.cost_s = cost_s

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.obs, {}

    def step(self, action):
        if self.cost_s:
            busy_wait(self.cost_s)
        return self.obs, 0.0, False, False, {}


def make_env(cost_us: float) -> gym.Env:
    """A :class:`BusyEnv` of ``cost_us`` µs per step."""
    return BusyEnv(cost_us * 1e-6)
