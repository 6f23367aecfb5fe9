"""``ringenv.AsyncVectorEnv``: a drop-in for ``gymnasium.vector.AsyncVectorEnv`` whose sub-envs
run in worker processes that exchange actions and observations through shared memory.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from enum import Enum
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ringenv import _native, _spaces
from ringenv.errors import _remote_exception

__all__ = ["AsyncVectorEnv"]


class AsyncState(Enum):
    """The protocol state: at most one call is pending."""

    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"


def _default_num_workers(num_envs: int) -> int:
    return max(1, min(num_envs, os.cpu_count() or 1))


class AsyncVectorEnv(VectorEnv):
    """Vectorized env stepping its sub-envs in worker processes over shared memory.

    Accepts what ``gymnasium.vector.AsyncVectorEnv`` accepts and returns the same results
    (values and dtypes), with next-step autoreset, so switching is a one-line import change.
    Sub-envs are split into ``num_workers`` contiguous groups; each group runs in one worker
    process (``python -m ringenv._worker``) whose step loop is Rust, calling the envs through
    PyO3 and writing observations straight into a shared memory segment.

    Args:
        env_fns: callables that each create one sub-env (sent to the workers with cloudpickle).
        shared_memory: accepted for compatibility; observations always travel through shared
            memory (supported spaces: ``Box`` and ``Discrete``).
        copy: if ``True`` (default), ``reset``/``step`` return observations the caller owns;
            if ``False`` they return views of the shared slot, valid until the step after next.
        context, daemon, worker: accepted for compatibility and ignored: workers are always
            started with fork+exec, die with the parent process, and run ringenv's worker loop.
        observation_mode: only ``"same"`` is supported in this version.
        autoreset_mode: only ``AutoresetMode.NEXT_STEP`` is supported in this version.
        num_workers: worker processes (default: the number of cores, at most ``num_envs``).
        startup_timeout: seconds to wait for workers to build their envs.

    Raises:
        ValueError: for an empty ``env_fns``, an unsupported mode, or a bad ``num_workers``.
        NotImplementedError: for spaces other than ``Box`` and ``Discrete``.
        ringenv.errors.WorkerStartupError: when a factory raises or sub-env spaces differ (the
            original exception is its ``__cause__``).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        shared_memory: bool = True,
        copy: bool = True,
        context: Optional[str] = None,
        daemon: bool = True,
        worker: Optional[Callable] = None,
        observation_mode: Union[str, spaces.Space] = "same",
        autoreset_mode: Union[str, AutoresetMode] = AutoresetMode.NEXT_STEP,
        *,
        num_workers: Optional[int] = None,
        startup_timeout: float = 60.0,
    ):
        self.closed = True  # until the pool exists, close() has nothing to do
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError("env_fns is empty: give at least one env factory")
        if AutoresetMode(autoreset_mode) != AutoresetMode.NEXT_STEP:
            raise ValueError(f"autoreset_mode {autoreset_mode!r} is not supported yet; use AutoresetMode.NEXT_STEP")
        if observation_mode != "same":
            raise ValueError(f"observation_mode {observation_mode!r} is not supported yet; use 'same'")
        dummy = env_fns[0]()
        try:
            obs_space, act_space = dummy.observation_space, dummy.action_space
            metadata = dict(getattr(dummy, "metadata", {}) or {})
            render_mode, spec = dummy.render_mode, dummy.spec
        finally:
            dummy.close()
        self.env_fns = env_fns
        self._setup(
            num_envs=len(env_fns),
            obs_space=obs_space,
            act_space=act_space,
            reward_dtype="float64",
            argv=[sys.executable, "-m", "ringenv._worker", "--python"],
            make_init=lambda start, stop: pickle.dumps({
                "sys_path": list(sys.path),
                "payload": cloudpickle.dumps({
                    "env_fns": env_fns[start:stop],
                    "observation_space": obs_space,
                    "action_space": act_space,
                }),
            }),
            num_workers=num_workers,
            startup_timeout=startup_timeout,
            copy=copy,
        )
        metadata["autoreset_mode"] = AutoresetMode.NEXT_STEP
        self.metadata = metadata
        self.render_mode = render_mode
        self.spec = spec

    @classmethod
    def _from_builtin(cls, env_id: str, num_envs: int, kwargs: Dict[str, Any], *,
                      num_workers: Optional[int] = None, copy: bool = True,
                      startup_timeout: float = 60.0) -> "AsyncVectorEnv":
        """A vector env of built-in Rust env ``env_id`` (see ``ringenv.make_vec``)."""
        kwargs_json = json.dumps(kwargs)
        obs_d, act_d = _native.builtin_spaces(env_id, kwargs_json)
        self = cls.__new__(cls)
        self.closed = True
        self.env_fns = []
        init = json.dumps({"env_id": env_id, "kwargs": kwargs}).encode()
        self._setup(
            num_envs=num_envs,
            obs_space=_spaces.from_dict(obs_d),
            act_space=_spaces.from_dict(act_d),
            reward_dtype="float32",
            argv=[sys.executable, "-m", "ringenv._worker", "--rust"],
            make_init=lambda start, stop: init,
            num_workers=num_workers,
            startup_timeout=startup_timeout,
            copy=copy,
        )
        self.metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}
        self.render_mode = None
        self.spec = None
        return self

    def _setup(self, *, num_envs, obs_space, act_space, reward_dtype, argv, make_init, num_workers,
               startup_timeout, copy):
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if num_workers is None:
            num_workers = _default_num_workers(num_envs)
        if not isinstance(num_workers, (int, np.integer)) or not 1 <= num_workers <= num_envs:
            raise ValueError(f"num_workers must be an integer from 1 to num_envs ({num_envs}), got {num_workers!r}")
        obs_dtype, obs_shape = _spaces.array_spec(obs_space, "observation")
        act_dtype, act_shape = _spaces.array_spec(act_space, "action")
        self.num_envs = num_envs
        self.single_observation_space = obs_space
        self.single_action_space = act_space
        self.observation_space = batch_space(obs_space, num_envs)
        self.action_space = batch_space(act_space, num_envs)
        self.copy = copy
        ranges = [(a, b) for a, b in _split(num_envs, int(num_workers))]
        self._pool = _native.Pool(
            num_envs, int(num_workers), obs_dtype, obs_shape, act_dtype, act_shape, reward_dtype,
            argv, [make_init(a, b) for a, b in ranges], startup_timeout=startup_timeout,
        )
        self.closed = False
        self._state = AsyncState.DEFAULT
        seg = self._pool.segment()
        n = num_envs

        def arrays(name, dtype, shape):
            return [_spaces.view(seg, self._pool.offset(s, name), dtype, [n, *shape])
                    for s in range(self._pool.depth)]

        self._obs = arrays("obs", obs_dtype, obs_shape)
        self._action = arrays("action", act_dtype, act_shape)
        self._reward = arrays("reward", reward_dtype, [])
        self._terminated = arrays("terminated", "bool", [])
        self._truncated = arrays("truncated", "bool", [])
        self._act_shape = (n, *act_shape)
        self._discrete = isinstance(act_space, spaces.Discrete)

    # -- protocol -----------------------------------------------------------------------------

    def _assert_open(self, name: str):
        if self.closed:
            raise ClosedEnvironmentError(f"Trying to call `{name}` after the vector env was closed.")

    def _assert_default(self, name: str):
        self._assert_open(name)
        if self._state != AsyncState.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `{name}` while waiting for a pending call to `{self._state.value}` to complete",
                str(self._state.value))

    def reset_async(self, seed: Optional[Union[int, Sequence[Optional[int]]]] = None,
                    options: Optional[dict] = None):
        """Sends a reset to every sub-env: env ``i`` gets ``seed + i`` (an int), ``seed[i]`` (a list
        of ``num_envs`` ints or ``None``), or no seed (``None``), and ``options``.

        Raises:
            AlreadyPendingCallError, ClosedEnvironmentError,
            ValueError: a seed list of the wrong length, or a negative / too large seed.
        """
        self._assert_default("reset_async")
        if seed is None:
            seeds: List[Optional[int]] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"If seeds are passed as a list the length must match num_envs={self.num_envs} "
                                 f"but got length={len(seeds)}.")
        for i, s in enumerate(seeds):
            if s is not None and not (isinstance(s, (int, np.integer)) and 0 <= int(s) < 2**64):
                raise ValueError(f"seed of env {i} must be None or an integer in [0, 2**64), got {s!r}")
        self._pool.write_seeds([None if s is None else int(s) for s in seeds])
        payload = None if options is None else cloudpickle.dumps(options)
        self._pool.submit("reset", payload)
        self._state = AsyncState.WAITING_RESET

    def reset_wait(self, timeout: Optional[float] = None) -> Tuple[Any, Dict[str, Any]]:
        """Waits for the pending reset.

        Returns:
            ``(observations, infos)``: observations an array of shape
            ``(num_envs, *single_observation_space.shape)`` and the space's dtype; infos a dict
            vectorised as Gymnasium does.

        Raises:
            NoAsyncCallError, multiprocessing.TimeoutError (the reset stays pending),
            ringenv.errors.WorkerDiedError, or the exception an env raised.
        """
        slot, infos = self._wait("reset", AsyncState.WAITING_RESET, timeout)
        obs = self._obs[slot]
        return (obs.copy() if self.copy else obs), infos

    def reset(self, *, seed=None, options=None):
        """Resets every sub-env; see :meth:`reset_async` and :meth:`reset_wait`."""
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def step_async(self, actions):
        """Writes ``actions`` (shape ``(num_envs, *single_action_space.shape)``; ``int`` values for
        a Discrete space) into shared memory and sends a step to every worker.

        Raises:
            AlreadyPendingCallError, ClosedEnvironmentError,
            ValueError: actions of the wrong shape, or non-integer actions for a Discrete space
                (checked before anything is written).
        """
        self._assert_default("step_async")
        actions = np.asarray(actions)
        if actions.shape != self._act_shape:
            raise ValueError(f"actions have shape {actions.shape}, expected {self._act_shape} "
                             f"(num_envs={self.num_envs}, action shape {self.single_action_space.shape})")
        if self._discrete and not (np.issubdtype(actions.dtype, np.integer) or actions.dtype == np.bool_):
            raise ValueError(f"actions for a Discrete space must be integers, got dtype {actions.dtype}")
        np.copyto(self._action[self._pool.next_slot], actions, casting="unsafe")
        self._pool.submit("step")
        self._state = AsyncState.WAITING_STEP

    def step_wait(self, timeout: Optional[float] = None):
        """Waits for the pending step.

        Returns:
            ``(observations, rewards, terminations, truncations, infos)``: observations of shape
            ``(num_envs, *obs_shape)`` and the space's dtype, rewards ``float64`` of shape
            ``(num_envs,)``, terminations and truncations ``bool`` of shape ``(num_envs,)``,
            infos a dict vectorised as Gymnasium does.

        Raises:
            NoAsyncCallError, multiprocessing.TimeoutError (the step stays pending),
            ringenv.errors.WorkerDiedError, or the exception an env raised (its remote traceback
            is the ``__cause__``).
        """
        slot, infos = self._wait("step", AsyncState.WAITING_STEP, timeout)
        obs = self._obs[slot]
        return (
            obs.copy() if self.copy else obs,
            self._reward[slot].astype(np.float64),
            self._terminated[slot].copy(),
            self._truncated[slot].copy(),
            infos,
        )

    def step(self, actions):
        """Steps every sub-env; see :meth:`step_async` and :meth:`step_wait`."""
        self.step_async(actions)
        return self.step_wait()

    def _wait(self, call: str, state: AsyncState, timeout):
        self._assert_open(f"{call}_wait")
        if self._state != state:
            raise NoAsyncCallError(f"Calling `{call}_wait` without any prior call to `{call}_async`.",
                                   state.value)
        try:
            slot, messages, errors = self._pool.wait(timeout)
        except Exception as e:
            from ringenv.errors import WorkerDiedError

            if isinstance(e, WorkerDiedError):
                self._state = AsyncState.DEFAULT
                self.closed = True
            raise
        self._state = AsyncState.DEFAULT
        if errors:
            raise _remote_exception(errors[0][1])
        infos: Dict[str, Any] = {}
        for _, payload in messages:
            for env_id, info in cloudpickle.loads(payload):
                infos = self._add_info(infos, info, env_id)
        return slot, infos

    def close_extras(self, timeout: Optional[float] = None, terminate: bool = False):
        """Stops the workers: with ``terminate=True`` at once, otherwise after asking them to
        close their envs and waiting up to ``timeout`` seconds (default 1)."""
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.close(0.0 if terminate else (1.0 if timeout is None else timeout))

    def __del__(self):
        if not getattr(self, "closed", True):
            self.close(terminate=True)

    def __repr__(self) -> str:
        return f"ringenv.AsyncVectorEnv(num_envs={getattr(self, 'num_envs', '?')})"


def _split(n: int, k: int):
    base, extra = divmod(n, k)
    start = 0
    for w in range(k):
        stop = start + base + (1 if w < extra else 0)
        yield start, stop
        start = stop
