"""``ringenv.sb3.SubprocVecEnv``: a drop-in for Stable-Baselines3's ``SubprocVecEnv`` (a ``VecEnv``
whose sub-envs run in ringenv's worker processes, exchanging actions and observations through
shared memory instead of one pipe per env).

Switching is one import line; everything else, SB3's algorithms and ``VecEnv`` wrappers
included, stays as it was:

>>> import gymnasium as gym
>>> from ringenv.sb3 import SubprocVecEnv  # instead of: from stable_baselines3.common.vec_env import ...
>>> venv = SubprocVecEnv([lambda: gym.make("CartPole-v1") for _ in range(4)], num_workers=2)
>>> venv.seed(0)
[0, 1, 2, 3]
>>> obs = venv.reset()
>>> obs.shape, obs.dtype.name
((4, 4), 'float32')
>>> obs, rewards, dones, infos = venv.step([venv.action_space.sample() for _ in range(4)])
>>> rewards.dtype.name, dones.dtype.name, sorted(infos[0])
('float32', 'bool', ['TimeLimit.truncated'])
>>> venv.close()

Functions that run in the workers (``get_attr``, ``env_method``, ...) are closures, which
cloudpickle sends by value: a worker never imports ``stable_baselines3`` (and with it torch,
about 2 s and 650 MB per process) unless its env itself needs it (an env wrapped in SB3's
``Monitor``, say).
"""

from __future__ import annotations

import multiprocessing
import sys
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ClosedEnvironmentError
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import concatenate, create_empty_array
from stable_baselines3.common.preprocessing import check_for_nested_spaces
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

from ringenv._layout import FLAT_SPACES
from ringenv._not_copyable import NotCopyable
from ringenv.vector import AsyncVectorEnv

__all__ = ["SubprocVecEnv"]


# -- functions run in the workers: closures, so cloudpickle sends them by value ---------------------


def _make_env(env_fn: Callable[[], Any]) -> Callable[[], gym.Env]:
    """``env_fn`` whose env, if it is not a ``gymnasium.Env`` (an old ``gym`` env), is converted
    by SB3's ``_patch_env`` (shimmy), as SB3's vector envs do."""

    def make_env() -> gym.Env:
        env = env_fn()
        if not isinstance(env, gym.Env):
            from stable_baselines3.common.vec_env.patch_gym import _patch_env

            env = _patch_env(env)
        return env

    return make_env


def _get_attr(name: str) -> Callable[[gym.Env], Any]:
    def get_attr(env: gym.Env) -> Any:
        return env.get_wrapper_attr(name)

    return get_attr


def _has_attr(name: str) -> Callable[[gym.Env], bool]:
    def has_attr(env: gym.Env) -> bool:
        try:
            env.get_wrapper_attr(name)
        except AttributeError:
            return False
        return True

    return has_attr


def _set_attr(name: str, value: Any) -> Callable[[gym.Env], None]:
    def set_attr(env: gym.Env) -> None:
        setattr(env, name, value)  # on the outermost wrapper, as SB3 does

    return set_attr


def _env_method(name: str, args: tuple, kwargs: Dict[str, Any]) -> Callable[[gym.Env], Any]:
    def env_method(env: gym.Env) -> Any:
        return env.get_wrapper_attr(name)(*args, **kwargs)

    return env_method


def _is_wrapped(wrapper_class: type) -> Callable[[gym.Env], bool]:
    """SB3's ``env_util.is_wrapped``."""
    module = wrapper_class.__module__
    pickled = cloudpickle.dumps(wrapper_class)

    def is_wrapped(env: gym.Env) -> bool:
        if module not in sys.modules:
            return False
        cls = cloudpickle.loads(pickled)
        while isinstance(env, gym.Wrapper):
            if isinstance(env, cls):
                return True
            env = env.env
        return False

    return is_wrapped


# -- the adapter --------------------------------------------------------------------------------------


