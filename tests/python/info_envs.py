"""Envs returning non-empty infos on every step, for the infos tests (test_infos.py).

They live in a module of their own so that worker processes import them by reference.
"""

from __future__ import annotations

from typing import NamedTuple

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


class Position(NamedTuple):
    """A named tuple in an info: a subclass of ``tuple``, pickled so that it stays one."""

    x: int
    y: int


class MaskArray(np.ndarray):
    """An ``ndarray`` subclass in an info: pickled, so that it stays one."""


class CommandList(list):
    """A ``list`` subclass in an info: pickled, so that it stays one."""


class ScheduledInfoEnv(gym.Env):
    """The episodes of the typed-infos envs below: 5 to 11 steps (given the seed), a random
    ``(2,)`` observation, reward ``t``, ended by termination on even ``t`` and truncation on odd;
    each reset and step's info is :meth:`_info`'s (``action``: -1 at a reset), which counts its
    calls in ``n`` for its schedule."""

    metadata = {"render_modes": []}

    def __init__(self, index: int = 0):
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self.index = index
        self.t = 0
        self.n = 0  # calls of reset and step since the env was made: the schedule
        self.length = 0
        self.last_info: dict = {}

    def _info(self, action: int) -> dict:
        raise NotImplementedError

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.length = int(self.np_random.integers(5, 12))
        return self.np_random.random(2).astype(np.float32), self._info(-1)

    def step(self, action):
        self.t += 1
        done = self.t >= self.length
        obs = self.np_random.random(2).astype(np.float32)
        return obs, float(self.t), done and self.t % 2 == 0, done and self.t % 2 == 1, self._info(int(action))


class MutableInfoEnv(ScheduledInfoEnv):
    """Infos holding NumPy arrays and lists, values an env may change, on every reset and step
    (typed in a worker process, ``bindings/src/infos.rs``): an action ``mask`` (``bool``, ``(3,)``, one buffer the env
    changes in place at every step, as envs do), a ``pos`` (``float32``, ``(2,)``), a ``grid``
    (``int16``, ``(2, 3)``), a 0-d ``uint64`` ``seen``, an empty ``complex64`` ``none_yet`` of
    shape ``(0, 4)``, a number ``t``, a text world's admissible ``commands`` (a list of ``str``
    of 0 to 3 items), a ``path`` (a list of ``int``, ``float``, ``bool``, NumPy scalars and
    ``None``); now and then (by step and env ``index``,
    deterministically) what must take the pickled path or make the envs' messages differ:
    another shape, another dtype, a Fortran-ordered ``grid`` (not C-contiguous), a strided view,
    a non-native byte order, an ``ndarray`` subclass, an ``object`` array, a ``datetime64`` array,
    a list in an array's place, arrays of 33 dimensions; a list holding a list, a tuple, an int
    beyond ``int64``, a ``numpy.str_`` or a string UTF-8 cannot encode, a list subclass, a tuple
    in a list's place (with ``lists=False``, no list keys: the inline share types its arrays
    then). Each info is also kept in ``last_info``."""

    def __init__(self, index: int = 0, lists: bool = True):
        super().__init__(index)
        self.lists = lists
        self.mask = np.ones(3, dtype=bool)

    def _info(self, action: int) -> dict:
        t, i, n = self.t, self.index, self.n
        self.n += 1
        if t:  # (not at a reset: a same-step autoreset's final_info holds the same buffer, which
            # SyncVectorEnv copies before the reset and Gymnasium's AsyncVectorEnv after it)
            self.mask[:] = [(t + i) % 2 == 0, t % 3 != 0, True]
        grid = (np.arange(6, dtype=np.int16).reshape(2, 3) - 3) * (t + 1) * (i + 1)
        info = {
            "t": t,
            "mask": self.mask,
            "pos": np.array([t * 0.5, -i], dtype=np.float32),
            "grid": grid,
            "seen": np.array(2**64 - 1 - t, dtype=np.uint64),
            "none_yet": np.zeros((0, 4), dtype=np.complex64),
            "commands": ["go north", "take key", "open door \u2192 d\u00e9j\u00e0"][:(t + i) % 4],
            "path": [t, 0.5 * i, t % 2 == 0, np.int8(-t % 100), None, np.float32(i)],
        }
        if n % 7 == 3 and i == 1:
            info["pos"] = np.array([[t, -i]], dtype=np.float32)  # ((1, 2): Gymnasium broadcasts it)
        if n % 11 == 5 and i == 2:
            info["pos"] = info["pos"].astype(np.float64)
        if n % 13 == 6 and i == 0:
            info["grid"] = np.asfortranarray(grid)
        if n % 17 == 8 and i == 3:
            info["grid"] = np.arange(12, dtype=np.int16).reshape(2, 6)[:, ::2]
        if n % 19 == 9 and i == 1:
            info["grid"] = grid.astype(">i2")
        if n % 23 == 10 and i == 2:
            info["mask"] = self.mask.view(MaskArray)
        if n % 29 == 11 and i == 0:
            info["pos"] = np.array([t, -i], dtype=object)
        if n % 31 == 12 and i == 3:
            info["seen"] = np.array(t, dtype="datetime64[s]")
        if n % 37 == 13 and i == 1:
            info["pos"] = [t * 0.5, -i]
        if n % 41 == 14:
            info["deep"] = np.zeros((1,) * 33, dtype=np.complex64)
        if not self.lists:
            del info["commands"], info["path"]
        elif n % 43 == 15 and i == 0:
            info["path"].append([t])
        elif n % 47 == 16 and i == 1:
            info["path"][0] = (t, i)
        elif n % 53 == 17 and i == 2:
            info["path"].append(2**64 + t)
        elif n % 59 == 18 and i == 3:
            info["commands"] = [np.str_("look")]
        elif n % 61 == 19 and i == 0:
            info["commands"] = ["half \ud800 a character"]
        elif n % 67 == 20 and i == 1:
            info["commands"] = CommandList(["look"])
        elif n % 71 == 21 and i == 2:
            info["path"] = tuple(info["path"])
        self.last_info = dict(info)
        return info


