"""What a ``ringenv.ray`` actor builds: picklable recipes for the local pool of one block of envs,
made in the driver (where ids are resolved and bad arguments refused) and called in the actor.

The local pool's envs step on the CPUs Ray assigned the actor (``actor_options["num_cpus"]``), as a
local pool's default steps them on its machine's cores, the last block stepped by the actor
itself where the envs allow it; an actor of one CPU runs no worker process. The actor is the
isolation boundary there: an env that crashes it is an actor death.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Dict, Optional, Sequence

import gymnasium as gym

from ringenv._plan import plan_workers
from ringenv.registration import ResolvedId, resolve_id
from ringenv.vector import AsyncVectorEnv

__all__ = ["EnvFnsRecipe", "IdRecipe", "id_recipe", "workers_here"]


def workers_here(num_envs: int, share: int) -> int:
    """The blocks of envs a block's pool steps at once by default: the CPUs Ray assigned this
    actor divided among its ``share`` blocks (at least 1, at most ``num_envs``); outside Ray, or
    for an actor with no CPUs assigned, this machine's cores."""
    cpus = 0.0
    try:
        import ray

        if ray.is_initialized():
            cpus = float(ray.get_runtime_context().get_assigned_resources().get("CPU", 0.0))
    except Exception:  # not in a Ray worker: this machine's cores
        cpus = 0.0
    if cpus <= 0:
        cpus = float(os.cpu_count() or 1)
    return max(1, min(num_envs, int(round(cpus / share))))


def _options(vector_kwargs: Dict[str, Any], num_envs: int, share: int, can_inline: bool) -> Dict[str, Any]:
    """The options of a block's pool: ``vector_kwargs`` with the worker plan of the module docs, a
    local pool's default plan (:func:`ringenv._plan.plan_workers`) on the actor's CPUs
    (``can_inline``: whether the actor process can step these envs itself).

    Raises:
        ValueError: ``inline=True`` for envs only a worker binary can run (plan_workers').
    """
    opts = dict(vector_kwargs)
    if opts.get("num_workers") is None:
        opts["num_workers"], opts["inline"] = plan_workers(
            num_envs, None, opts.get("inline"), "python" if can_inline else None, num_envs,
            opts.get("max_concurrency"), cores=workers_here(num_envs, share))
    else:
        opts["num_workers"] = min(int(opts["num_workers"]), num_envs)
    # Results are serialised into Ray's object store at once: views of the slot are enough, and
    # each env's own infos go to the driver, which vectorises them (env_infos()).
    opts["copy"] = False
    opts["vector_infos"] = False
    return opts


class EnvFnsRecipe:
    """The pool of ``env_fns`` (this block's factories) with ``vector_kwargs``, the actor's
    ``share``-th part of its CPUs."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], vector_kwargs: Dict[str, Any], share: int):
        self.env_fns, self.vector_kwargs, self.share = list(env_fns), dict(vector_kwargs), share

    def __call__(self) -> AsyncVectorEnv:
        return AsyncVectorEnv(self.env_fns, **_options(self.vector_kwargs, len(self.env_fns), self.share, True))


class IdRecipe:
    """The pool of ``num_envs`` envs of ``env``, an id resolved in the driver, with
    ``vector_kwargs``, the actor's ``share``-th part of its CPUs."""

    def __init__(self, env: ResolvedId, num_envs: int, vector_kwargs: Dict[str, Any], share: int):
        self.env, self.num_envs, self.vector_kwargs, self.share = env, num_envs, dict(vector_kwargs), share

    def __call__(self) -> AsyncVectorEnv:
        opts = _options({**self.env.vector_kwargs, **self.vector_kwargs}, self.num_envs, self.share,
                        can_inline=self.env.worker is None)
        return self.env.make(self.num_envs, opts)


def id_recipe(id: str, kwargs: Dict[str, Any], wrappers: Sequence[Any], prefer_builtin: bool,
              worker: Optional[str]) -> Callable[[int, Dict[str, Any], int], IdRecipe]:
    """Resolves ``id`` here, in the driver (the actors need not have registered it), as
    :func:`ringenv.make_vec` does (:func:`ringenv.registration.resolve_id`; a worker binary's
    path must exist on every node), and returns ``recipe(num_envs, vector_kwargs, share)``.

    Raises:
        gymnasium.error.Error: an unknown id (Gymnasium's error).
        ValueError: wrappers with a Rust env.
    """
    return functools.partial(IdRecipe, resolve_id(id, kwargs, wrappers, prefer_builtin=prefer_builtin, worker=worker))