class SubprocVecEnv(NotCopyable, VecEnv):
    """Stable-Baselines3 ``VecEnv`` stepping its sub-envs in ringenv worker processes.

    A drop-in for ``stable_baselines3.common.vec_env.SubprocVecEnv``, with the same results as
    SB3's ``SubprocVecEnv`` and ``DummyVecEnv`` on the same seeds: ``step`` returns
    ``(obs, rewards, dones, infos)``: observations batched as SB3 batches them (an array of shape
    ``(num_envs, *observation_space.shape)``; a dict or tuple of such arrays for a Dict or Tuple
    space, which must not be nested), rewards ``float32`` and dones ``bool`` of shape
    ``(num_envs,)``, and ``infos`` a list of one dict per env (the env's own info, with
    ``"TimeLimit.truncated"``; when the episode ended, the env is reset at once, the step's
    observation is ``"terminal_observation"`` and the reset's info goes to ``reset_infos``).
    ``reset()`` returns observations only, applies the seeds of :meth:`seed` (env ``i`` gets
    ``seed + i``) and the options of :meth:`set_options`, then forgets both, as SB3 does.

    Underneath is a :class:`ringenv.AsyncVectorEnv` in same-step autoreset mode, with its layout:
    ``num_workers`` processes, each stepping a contiguous group of envs, instead of SB3's one
    process per env (``inline=False`` keeps every env in a worker process, as with SB3).

    Args:
        env_fns: callables that each create one sub-env (sent to the workers with cloudpickle;
            old ``gym`` envs are converted with SB3's ``_patch_env``).
        start_method: accepted for compatibility and otherwise ignored; it must be ``None`` or
            a name ``multiprocessing.get_context`` accepts.
        **kwargs: passed to :class:`ringenv.AsyncVectorEnv`: ``num_workers``,
            ``on_worker_failure``, ``worker_env``, ``startup_timeout``, ``copy``, ...; not
            ``autoreset_mode`` (SB3's semantics need same-step autoreset).

    ``get_attr``, ``set_attr``, ``env_method`` and ``env_is_wrapped`` act on the envs of
    ``indices`` only (``None``: all; an int; or an iterable of ints in ``[-num_envs, num_envs)``,
    negative ones counting from the end), in parallel across workers; an env listed twice is
    acted on twice, in turn, as with SB3.

    Differences from SB3's vector envs: actions of Box, Discrete, MultiDiscrete and MultiBinary
    spaces are cast to the space's dtype in shared memory (SB3 hands each env a row of the array
    it was given, whatever its dtype); with different options per env (``set_options`` with a
    list), envs whose options are empty are reset with ``options={}`` rather than none (they are
    reset in groups by ``reset_mask``, which sends the options dict); a step pending at
    ``reset()`` is collected and dropped (SB3's ``SubprocVecEnv`` would mix up its pipes).

    Raises:
        ValueError: empty ``env_fns``, an unknown ``start_method`` (multiprocessing's "cannot find
            context for ..."), a bad ``num_workers``.
        TypeError: ``autoreset_mode`` in ``kwargs``.
        NotImplementedError: a nested Dict or Tuple observation space (as SB3's ``DummyVecEnv``).
        ringenv.errors.WorkerStartupError: a factory raised, or sub-env spaces differ.
    """

    def __init__(self, env_fns: List[Callable[[], gym.Env]], start_method: Optional[str] = None, **kwargs: Any):
        self.closed = True  # until the workers exist, close() has nothing to do
        self.waiting = False
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError("env_fns is empty: give at least one env factory")
        if start_method is not None:
            multiprocessing.get_context(start_method)  # its own ValueError for an unknown method, as SB3's
        if "autoreset_mode" in kwargs:
            raise TypeError("SubprocVecEnv takes no autoreset_mode: SB3's semantics need same-step autoreset")
        self._vec = AsyncVectorEnv([_make_env(fn) for fn in env_fns], autoreset_mode=AutoresetMode.SAME_STEP,
                                   vector_infos=False, **kwargs)
        self.closed = False
        try:
            check_for_nested_spaces(self._vec.single_observation_space)
            super().__init__(len(env_fns), self._vec.single_observation_space, self._vec.single_action_space)
        except BaseException:
            self.close()
            raise

    # -- stepping -----------------------------------------------------------------------------------

    def reset(self) -> VecEnvObs:
        """Resets every env with the seeds of :meth:`seed` and the options of
        :meth:`set_options` (then forgotten); a pending step is collected and dropped first.

        Returns:
            The observations (see the class docstring); ``reset_infos`` holds each env's info.

        Raises:
            ClosedEnvironmentError: the vec env is closed.
            ValueError: ``set_options`` was given a list whose length is not ``num_envs``, or a
                seed is negative (``ringenv.errors.SeedError``).
            Exception: whatever an env raised (its remote traceback is the ``__cause__``).
        """
        self._assert_open("reset")
        if len(self._options) != self.num_envs:
            raise ValueError(f"set_options was given {len(self._options)} options for {self.num_envs} envs")
        if self.waiting:
            self.waiting = False
            self._vec.step_wait()
        seeds = list(self._seeds)
        groups: Dict[bytes, List[int]] = {}  # envs with the same options reset together
        for i, options in enumerate(self._options):
            groups.setdefault(cloudpickle.dumps(options or None), []).append(i)
        reset_infos: List[Dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for key, env_ids in groups.items():
            options = cloudpickle.loads(key)
            if len(groups) > 1:
                mask = np.zeros(self.num_envs, dtype=np.bool_)
                mask[env_ids] = True
                options = {**(options or {}), "reset_mask": mask}
            obs, _ = self._vec.reset(seed=seeds, options=options)
            env_infos = self._vec.env_infos()
            for i in env_ids:
                reset_infos[i] = env_infos[i]
        self.reset_infos = reset_infos
        self._reset_seeds()
        self._reset_options()
        return self._sb3_obs(obs)

    def step_async(self, actions: np.ndarray) -> None:
        """Sends a step with ``actions``: for a Box, Discrete, MultiDiscrete or MultiBinary action
        space, an array of shape ``(num_envs, *action_space.shape)`` (cast to the space's dtype);
        for other spaces, a sequence of ``num_envs`` actions.

        Raises:
            ClosedEnvironmentError: the vec env is closed.
            gymnasium.error.AlreadyPendingCallError: a step is already pending.
            ValueError: not one action per env, actions of the wrong shape, or out of the
                action space (checked before anything is sent).
        """
        self._assert_open("step_async")
        # Not np.ndim: a list of Tuple-space actions (tuples of arrays of different shapes) is no array.
        if isinstance(actions, np.ndarray):
            count = len(actions) if actions.ndim > 0 else 0
        else:
            try:
                count = len(actions)
            except TypeError:
                count = 0
        if count != self.num_envs:
            raise ValueError(f"actions: got {count} actions for {self.num_envs} envs (one per env expected)")
        batch: Any
        if isinstance(self.action_space, FLAT_SPACES):  # a batch is one array
            batch = np.asarray(actions)
        else:
            empty: Any = create_empty_array(self.action_space, self.num_envs)
            batch = concatenate(self.action_space, list(actions), empty)
        self._vec.step_async(batch)
        self.waiting = True

    def step_wait(self) -> VecEnvStepReturn:
        """Waits for the pending step; returns ``(obs, rewards, dones, infos)`` (see the class
        docstring).

        Raises:
            gymnasium.error.NoAsyncCallError: no step is pending.
            ringenv.errors.WorkerDiedError: a worker process died.
            Exception: whatever an env raised (its remote traceback is the ``__cause__``).
        """
        try:
            obs, rewards, terminated, truncated, _ = self._vec.step_wait()
        finally:
            self.waiting = False
        dones = terminated | truncated
        infos: List[Dict[str, Any]] = []
        for i, info in enumerate(self._vec.env_infos()):
            if "final_obs" in info:  # the episode ended: the step's info and obs, then the reset's info
                reset_info = info
                final_obs = reset_info.pop("final_obs")
                info = reset_info.pop("final_info")
                self.reset_infos[i] = reset_info
                info["TimeLimit.truncated"] = bool(truncated[i]) and not terminated[i]
                info["terminal_observation"] = final_obs
            else:  # not done, or its worker restarted (then there is no terminal_observation)
                info["TimeLimit.truncated"] = bool(truncated[i]) and not terminated[i]
                if dones[i]:
                    self.reset_infos[i] = {}
            infos.append(info)
        return self._sb3_obs(obs), rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        """Collects a pending step, closes the envs and stops the workers. Calling it again does
        nothing; any other call afterwards raises ``ClosedEnvironmentError``."""
        if self.closed:
            return
        if self.waiting:
            self.waiting = False
            try:
                self._vec.step_wait()
            except Exception:  # the pending step failed; the envs close all the same
                pass
        self._vec.close()
        self.closed = True

    def __del__(self):
        if not getattr(self, "closed", True):
            self._vec.close(terminate=True)

    # -- per-env calls ------------------------------------------------------------------------------

    def get_images(self) -> Sequence[Optional[np.ndarray]]:
        """Each env's ``render()``, in env order; with a ``render_mode`` other than
        ``"rgb_array"`` it warns and returns ``None`` for each, as SB3 does."""
        if self.render_mode != "rgb_array":
            warnings.warn(f"The render mode is {self.render_mode}, but this method assumes it is `rgb_array` "
                          "to obtain images.")
            return [None for _ in range(self.num_envs)]
        self._assert_open("get_images")
        return list(self._vec.render() or ())

    def has_attr(self, attr_name: str) -> bool:
        """Whether every env has attribute ``attr_name`` (``env.get_wrapper_attr``)."""
        return all(self._on(None, _has_attr(attr_name), "has_attr"))

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> List[Any]:
        """Attribute ``attr_name`` (``env.get_wrapper_attr``) of the envs ``indices`` (``None``:
        all; an int; or an iterable of ints in ``[-num_envs, num_envs)``), in that order.

        Raises:
            AttributeError: an env lacks the attribute.
            IndexError, TypeError: bad ``indices`` (checked before anything is sent).
        """
        return self._on(indices, _get_attr(attr_name), "get_attr")

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Sets attribute ``attr_name`` of the envs ``indices`` (see :meth:`get_attr`) to
        ``value``, with ``setattr`` on the outermost wrapper, as SB3 does."""
        self._on(indices, _set_attr(attr_name, value), "set_attr")

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> List[Any]:
        """Calls ``env.get_wrapper_attr(method_name)(*method_args, **method_kwargs)`` on the envs
        ``indices`` (see :meth:`get_attr`); returns their results in that order.

        Raises:
            The exception a method raised; IndexError, TypeError: bad ``indices``.
        """
        return self._on(indices, _env_method(method_name, method_args, method_kwargs), "env_method")

    def env_is_wrapped(self, wrapper_class: Type[gym.Wrapper], indices: VecEnvIndices = None) -> List[bool]:
        """Whether each env of ``indices`` (see :meth:`get_attr`) is wrapped in ``wrapper_class``."""
        return self._on(indices, _is_wrapped(wrapper_class), "env_is_wrapped")

    # -- helpers -----------------------------------------------------------------------------------

    def _assert_open(self, name: str) -> None:
        if self.closed:
            raise ClosedEnvironmentError(f"Trying to call `{name}` after the vec env was closed.")

    def _env_ids(self, indices: VecEnvIndices) -> List[int]:
        """``indices`` as a list of env ids in ``[0, num_envs)``; negative ones count from the
        end, as with SB3's (list-indexed) vector envs."""
        n = self.num_envs
        if indices is None:
            return list(range(n))
        if isinstance(indices, (int, np.integer)) and not isinstance(indices, (bool, np.bool_)):
            items: List[Any] = [indices]
        else:
            try:
                items = list(indices)  # type: ignore[arg-type]
            except TypeError:
                raise TypeError(f"indices must be None, an int or an iterable of ints, "
                                f"got {type(indices).__name__}") from None
        ids = []
        for k, i in enumerate(items):
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
                raise TypeError(f"indices[{k}] must be an int, got {type(i).__name__} {i!r}")
            if not -n <= i < n:
                raise IndexError(f"indices[{k}] = {i} is outside [-{n}, {n}) (num_envs={n})")
            ids.append(int(i) % n)
        return ids

    def _on(self, indices: VecEnvIndices, fn: Callable[[gym.Env], Any], name: str) -> List[Any]:
        """``fn(env)`` for the envs ``indices``, in that order. An env listed twice runs ``fn``
        twice: the k-th mention of every env runs in round k."""
        self._assert_open(name)
        ids = self._env_ids(indices)
        rounds: List[List[int]] = []  # positions in ids
        seen: Dict[int, int] = {}
        for pos, i in enumerate(ids):
            r = seen[i] = seen.get(i, -1) + 1
            if r == len(rounds):
                rounds.append([])
            rounds[r].append(pos)
        results: List[Any] = [None] * len(ids)
        for positions in rounds:
            for pos, result in zip(positions, self._vec._apply(fn, [ids[p] for p in positions])):
                results[pos] = result
        return results

    def _sb3_obs(self, obs: Any) -> VecEnvObs:
        """Gymnasium's batch of observations as SB3's ``_stack_obs`` makes it (they differ only
        for spaces whose Gymnasium batch is not an array, such as Text, batched as a tuple)."""
        space = self.observation_space
        if isinstance(space, spaces.Dict):
            return {key: _stacked(obs[key]) for key in space.spaces}
        if isinstance(space, spaces.Tuple):
            return tuple(_stacked(leaf) for leaf in obs)
        return _stacked(obs)

    def __repr__(self) -> str:
        return f"ringenv.sb3.SubprocVecEnv(num_envs={getattr(self, 'num_envs', '?')})"


def _stacked(batch: Any) -> np.ndarray:
    return batch if isinstance(batch, np.ndarray) else np.stack(list(batch))
