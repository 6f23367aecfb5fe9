"""``ringenv.make_vec``: the counterpart of ``gymnasium.make_vec``."""

from __future__ import annotations

import copy
import functools
from typing import Any, Optional

import gymnasium as gym

from ringenv import _native
from ringenv.vector import AsyncVectorEnv

__all__ = ["make_vec", "builtin_env_ids"]


def builtin_env_ids() -> list:
    """The ids of ringenv's built-in Rust envs (``["CartPole-v1", "BlocksWorld-v0"]``)."""
    return list(_native.builtin_env_ids())


def make_vec(id: str, num_envs: int = 1, vectorization_mode: Optional[str] = None,
             vector_kwargs: Optional[dict] = None, wrappers=None, *, prefer_builtin: bool = True,
             **kwargs: Any) -> AsyncVectorEnv:
    """Creates a vector env of ``num_envs`` copies of env ``id``.

    When ``id`` names a built-in Rust env (see :func:`builtin_env_ids`) and ``prefer_builtin`` is
    true, its Rust implementation runs in the workers (``kwargs`` go to its constructor; for
    ``BlocksWorld-v0``: ``num_blocks``). Otherwise each sub-env is ``gymnasium.make(id,
    **kwargs)`` with ``wrappers`` applied, as ``gymnasium.make_vec`` does.

    Args:
        id: the env id.
        num_envs: number of sub-envs.
        vectorization_mode: ``None`` or ``"async"`` (ringenv always uses worker processes).
        vector_kwargs: keyword arguments of :class:`ringenv.AsyncVectorEnv` (``num_workers``,
            ``copy``, ...).
        wrappers: a sequence of ``gymnasium.Wrapper`` classes applied to each Python sub-env
            (not allowed with a built-in Rust env).

    Raises:
        ValueError: an unsupported ``vectorization_mode``, wrappers with a built-in env, or bad
            built-in env arguments (named).
        gymnasium.error.Error: what ``gymnasium.make`` raises for an unknown id.
    """
    if vectorization_mode not in (None, "async"):
        raise ValueError(f"vectorization_mode must be None or 'async', got {vectorization_mode!r}")
    vector_kwargs = dict(vector_kwargs or {})
    if prefer_builtin and id in builtin_env_ids():
        if wrappers:
            raise ValueError(f"{id} is a built-in Rust env; wrappers apply to Python envs only "
                             "(pass prefer_builtin=False to use the Gymnasium env)")
        return AsyncVectorEnv._from_builtin(id, num_envs, kwargs, **vector_kwargs)
    env_spec = copy.deepcopy(gym.spec(id))  # gymnasium's own error for an unknown id, before any process starts
    env_spec.kwargs = {**env_spec.kwargs, **kwargs}
    env_fn = functools.partial(_make_one, id, tuple(wrappers or ()), kwargs)
    envs = AsyncVectorEnv([env_fn] * num_envs, **vector_kwargs)
    envs.spec = env_spec  # as gymnasium.make_vec records the spec of its sub-envs
    return envs


def _make_one(id: str, wrappers, kwargs):
    env = gym.make(id, **kwargs)
    for w in wrappers:
        env = w(env)
    return env
