"""Small envs used by the ringenv test suite.

They live in a module of their own (not in a test file) so that worker processes, which receive
the parent's ``sys.path``, import them by reference when unpickling the factories.
"""

from __future__ import annotations

import copy
import os
import signal
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
    ``fail_at`` of an episode when it is env ``fail_env`` (or one of the env indices in a tuple
    ``fail_env``)."""

    def __init__(self, env_index: int, fail_env, fail_at: int, unpicklable: bool = False):
        super().__init__(env_index)
        self.fail_env = fail_env if isinstance(fail_env, tuple) else (fail_env,)
        self.fail_at, self.unpicklable = fail_at, unpicklable

    def _explode(self):
        if self.unpicklable:
            raise UnpicklableError("x", "y")
        raise StepError(f"boom in env {self.env_index} at step {self.t}")

    def step(self, action):
        self.t += 1
        if self.env_index in self.fail_env and self.t == self.fail_at:
            self._explode()
        return self._obs(), float(action), False, False, {}


class OddNotesEnv(RaisingEnv):
    """A :class:`RaisingEnv` whose :class:`StepError` has a ``__notes__`` that is not a list (its
    own code set a string), so ``add_note`` refuses it."""

    def _explode(self):
        e = StepError(f"boom in env {self.env_index} at step {self.t}")
        e.__notes__ = "not a list"
        raise e


class LogInfoEnv(CounterEnv):
    """A :class:`CounterEnv` whose every info is ``{"log": log}``, one list it keeps for its whole
    life and appends ``t`` to at each step: the same object every time."""

    def __init__(self, env_index: int = 0):
        super().__init__(env_index)
        self.log: list = []

    def reset(self, *, seed=None, options=None):
        obs, _ = super().reset(seed=seed, options=options)
        return obs, {"log": self.log}

    def step(self, action):
        obs, reward, terminated, truncated, _ = super().step(action)
        self.log.append(self.t)
        return obs, reward, terminated, truncated, {"log": self.log}


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


class ExitOnceEnv(ExitEnv):
    """An :class:`ExitEnv` that exits only if the file ``marker`` does not exist yet, creating it
    first: the worker restarted after the exit runs on."""

    def __init__(self, env_index: int, exit_env: int, exit_at: int, code: int, marker: str):
        super().__init__(env_index, exit_env, exit_at, code)
        self.marker = marker

    def step(self, action):
        if self.env_index == self.exit_env and self.t + 1 == self.exit_at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(self.code)
        self.t += 1
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


# -- envs of any space (tests/python/test_spaces.py and others) ----------------------------------


class ColourSpace(spaces.Space):
    """A custom :class:`~gymnasium.spaces.Space` subclass (not one Gymnasium knows how to put in
    shared memory): its samples are colour names."""

    COLOURS = ("red", "green", "blue", "yellow", "magenta")

    def __init__(self, seed=None):
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self):
        return False

    def sample(self, mask=None, probability=None):
        return self.COLOURS[int(self.np_random.integers(len(self.COLOURS)))]

    def contains(self, x):
        return isinstance(x, str) and x in self.COLOURS

    def __eq__(self, other):
        return isinstance(other, ColourSpace)

    def __hash__(self):
        return hash(ColourSpace)

    def __repr__(self):
        return "ColourSpace()"


class SpaceEnv(gym.Env):
    """An env of any observation and action space.

    Observations are samples of ``observation_space`` drawn by a private copy of the space that
    ``reset`` seeds from the env's own ``np_random`` (so a seed fixes the whole run). Episodes last
    1 to ``max_length`` steps (drawn at reset): even lengths end by termination, odd ones by
    truncation. The reward is a weighted sum of the flattened action plus ``t / 2``; the infos
    carry the step count, whether the action was in the action space and its type name, the
    flattened action on even steps, and a nested dict at the end of an episode."""

    metadata = {"render_modes": []}

    def __init__(self, observation_space, action_space=None, max_length: int = 6):
        self.observation_space = observation_space
        self.action_space = spaces.Discrete(3) if action_space is None else action_space
        self.max_length = max_length
        self._sampler = copy.deepcopy(observation_space)
        self.t = 0
        self.length = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._sampler.seed(int(self.np_random.integers(2**31 - 1)))
        self.t = 0
        self.length = int(self.np_random.integers(1, self.max_length + 1))
        info = {"length": self.length}
        if options is not None:
            info["options"] = dict(options)
        return self._sampler.sample(), info

    def step(self, action):
        self.t += 1
        ok = bool(self.action_space.contains(action))
        flat = np.asarray(spaces.flatten(self.action_space, action), dtype=np.float64)
        reward = float(np.dot(flat, np.arange(1, flat.size + 1))) + 0.5 * self.t
        done = self.t >= self.length
        terminated = done and self.length % 2 == 0
        truncated = done and not terminated
        info = {"t": self.t, "action_ok": ok, "action_type": type(action).__name__}
        if self.t % 2 == 0:
            info["action_flat"] = flat
        if done:
            info["episode_end"] = {"length": self.length, "terminated": terminated}
        return self._sampler.sample(), reward, terminated, truncated, info


# -- envs for call / get_attr / set_attr / close (tests/python/test_calls.py) ----------------------


class CallEnv(CounterEnv):
    """A :class:`CounterEnv` with attributes and methods to call: its rewards are multiplied by
    ``scale`` (so that ``set_attr`` shows in the step outputs)."""

    def __init__(self, env_index: int = 0):
        super().__init__(env_index)
        self.scale = 1.0
        self.label = f"env{env_index}"

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward * self.scale, terminated, truncated, info

    def describe(self, prefix, *, suffix=""):
        return f"{prefix}{self.label}:{self.t}{suffix}"

    def stats(self):
        return {"index": self.env_index, "t": self.t, "history": np.arange(self.t + 1, dtype=np.int16)}

    def sleep(self, delay):
        time.sleep(delay)
        return self.env_index

    def fail_call(self, message):
        if self.env_index >= 1:
            self._raise_in_call(message)
        return "ok"

    def _raise_in_call(self, message):
        raise StepError(f"{message} (env {self.env_index})")


class CloseMarkEnv(CounterEnv):
    """A :class:`CounterEnv` whose ``close`` writes the file ``closed-<env_index>`` into
    ``marker_dir``, and whose ``step`` sleeps ``delay`` seconds."""

    def __init__(self, env_index: int, marker_dir: str, delay: float = 0.0):
        super().__init__(env_index)
        self.marker_dir, self.delay = marker_dir, delay

    def step(self, action):
        if self.delay:
            time.sleep(self.delay)
        return super().step(action)

    def close(self):
        with open(os.path.join(self.marker_dir, f"closed-{self.env_index}"), "w") as f:
            f.write("closed")
        super().close()


class FaultEnv(gym.Env):
    """A Discrete-action env whose faults are set per env at construction: ``die_at`` (exit the
    worker with ``os._exit(3)`` at that step count), ``die_always`` (at every step), ``hang_at``
    (sleep for an hour at that step), ``bad_obs_at`` (return an observation of the wrong shape),
    ``die_in_factory``. Observation: ``[step count]`` float32."""

    metadata = {"render_modes": []}

    def __init__(self, die_at=None, die_always=False, hang_at=None, bad_obs_at=None, segfault_at=None,
                 die_in_reset_unless=None):
        self.observation_space = spaces.Box(-1e9, 1e9, (1,), np.float32)
        self.action_space = spaces.Discrete(3)
        self.die_at, self.die_always, self.hang_at, self.bad_obs_at = die_at, die_always, hang_at, bad_obs_at
        self.segfault_at = segfault_at
        # A path: the first reset that finds no file there creates it and dies (once per run).
        self.die_in_reset_unless = die_in_reset_unless
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.die_in_reset_unless and not os.path.exists(self.die_in_reset_unless):
            open(self.die_in_reset_unless, "w").close()
            os._exit(4)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def crash(self):
        os._exit(5)

    def step(self, action):
        self.t += 1
        if self.die_always or self.t == self.die_at:
            os._exit(3)
        if self.t == self.hang_at:
            time.sleep(3600)
        if self.t == self.segfault_at:
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.t == self.bad_obs_at:
            return np.zeros(3, np.float32), 0.0, False, False, {}
        return np.array([self.t], np.float32), 1.0, False, False, {}

    def environ(self, name):
        return os.environ.get(name)

    def open_fds(self):
        return sorted(int(fd) for fd in os.listdir("/proc/self/fd"))


def exiting_factory(code):
    os._exit(code)


class JitterEnv(gym.Env):
    """An env whose step takes a truly random time (0 to 400 µs, from ``os.urandom``, not from
    its seed), so that workers finish in an unpredictable order, while its results are a function
    of its seed and actions alone: the observation is ``[seed, step count, action, a draw of the
    seeded generator]``; episodes end after 5 to 14 steps (terminated when even, truncated when
    odd); every step's info holds ``count``."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float64)
        self.action_space = spaces.Discrete(4)
        self.seed_value = -1
        self.t = 0
        self.length = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.seed_value = seed
        self.t = 0
        self.length = int(self.np_random.integers(5, 15))
        return np.array([self.seed_value, 0, -1, self.np_random.random()]), {"count": 0}

    def step(self, action):
        time.sleep(int.from_bytes(os.urandom(2), "little") % 400 * 1e-6)
        self.t += 1
        obs = np.array([self.seed_value, self.t, int(action), self.np_random.random()])
        done = self.t >= self.length
        return obs, float(self.t + 0.5 * int(action)), done and self.t % 2 == 0, done and self.t % 2 == 1, \
            {"count": self.t}


