"""What a ``ringenv.ray`` actor builds: picklable recipes for the local pool of one block of envs,
made in the driver (where ids are resolved and bad arguments refused) and called in the actor.

The local pool's envs step on the CPUs Ray assigned the actor (``actor_options["num_cpus"]``), as a
local pool's default steps them on its machine's cores, the last block stepped by the actor
itself where the envs allow it; an actor of one CPU runs no worker process. The actor is the
isolation boundary there: an env that crashes it is an actor death.
"""

from __future__ import annotations

import copy as _copy
import functools
import os
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import gymnasium as gym

from ringenv._plan import plan_workers
from ringenv.registration import (VECTOR_OPTIONS, VectorEntryPoint, _make_one, _Repeated, _spec, builtin_env_ids,
                                  split_worker_id)
from ringenv.registration import make_vec as local_make_vec
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
    """The pool of ``num_envs`` envs of a resolved id: ``kind`` ``"rust"`` (``ringenv.make_vec`` of
    a built-in or of ``worker``'s env ``id``) or ``"spec"`` (``gymnasium.make`` of ``spec`` with
    ``wrappers``, in each worker)."""

    def __init__(self, kind: str, id: str, num_envs: int, vector_kwargs: Dict[str, Any], share: int, *,
                 kwargs: Optional[Dict[str, Any]] = None, worker: Optional[str] = None,
                 spec: Any = None, wrappers: Tuple[Any, ...] = ()):
        self.kind, self.id, self.num_envs, self.vector_kwargs, self.share = kind, id, num_envs, dict(vector_kwargs), share
        self.kwargs, self.worker, self.spec, self.wrappers = dict(kwargs or {}), worker, spec, tuple(wrappers)

    def __call__(self) -> AsyncVectorEnv:
        opts = _options(self.vector_kwargs, self.num_envs, self.share, can_inline=self.worker is None)
        if self.kind == "rust":
            return local_make_vec(self.id, self.num_envs, vector_kwargs=opts, worker=self.worker, **self.kwargs)
        env_fn = functools.partial(_make_one, self.spec, self.wrappers, {})
        envs = AsyncVectorEnv(_Repeated(env_fn, self.num_envs), **opts)
        envs.spec = self.spec
        return envs


def id_recipe(id: str, kwargs: Dict[str, Any], wrappers: Sequence[Any], prefer_builtin: bool,
              worker: Optional[str]) -> Callable[[int, Dict[str, Any], int], IdRecipe]:
    """Resolves ``id`` here, in the driver (the actors need not have registered it), and returns
    ``recipe(num_envs, vector_kwargs, share)``.

    Ids resolve as in :func:`ringenv.make_vec`: ``worker`` (or ``"PATH:ID"``) a Rust env of a worker
    binary (the path must exist on every node); a built-in Rust env id; an id registered with
    :func:`ringenv.register` (a Rust env's, or a Python env's Gymnasium spec); any other
    Gymnasium id, made with ``gymnasium.make`` in the workers.

    Raises:
        gymnasium.error.Error: an unknown id (Gymnasium's error).
        ValueError: wrappers with a Rust env.
    """
    kwargs, wrappers = dict(kwargs), tuple(wrappers or ())
    if worker is None:
        split = split_worker_id(id)
        if split is not None:
            worker, id = split
    rust: Optional[Tuple[str, Optional[str]]] = None
    spec = None
    registered_options: Dict[str, Any] = {}  # vector options among an id's registered kwargs
    if worker is not None:
        rust = (id, os.path.abspath(os.fspath(worker)))
    elif prefer_builtin and id in builtin_env_ids():
        rust = (id, None)
    else:
        # Gymnasium's error for an unknown id, before any actor starts; "module:Id" imports module here
        spec = _copy.deepcopy(_spec(id))
        entry = spec.vector_entry_point
        if isinstance(entry, VectorEntryPoint):  # registered by ringenv: its kwargs may hold vector options
            merged = {**spec.kwargs, **kwargs}
            registered_options = {k: v for k, v in merged.items() if k in VECTOR_OPTIONS}
            kwargs = {k: v for k, v in merged.items() if k not in VECTOR_OPTIONS}
            spec.kwargs = {}
        if isinstance(entry, VectorEntryPoint) and entry.rust_id is not None:
            rust = (entry.rust_id, entry.worker)
        elif spec.entry_point is None:
            raise ValueError(f"{id} has no entry_point: ringenv.ray makes each sub-env with gymnasium.make")
        else:
            spec.kwargs = {**spec.kwargs, **kwargs}
    if rust is not None and wrappers:
        raise ValueError(f"{id} is a Rust env; wrappers apply to Python envs only")

    def recipe(num_envs: int, vector_kwargs: Dict[str, Any], share: int) -> IdRecipe:
        vector_kwargs = {**registered_options, **vector_kwargs}
        if rust is not None:
            return IdRecipe("rust", rust[0], num_envs, vector_kwargs, share, kwargs=kwargs, worker=rust[1])
        return IdRecipe("spec", id, num_envs, vector_kwargs, share, spec=spec, wrappers=wrappers)

    return recipe
