"""``ringenv.ray``: ringenv pools on a Ray cluster, for envs that need more cores than one machine
has (install the extra: ``pip install ringenv[ray]``; ``import ringenv`` never imports Ray).

:func:`make_vec` returns a Gymnasium ``VectorEnv`` whose sub-envs live in Ray actors, one per node
by default, each hosting an ordinary local ringenv pool. ``reset`` and ``step`` make one call per
actor, all at once, and concatenate the results in env order: bit-identical to a local
:class:`ringenv.AsyncVectorEnv` of the same envs and seeds.
``async_reset`` / ``send`` / ``recv`` (``batch_size < num_envs``) take whichever actors' blocks
finish first, with two calls in flight per actor. See docs/RAY.md for the cost model and faults.

>>> import ray, ringenv.ray
>>> _ = ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # or address="auto"
>>> envs = ringenv.ray.make_vec("CartPole-v1", 8, num_actors=2)
>>> obs, infos = envs.reset(seed=0)
>>> obs.shape, [info["env_ids"] for info in envs.actor_info]
((8, 4), [(0, 1, 2, 3), (4, 5, 6, 7)])
>>> envs.close(); ray.shutdown()
"""

from __future__ import annotations

import difflib
import os
from typing import Any, Callable, Dict, Optional, Sequence, Union

import ray

from ringenv.errors import ActorDiedError
from ringenv.ray._build import EnvFnsRecipe, id_recipe
from ringenv.ray.vector import RESTARTED, RayVectorEnv
from ringenv._checks import check_count, check_options, check_seconds
from ringenv.registration import VECTOR_OPTIONS

__all__ = ["make_vec", "RayVectorEnv", "ActorDiedError", "RESTARTED"]

#: ``vector_kwargs`` that belong to the Ray vector env as a whole, not to each actor's pool.
_DRIVER_ONLY = ("batch_size", "deterministic")


def _check_vector_kwargs(vector_kwargs: Dict[str, Any], num_envs: int) -> None:
    """Refuses what each actor's :class:`ringenv.AsyncVectorEnv` would refuse in its options, with the
    local pool's own checks (``num_workers`` against the whole ``num_envs``), before any actor starts.

    Raises:
        TypeError: an option ``AsyncVectorEnv`` does not take, or of the wrong type (named).
        ValueError: a value out of range (named).
    """
    for name in vector_kwargs:
        if name not in VECTOR_OPTIONS:
            close = difflib.get_close_matches(str(name), sorted(VECTOR_OPTIONS), n=1)
            raise TypeError(f"vector_kwargs[{name!r}]: ringenv.AsyncVectorEnv takes no option {name!r}"
                            + (f" (did you mean {close[0]!r}?)" if close else ""))
    get = vector_kwargs.get
    try:
        check_options(num_envs, get("num_workers"), None, get("max_concurrency"), get("startup_timeout", 60.0),
                      get("max_restarts", 3), get("restart_window", 60.0), get("spin_us"), get("inline"))
    except (TypeError, ValueError) as e:
        raise type(e)(f"vector_kwargs: {e}") from None


def _alive_nodes() -> int:
    return max(1, sum(1 for n in ray.nodes() if n.get("Alive")))