class FrameEnv(gym.Env):
    """A Dict observation of 12,320 bytes: ``"frame"`` uint8 ``(64, 64, 3)`` and ``"pos"`` int64
    ``(4,)``, every element a function of the env index, the step count ``t`` and the last
    action; Discrete(3) actions; truncated every ``length`` steps. Eight of them make an
    observation batch above ``ringenv._leases.LEASE_MIN_BYTES``, so ``copy=True`` lends it."""

    metadata = {"render_modes": []}

    def __init__(self, env_index: int = 0, length: int = 7):
        self.env_index, self.length = env_index, length
        self.observation_space = spaces.Dict({
            "frame": spaces.Box(0, 255, (64, 64, 3), np.uint8),
            "pos": spaces.Box(-(2 ** 40), 2 ** 40, (4,), np.int64),
        })
        self.action_space = spaces.Discrete(3)
        self.t = self.action = self.offset = 0

    def _obs(self):
        base = self.offset + 31 * self.env_index + 7 * self.t + self.action
        frame = ((np.arange(64 * 64 * 3, dtype=np.int64) + base) % 251).astype(np.uint8).reshape(64, 64, 3)
        return {"frame": frame, "pos": np.array([self.env_index, self.t, self.action, base], np.int64)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.action = 0, 0
        self.offset = int(self.np_random.integers(0, 1000))
        return self._obs(), {"offset": self.offset}

    def step(self, action):
        self.t += 1
        self.action = int(action)
        return self._obs(), float(self.action), False, self.t >= self.length, {"t": self.t}


class TreeEnv(gym.Env):
    """A nested Dict/Tuple observation of every array kind: ``"frame"`` uint8 ``(3, 4)``,
    ``"pos"`` Discrete(7), ``"inner"`` a Tuple of a float32 Box ``(2,)`` and MultiBinary(3); each
    element a function of the reset's seed, the step count ``t`` and the last action.
    Discrete(3) actions; truncated every 7 steps, reward the action."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = spaces.Dict({
            "frame": spaces.Box(0, 255, (3, 4), np.uint8),
            "pos": spaces.Discrete(7),
            "inner": spaces.Tuple((spaces.Box(-1e6, 1e6, (2,), np.float32), spaces.MultiBinary(3))),
        })
        self.action_space = spaces.Discrete(3)
        self.t = self.action = self.offset = 0

    def _obs(self):
        base = self.offset + 7 * self.t + self.action
        frame = ((np.arange(12) + base) % 256).astype(np.uint8).reshape(3, 4)
        bits = np.array([(base >> k) & 1 for k in range(3)], np.int8)
        return {"frame": frame, "pos": np.int64(base % 7),
                "inner": (np.array([base, -0.5 * base], np.float32), bits)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.action = 0, 0
        self.offset = int(self.np_random.integers(0, 1000))
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.action = int(action)
        return self._obs(), float(self.action), False, self.t >= 7, {}


class BlockingEnv(gym.Env):
    """An env whose ``step`` in a worker process writes ``<folder>/started-<pid>``, then blocks
    until ``<folder>/release`` exists (at most ``HANG_GUARD_S``), then writes
    ``<folder>/done-<pid>``. In the main process (``main_pid``: the inline share) ``step``
    returns at once, or for ``mode="interrupt"`` raises ``KeyboardInterrupt`` (what a Ctrl-C
    there raises), or for ``mode="signal"`` first sends SIGUSR1 to this process (its handler
    runs there and then, inside the vector env's call). Observation: the step count (float32,
    shape ``(1,)``); Discrete(2) actions."""

    HANG_GUARD_S = 120.0

    def __init__(self, main_pid: int, folder: str, mode: str = "block"):
        self.observation_space = spaces.Box(0, np.inf, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.main_pid, self.folder, self.mode = main_pid, folder, mode
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        self.work()
        return np.full(1, self.t, np.float32), 0.0, False, False, {}

    def work(self):
        """What ``step`` does besides counting (also callable with ``call("work")``)."""
        if os.getpid() == self.main_pid:
            if self.mode == "interrupt":
                raise KeyboardInterrupt
            if self.mode == "signal":
                os.kill(self.main_pid, signal.SIGUSR1)
        else:
            open(os.path.join(self.folder, f"started-{os.getpid()}"), "w").close()
            deadline = time.monotonic() + self.HANG_GUARD_S
            while not os.path.exists(os.path.join(self.folder, "release")) and time.monotonic() < deadline:
                time.sleep(0.01)
            open(os.path.join(self.folder, f"done-{os.getpid()}"), "w").close()
        return self.t


class StringRewardEnv(gym.Env):
    """Returns the reward ``"1.0"`` (a str, not a number) from every ``step``."""

    def __init__(self):
        self.observation_space = spaces.Box(0, 1, (1,), np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), "1.0", False, False, {}


def faulty(closing, n=4, workers=2, faults=None, **kwargs):
    """A ringenv vector env of ``n`` :class:`FaultEnv` (``faults[i]``: env ``i``'s keyword
    arguments) on ``workers`` worker processes, closed at teardown by the ``closing`` fixture."""
    import functools

    import ringenv

    faults = faults or {}
    fns = [functools.partial(FaultEnv, **faults.get(i, {})) for i in range(n)]
    return closing(ringenv.AsyncVectorEnv(fns, num_workers=workers, **kwargs))


#: One action per env of a 4-env ``faulty`` pool.
ONES = np.ones(4, dtype=np.int64)