class NumberInfoEnv(ScheduledInfoEnv):
    """Infos of typed values only on most steps (typed messages, ``bindings/src/infos.rs``):
    a Python int, float and bool, NumPy scalars of every typed kind, a string (``msg``, not
    always ASCII), ``None``, and tuples of those (a grid position ``xy``, a mixed ``pose``, a
    ``path``, an empty ``events``), with now and then (by step and env ``index``,
    deterministically) what must take the pickled path instead or make the messages of one step
    differ: a missing key, another type for a key, another key order, a NumPy ``bool_``, a
    ``complex128``, an array, an empty info, an ``int`` at ``int64``'s limits; a tuple of another
    length or item type, holding an int beyond ``int64`` or a nested tuple, a list (which an env
    may change: the inline share's stays the env's own object) or a named tuple in its place; a string with a lone surrogate (UTF-8 cannot encode it), a ``numpy.str_``.
    Each info is also kept in ``last_info`` for the tests to compare."""

    def _info(self, action: int) -> dict:
        t, i, n = self.t, self.index, self.n
        self.n += 1
        info = {
            "t": t,
            "score": 0.25 * t + action,
            "even": t % 2 == 0,
            "energy": np.float32(t / 3.0),
            "small": np.int8(-t % 128),
            "big": np.uint64(2**64 - 1 - t),
            "half": np.float16(t / 7.0),
            "wave": np.complex64(complex(t, -i)),
            "id": np.int64(i * 1000 + t),
            "xy": (t % 5, -i),
            "pose": (0.5 * t, np.float32(-t), t % 3 == 0, np.uint8(i)),
            "msg": ["moved", "bumped into a wall", "", "picked up the key → déjà"][(t + i) % 4],
            "none": None,
            "path": (t, "north" if t % 2 else "south", None),
            "events": (),
        }
        if n % 41 == 15 and i == 2:
            info["xy"] = (t % 5, -i, 0)
        if n % 43 == 16 and i == 1:
            info["xy"] = (float(t), -i)
        if n % 47 == 17 and i == 3:
            info["xy"] = (t, (1, 2))
        if n % 53 == 18 and i == 0:
            info["xy"] = (2**64, i)
        if n % 59 == 19 and i == 2:
            info["xy"] = [t, -i]
        if n % 61 == 20 and i == 1:
            info["xy"] = Position(t, -i)
        if n % 67 == 21 and i == 0:
            info["msg"] = "half \ud800 a character"
        if n % 71 == 22 and i == 3:
            info["msg"] = np.str_("moved")
        if n % 73 == 23 and i == 2:
            info["path"] = [t, "south", None]
        if n % 79 == 24 and i == 1:
            info["none"] = 0
        if (n + i) % 29 == 4:
            info["t"] = 2**63 - 1 if i % 2 else -2**63
        if n % 7 == 3 and i == 1:
            del info["score"]
        if n % 11 == 5 and i == 0:
            info["t"] = float(t)
        if n % 13 == 6 and i == 2:
            info = dict(reversed(list(info.items())))
        if n % 17 == 8:
            info["flag"] = np.bool_(i % 2)
        if n % 19 == 9 and i == 1:
            info["wide"] = np.complex128(1j * n)
        if n % 23 == 10 and i == 0:
            info["phase"] = "late"
        if n % 31 == 12 and i == 3:
            info = {}
        if n % 37 == 14:
            info["cells"] = np.arange(2) * n
        self.last_info = dict(info)
        return info