def make_vec(id_or_env_fns: Union[str, Sequence[Callable[[], Any]]], num_envs: Optional[int] = None, *,
             num_actors: Optional[int] = None, blocks_per_actor: Optional[int] = None,
             actor_options: Optional[Dict[str, Any]] = None, vector_kwargs: Optional[Dict[str, Any]] = None,
             batch_size: Optional[int] = None, deterministic: bool = False,
             on_actor_failure: Optional[str] = None, max_actor_restarts: int = 3, wrappers: Optional[Sequence[Any]] = None,
             prefer_builtin: bool = True, worker: Optional[Union[str, "os.PathLike[str]"]] = None,
             **kwargs: Any) -> RayVectorEnv:
    """A vector env of ``num_envs`` sub-envs stepped by ringenv pools inside Ray actors.

    Env ``i`` of the whole vector env is env ``i - start`` of the actor whose ``[start, stop)``
    range holds it (contiguous ranges, split as ``numpy.array_split``); ``reset(seed=s)`` gives
    it seed ``s + i``, as a local vector env would. Connects to Ray with ``ray.init()`` if this
    process has not (a local cluster); ringenv must be importable on every node.

    Args:
        id_or_env_fns: an env id, resolved here as :func:`ringenv.make_vec` resolves it (a
            built-in Rust env, ``PATH:ID`` or ``worker`` for a worker binary, an id registered with
            :func:`ringenv.register`, any Gymnasium id; ``kwargs`` reach the env), or a sequence of
            env factories (``num_envs`` is then their count), cloudpickled to the actors.
        num_envs: number of sub-envs.
        num_actors: Ray actors (default: the cluster's alive nodes, at most ``num_envs``).
        blocks_per_actor: local pools per actor, each a block of envs one call carries (default 1;
            2 when ``batch_size < num_envs``, so that two calls are in flight per actor).
        actor_options: Ray actor options (``ray.remote(...).options``), on top of
            ``{"num_cpus": 1, "scheduling_strategy": "SPREAD"}``; give each actor the cores of its
            node (``num_cpus=16``): its pools step that many blocks of envs at once.
        vector_kwargs: options of each actor's :class:`ringenv.AsyncVectorEnv` (``num_workers``,
            ``on_worker_failure``, ``startup_timeout``, ``autoreset_mode``, ``spin_us``, ...).
            ``vector_infos`` applies to the whole vector env; ``copy`` is ignored (results are
            always new arrays). ``device`` may only be ``"cpu"``: results are NumPy arrays, which
            the learner moves to its GPU (``torch.as_tensor(obs).to(device, non_blocking=True)``).
        batch_size: envs per :meth:`~RayVectorEnv.recv` (default ``num_envs``); below it, a
            multiple of the block size ``num_envs / (num_actors * blocks_per_actor)``.
        deterministic: :meth:`~RayVectorEnv.recv` returns blocks in the order they were sent.
        on_actor_failure: ``"raise"``: a dead actor raises :class:`ringenv.errors.ActorDiedError`
            and closes the vector env; ``"restart"``: Ray recreates it (``max_restarts`` =
            ``max_actor_restarts``), its envs are reset and the step reports them truncated with
            ``infos["actor_restarted"]``. Default: ``vector_kwargs["on_worker_failure"]``, else
            ``"raise"``.
        max_actor_restarts: restarts Ray grants each actor under ``"restart"``.
        wrappers: as :func:`ringenv.make_vec` (for an id), as are ``prefer_builtin``,
            ``worker`` and ``kwargs``.

    Raises:
        TypeError, ValueError: a bad count, option, device or combination (named), before any
            actor starts (``vector_kwargs`` with the local pool's checks);
            ``gymnasium.error.Error`` for an unknown id.
        multiprocessing.TimeoutError: the actors did not start within ``startup_timeout``.
        ringenv.errors.WorkerStartupError: an actor could not build its envs: a factory raised
            there, or the factories' module cannot be imported on its node (``worker``: the actor's
            index; ``__cause__``: the factory's exception). Every actor is stopped.
    """
    vector_kwargs = dict(vector_kwargs or {})
    actor_options = dict(actor_options or {})
    for name in _DRIVER_ONLY:
        if name in vector_kwargs:
            raise ValueError(f"vector_kwargs[{name!r}]: pass {name} to ringenv.ray.make_vec itself")
    device = vector_kwargs.pop("device", None)
    if device is not None and str(device) != "cpu":
        raise ValueError(f"vector_kwargs['device']={device!r}: ringenv.ray returns NumPy batches; move them to the "
                         "learner's device there (torch.as_tensor(obs).to(device, non_blocking=True))")
    vector_kwargs.pop("copy", None)
    vector_infos = bool(vector_kwargs.pop("vector_infos", True))
    startup_timeout = check_seconds("startup_timeout", vector_kwargs.get("startup_timeout", 60.0))
    assert startup_timeout is not None
    if on_actor_failure is None:
        on_actor_failure = vector_kwargs.get("on_worker_failure", "raise")
    if on_actor_failure not in ("raise", "restart"):
        raise ValueError(f"on_actor_failure must be 'raise' or 'restart', got {on_actor_failure!r}")
    max_actor_restarts = check_count("max_actor_restarts", max_actor_restarts, 0)
    if isinstance(id_or_env_fns, str):
        if num_envs is None:
            num_envs = 1
        num_envs = check_count("num_envs", num_envs)
        resolved = id_recipe(id_or_env_fns, kwargs, wrappers or (), prefer_builtin,
                             None if worker is None else os.fspath(worker))

        def recipe(a: int, b: int, vkw: Dict[str, Any], share: int) -> Callable[[], Any]:
            return resolved(b - a, vkw, share)
    else:
        if kwargs or wrappers or worker is not None:
            raise ValueError("env arguments, wrappers and worker apply to an env id, not to env factories")
        env_fns = list(id_or_env_fns)
        if not env_fns or not all(callable(f) for f in env_fns):
            raise ValueError("id_or_env_fns must be an env id or a non-empty sequence of env factories")
        if num_envs is not None and check_count("num_envs", num_envs) != len(env_fns):
            raise ValueError(f"num_envs={num_envs} but {len(env_fns)} env factories were given")
        num_envs = len(env_fns)

        def recipe(a: int, b: int, vkw: Dict[str, Any], share: int) -> Callable[[], Any]:
            return EnvFnsRecipe(env_fns[a:b], vkw, share)
    _check_vector_kwargs(vector_kwargs, num_envs)
    batch_size = num_envs if batch_size is None else check_count("batch_size", batch_size, 1, num_envs, "num_envs")
    if blocks_per_actor is None:
        blocks_per_actor = 2 if batch_size < num_envs else 1
    blocks_per_actor = check_count("blocks_per_actor", blocks_per_actor, 1)
    if not ray.is_initialized():
        ray.init()
    if num_actors is None:
        num_actors = max(1, min(_alive_nodes(), num_envs // blocks_per_actor))
    num_actors = check_count("num_actors", num_actors, 1, num_envs, "num_envs")
    blocks = num_actors * blocks_per_actor
    if blocks > num_envs:
        raise ValueError(f"num_actors ({num_actors}) x blocks_per_actor ({blocks_per_actor}) = {blocks} blocks, "
                         f"more than num_envs ({num_envs})")
    if batch_size < num_envs:
        if num_envs % blocks:
            raise ValueError(f"batch_size < num_envs needs equal blocks: num_envs ({num_envs}) is not a multiple of "
                             f"num_actors x blocks_per_actor ({blocks})")
        if batch_size % (num_envs // blocks):
            raise ValueError(f"batch_size ({batch_size}) must be a multiple of the envs per block (num_envs "
                             f"{num_envs} / {blocks} blocks = {num_envs // blocks}): a batch is whole blocks")
    return RayVectorEnv(recipe, num_envs, num_actors=num_actors, blocks_per_actor=blocks_per_actor,
                        batch_size=batch_size, vector_kwargs=vector_kwargs, actor_options=actor_options,
                        on_actor_failure=on_actor_failure, max_actor_restarts=max_actor_restarts,
                        deterministic=deterministic, vector_infos=vector_infos, startup_timeout=startup_timeout)
