"""``ringenv.ray.RayVectorEnv``: a Gymnasium ``VectorEnv`` whose sub-envs live in Ray actors, each
hosting ordinary local ringenv pools on its node (see :mod:`ringenv.ray` and docs/RAY.md).

The envs are split into contiguous *blocks*, ``blocks_per_actor`` per actor (1 for synchronous
stepping, 2 by default with asynchronous batches). ``reset``/``step`` make one call per actor
carrying all its blocks, all actors at once, and concatenate the results in env order.
``async_reset``/``send``/``recv`` make one call per block and ``recv`` takes the first blocks to
finish (``ray.wait``); with two blocks per actor, two calls are in flight per actor (those are in
:mod:`ringenv.ray._batches`).
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy as np
import ray
from gymnasium import logger, spaces
from gymnasium.error import ClosedEnvironmentError
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from ringenv._checks import reset_mask_of, seeds_of
from ringenv._layout import FLAT_SPACES
from ringenv._infos import add_batch_infos, add_infos
from ringenv._not_copyable import NotCopyable
from ringenv._protocol import AsyncState, closed_error, no_call_error, pending_error
from ringenv._staging import host_actions
from ringenv.errors import (ActorDiedError, RemoteTraceback, WorkerDiedError, WorkerStartupError, _env_ids_text,
                            _merged)
from ringenv.ray._actor import PoolActor, StartupFailure
from ringenv.ray._batches import BlockBatchesMixin, _RestartPending, take
from ringenv.ray._closed_meanwhile import closed_meanwhile

__all__ = ["RayVectorEnv"]

#: Keys of each env's info dict that ringenv.ray adds: the env's actor was restarted.
RESTARTED = "actor_restarted"


def _concat(space: spaces.Space, parts: List[Any]) -> Any:
    """Batches of ``space`` (one per block, in env order) as one batch: leaf arrays concatenated
    along the first axis (a new array the caller owns); other spaces env by env."""
    if isinstance(space, spaces.Dict):
        return {k: _concat(s, [p[k] for p in parts]) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_concat(s, [p[i] for p in parts]) for i, s in enumerate(space.spaces))
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.concatenate(parts)
    items = [x for p in parts for x in p]
    return concatenate(space, items, create_empty_array(space, n=len(items), fn=np.zeros))  # type: ignore[arg-type]


def _unwrap(error: "ray.exceptions.RayTaskError") -> BaseException:
    """The exception an actor's method raised (Ray's ``cause``), with the actor's traceback as its
    ``__cause__`` when it carries none of its own (an env's exception carries its worker's)."""
    cause = error.cause if isinstance(error.cause, BaseException) else error
    if cause is not error and cause.__cause__ is None:
        cause.__cause__ = RemoteTraceback(str(error))
    return cause


def _is_env_error(error: BaseException) -> bool:
    """Whether ``error`` is an env's own exception, rebuilt by the actor's local pool (which gives
    it ``remote_traceback``), not a failure of a worker, an actor or the runtime."""
    return hasattr(error, "remote_traceback") and not isinstance(error, (WorkerDiedError, WorkerStartupError))


def _ray_session() -> Optional[Tuple[str, str]]:
    """``(job id, node id)`` of this process's Ray connection, ``None`` without one: a driver's
    actors end with its job (``ray.shutdown()``), and a Ray started again is a new job (the same
    job id on a new local cluster, whose node id is new)."""
    if not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    return context.get_job_id(), context.get_node_id()


class RayVectorEnv(NotCopyable, BlockBatchesMixin, VectorEnv):
    """A vector env of ``num_envs`` sub-envs stepped in Ray actors. Made by
    :func:`ringenv.ray.make_vec`, whose docstring gives the arguments.

    Attributes:
        num_envs, num_actors, blocks_per_actor, batch_size, deterministic: as made.
        actor_info: one dict per actor: ``pid``, ``node_id``, ``node_ip``, ``env_ids`` (the tuple
            of its env indices), ``num_workers`` (per block) and ``actor_id``.
    """

    def __init__(self, recipe: Callable[[int, int, Dict[str, Any], int], Callable[[], Any]], num_envs: int, *,
                 num_actors: int, blocks_per_actor: int, batch_size: int, vector_kwargs: Dict[str, Any],
                 actor_options: Dict[str, Any], on_actor_failure: str, max_actor_restarts: int,
                 deterministic: bool, vector_infos: bool, startup_timeout: float):
        self.closed = True
        self.num_envs, self.num_actors, self.blocks_per_actor = num_envs, num_actors, blocks_per_actor
        self.batch_size, self.deterministic = batch_size, deterministic
        self._restart = on_actor_failure == "restart"
        self._vector_infos, self._timeout = vector_infos, startup_timeout
        nb = num_actors * blocks_per_actor
        base, extra = divmod(num_envs, nb)
        self._blocks: List[Tuple[int, int]] = []
        start = 0
        for b in range(nb):
            stop = start + base + (1 if b < extra else 0)
            self._blocks.append((start, stop))
            start = stop
        options = {"num_cpus": 1, "scheduling_strategy": "SPREAD", **actor_options,
                   "max_restarts": max_actor_restarts if self._restart else 0, "max_task_retries": 0,
                   "max_concurrency": blocks_per_actor + 1}
        remote = ray.remote(PoolActor)
        #: The Ray connection the actors belong to (:func:`_ray_session`).
        self._session = _ray_session()
        self._actors: List[Any] = []
        self.actor_info: List[Dict[str, Any]] = []
        # Each block's recipe is pickled here and unpickled in its actor, where a factory's module
        # that the node cannot import is a startup failure naming it (not Ray's bare actor death).
        payloads = [[(a, b, ray.cloudpickle.dumps(recipe(a, b, vector_kwargs, blocks_per_actor)))
                     for a, b in self._blocks[k * blocks_per_actor:(k + 1) * blocks_per_actor]]
                    for k in range(num_actors)]
        k = 0
        try:
            for blocks in payloads:
                self._actors.append(remote.options(**options).remote(blocks))
            refs = [a.describe.remote() for a in self._actors]
            deadline = time.monotonic() + startup_timeout
            described = []
            for k, ref in enumerate(refs):  # in actor order: the error names the actor
                described.append(ray.get(ref, timeout=max(0.0, deadline - time.monotonic())))
        except BaseException as e:
            self._kill_all()
            if isinstance(e, ray.exceptions.RayTaskError):
                cause = self._actor_error(e, k)
                raise cause from cause.__cause__
            if isinstance(e, ray.exceptions.GetTimeoutError):
                raise multiprocessing.TimeoutError(
                    f"the {num_actors} ringenv.ray actors did not start within startup_timeout={startup_timeout} s "
                    "(does the cluster have the CPUs actor_options ask for?)") from None
            raise
        for k, (actor, d) in enumerate(zip(self._actors, described)):
            self._describe(k, d)
        self._incarnations = [d["incarnation"] for d in described]
        first = described[0]
        self.single_observation_space = first["single_observation_space"]
        self.single_action_space = first["single_action_space"]
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.metadata = dict(first["metadata"])
        self.render_mode = first["render_mode"]
        self.spec = first["spec"]
        self.closed = False
        self._state = AsyncState.DEFAULT
        self._pending: List[Tuple[Any, int, List[int], str, Any]] = []  # (ref, actor, blocks, kind, args)
        self._inflight: Dict[Any, Tuple[int, str, Any]] = {}  # ref -> (block, kind, args), in send order
        self._received: Dict[int, Tuple[Any, ...]] = {}  # block -> results in, not yet returned by recv
        self._busy = [False] * nb
        self._needs_reset: Set[int] = set()
        self._last_obs: List[Any] = [None] * nb
        self._env_infos: Dict[int, Dict[str, Any]] = {}

    # -- actors ---------------------------------------------------------------------------------

    def _describe(self, k: int, d: Dict[str, Any]) -> None:
        a = self._blocks[k * self.blocks_per_actor][0]
        b = self._blocks[(k + 1) * self.blocks_per_actor - 1][1]
        info = {"pid": d["pid"], "node_id": d["node_id"], "node_ip": d["node_ip"], "env_ids": tuple(range(a, b)),
                "num_workers": d["num_workers"], "actor_id": d["actor_id"]}
        if k < len(self.actor_info):
            self.actor_info[k] = info
        else:
            self.actor_info.append(info)

    def _died(self, k: int, error: BaseException, what: str) -> ActorDiedError:
        info = self.actor_info[k]
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return ActorDiedError(
            f"ringenv.ray actor {k} (pid {info['pid']} on node {info['node_id'][:12]} at {info['node_ip']}, "
            f"envs {_env_ids_text(info['env_ids'])}) {what}: {first}",
            worker=k, pid=info["pid"], env_ids=info["env_ids"], actor_id=info["actor_id"],
            node_id=info["node_id"], node_ip=info["node_ip"])

    def _actor_error(self, error: "ray.exceptions.RayTaskError", k: int) -> BaseException:
        """The exception to raise for ``error``, raised by a method of actor ``k``: a block's pool
        that could not be built as :class:`WorkerStartupError` naming the actor and the global env
        ids (``worker``: the actor's index; ``__cause__``: the factory's exception, or the failed
        import's); a local worker's death (:class:`WorkerDiedError`, env ids already global) with
        the actor named in its message; anything else as itself (:func:`_unwrap`)."""
        failure = error.cause
        if isinstance(failure, StartupFailure):
            inner, block_ids = failure.error, tuple(failure.env_ids)
            a0 = self._blocks[k * self.blocks_per_actor][0]
            b0 = self._blocks[(k + 1) * self.blocks_per_actor - 1][1]
            actor_ids = tuple(range(a0, b0))
            block = "" if block_ids == actor_ids else f"envs {_env_ids_text(block_ids)}: "
            if isinstance(inner, WorkerStartupError):
                what, env_ids, remote_type, tb = str(inner), inner.env_ids, inner.remote_type, inner.remote_traceback
            else:
                what, env_ids, remote_type, tb = (f"{block}{type(inner).__name__}: {inner}", block_ids,
                                                  type(inner).__name__, failure.traceback)
            if failure.unpickling:
                what = (f"{block}the env factories could not be unpickled there: {type(inner).__name__}: {inner} "
                        "(the modules of env factories must be importable on every node of the Ray cluster: "
                        "install them there, or ship them with a runtime_env, e.g. "
                        "ray.init(runtime_env={'py_modules': [module]}))")
            startup = WorkerStartupError(f"ringenv.ray actor {k} (envs {_env_ids_text(actor_ids)}) failed to start: "
                                         f"{what}", worker=k, env_ids=tuple(env_ids), remote_type=remote_type,
                                         remote_traceback=tb)
            startup.__cause__ = failure.cause if failure.cause is not None else inner
            return startup
        cause = _unwrap(error)
        if (isinstance(cause, WorkerDiedError) and not isinstance(cause, ActorDiedError) and len(cause.args) == 1
                and k < len(self.actor_info)):
            info = self.actor_info[k]
            cause.args = (f"ringenv.ray actor {k} (pid {info['pid']} on node {info['node_id'][:12]} at "
                          f"{info['node_ip']}): {cause.args[0]}",)
        return cause

    def _fail(self, error: BaseException) -> BaseException:
        """Closes the vector env (every actor stopped) and returns ``error`` to raise."""
        if not self.closed:  # this call's own close (closed_meanwhile), unless another thread's came first
            self._closing_thread = threading.get_ident()
        self._kill_all()
        self.closed = True
        self._state = AsyncState.DEFAULT
        self._pending, self._inflight, self._received = [], {}, {}
        return error

    def _kill_all(self) -> None:
        """Kills every actor (no restart)."""
        actors, self._actors = getattr(self, "_actors", []), []
        if not self._ray_is_ours():  # ray.shutdown(): the actors went with Ray (ray.kill would start a new Ray)
            return
        for a in actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # already gone
                pass

    def _get(self, ref: Any, k: int, recover: bool = True) -> Any:
        """The result of ``ref``, a call of actor ``k``: the env's exception re-raised as itself,
        a local worker death closing everything, a dead actor as :class:`ActorDiedError` (``None``
        returned instead under ``on_actor_failure="restart"`` when ``recover``: the caller
        recovers)."""
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as e:
            cause = self._actor_error(e, k)
            if isinstance(cause, (WorkerDiedError, WorkerStartupError)):
                self._fail(cause)
            raise cause from cause.__cause__
        except ray.exceptions.RayActorError as e:
            if not (self._restart and recover):
                raise self._fail(self._died(k, e, "died")) from None
            return None

    def _env_error(self, ref: Any, k: int) -> Optional[BaseException]:
        """The exception an env raised in ``ref``, a finished call of actor ``k`` (its env ids
        global), or ``None``: the call returned, or failed otherwise (a dead actor or worker,
        which the next call finds as it would have without this look)."""
        try:
            ray.get(ref, timeout=0)
        except ray.exceptions.RayTaskError as e:
            cause = self._actor_error(e, k)
            return cause if _is_env_error(cause) else None
        except Exception:
            return None
        return None

    @staticmethod
    def _with_notes(error: BaseException, others: Sequence[Optional[BaseException]]) -> BaseException:
        """``error``, raised by a call, with the errors of the envs of ``others`` (the other calls'
        :meth:`_env_error`) as notes (:func:`ringenv.errors._merged`) when it is an env's error
        too; as it is otherwise."""
        found = [o for o in others if o is not None]
        return _merged([error, *found]) if found and _is_env_error(error) else error

    def _recover(self, k: int, blocks: List[int], kind: str, args: Any,
                 deadline: Optional[float] = None) -> List[Tuple[Any, ...]]:
        """Actor ``k`` died running ``kind`` on ``blocks`` and Ray restarts it: every block of it
        must be reset. A failed reset is made again with its seeds; a failed step resets its
        envs (no seed) and reports them truncated. Returns one step result per block, with
        ``actor_restarted`` set in each env's info.

        Raises:
            ActorDiedError: the actor could not be restarted (Ray's ``max_restarts`` used up, or
                it did not come back within ``startup_timeout``).
            _RestartPending: ``deadline`` (the caller's, ``time.monotonic()``) came first.
        """
        base = k * self.blocks_per_actor
        logger.warn(f"ringenv.ray actor {k} (envs {_env_ids_text(self.actor_info[k]['env_ids'])}) died and is "
                    "restarted; its envs are reset")
        if kind == "reset":
            seeds, options = args
        else:
            seeds = [[None] * (self._blocks[b][1] - self._blocks[b][0]) for b in blocks]
            options = [None] * len(blocks)
        recovery = {"k": k, "blocks": blocks, "kind": kind, "local": [b - base for b in blocks], "seeds": seeds,
                    "options": options, "ref": None, "deadline": time.monotonic() + self._timeout}
        return self._await_recovery(recovery, deadline)

    def _await_recovery(self, recovery: Dict[str, Any], deadline: Optional[float]) -> List[Tuple[Any, ...]]:
        """Waits for the reset of a restarted actor (:meth:`_recover`'s ``recovery``: its blocks,
        the reset in flight, ``startup_timeout``'s deadline), asking again while Ray reports the
        actor still restarting; then its results as :meth:`_recover` returns them."""
        k, blocks = recovery["k"], recovery["blocks"]
        actor = self._actors[k]
        base = k * self.blocks_per_actor
        try:
            while True:
                self._recovery_ref(recovery)
                until = recovery["deadline"] if deadline is None else min(recovery["deadline"], deadline)
                try:
                    parts = ray.get(recovery["ref"], timeout=max(0.0, until - time.monotonic()))
                    described = ray.get(actor.describe.remote(),
                                        timeout=max(0.0, recovery["deadline"] - time.monotonic()))
                    break
                except ray.exceptions.ActorUnavailableError:  # still restarting: ask again (a reset may repeat)
                    recovery["ref"] = None
                    if time.monotonic() >= recovery["deadline"]:
                        raise
                    if deadline is not None and time.monotonic() >= deadline:
                        raise _RestartPending(recovery) from None
                    time.sleep(0.05)
                except ray.exceptions.GetTimeoutError:
                    if deadline is not None and deadline < recovery["deadline"]:  # the caller's came first
                        raise _RestartPending(recovery) from None
                    raise
        except ray.exceptions.RayTaskError as e:
            cause = self._fail(self._actor_error(e, k))
            raise cause from cause.__cause__
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as e:
            raise self._fail(self._died(k, e, "died and could not be restarted")) from None
        if described["incarnation"] != self._incarnations[k]:
            # A new actor: its other blocks' pools are new too, reset on their next call. (Another
            # failed call of the same death finds the incarnation known and resets only its block.)
            self._incarnations[k] = described["incarnation"]
            self._needs_reset.update(set(range(base, base + self.blocks_per_actor)) - set(blocks))
        self._needs_reset.difference_update(blocks)  # reset just now
        self._describe(k, described)
        out = []
        for b, (obs, infos) in zip(blocks, parts):
            n = self._blocks[b][1] - self._blocks[b][0]
            for i in range(*self._blocks[b]):
                infos[i] = {**infos.get(i, {}), RESTARTED: True}
            truncated = np.full(n, recovery["kind"] != "reset", dtype=np.bool_)
            out.append((obs, np.zeros(n), np.zeros(n, dtype=np.bool_), truncated, infos))
        return out

    def _recovery_ref(self, recovery: Dict[str, Any]) -> Any:
        """The ref of the reset of a restarted actor that :meth:`_await_recovery` awaits
        (``recovery["ref"]``), sent now when there is none (the actor was still unavailable)."""
        if recovery["ref"] is None:
            recovery["ref"] = self._actors[recovery["k"]].reset.remote(recovery["local"], recovery["seeds"],
                                                                       recovery["options"])
        return recovery["ref"]

    def _submit(self, k: int, blocks: List[int], kind: str, args: Any) -> Tuple[Any, str, Any]:
        """Sends one call to actor ``k`` for its ``blocks``: ``kind`` ``"reset"`` (``args``: seeds
        and options per block) or ``"step"`` (``args``: actions per block); a step of blocks whose
        actor was restarted becomes a ``"restart"`` reset."""
        base = k * self.blocks_per_actor
        local = [b - base for b in blocks]
        if kind == "step" and any(b in self._needs_reset for b in blocks):
            kind = "restart"
            args = ([[None] * (self._blocks[b][1] - self._blocks[b][0]) for b in blocks], [None] * len(blocks))
        if kind == "step":
            return self._actors[k].step.remote(local, args), kind, args
        self._needs_reset.difference_update(blocks)
        return self._actors[k].reset.remote(local, args[0], args[1]), kind, args

    def _results(self, ref: Any, k: int, blocks: List[int], kind: str, args: Any,
                 got: Any = None, deadline: Optional[float] = None) -> List[Tuple[Any, ...]]:
        """Step-shaped results ``(obs, rewards, terminated, truncated, infos)`` per block of a
        finished call (``got``: its value, when already fetched; reset results get zero rewards,
        no terminations; a ``"restart"`` reports its envs truncated; ``deadline``: the caller's,
        for the wait on a restarted actor, :meth:`_recover`)."""
        if got is None:
            got = self._get(ref, k)
        if got is None:
            return self._recover(k, blocks, "reset" if kind == "reset" else "step", args, deadline)
        if kind == "step":
            return list(got)
        out = []
        for b, (obs, infos) in zip(blocks, got):
            n = self._blocks[b][1] - self._blocks[b][0]
            if kind == "restart":
                for i in range(*self._blocks[b]):
                    infos[i] = {**infos.get(i, {}), RESTARTED: True}
            out.append((obs, np.zeros(n), np.zeros(n, dtype=np.bool_), np.full(n, kind == "restart"), infos))
        return out

    # -- protocol -------------------------------------------------------------------------------

    def _assert_open(self, name: str) -> None:
        """Raises ``ClosedEnvironmentError`` when the vector env is closed, or when Ray was shut down
        (``ray.shutdown()``) while it was open: its actors went with Ray, so it is closed then (a
        call to an actor would start a new local Ray instead)."""
        if self.closed:
            raise closed_error(name)
        if not self._ray_is_ours():
            again = " (Ray was started again since: its actors do not exist there)" if ray.is_initialized() else ""
            raise self._fail(ClosedEnvironmentError(
                f"Trying to call `{name}` after Ray was shut down (ray.shutdown()) while the ringenv.ray vector "
                f"env was open{again}: its {self.num_actors} actors went with Ray, and the vector env is now closed."))

    def _ray_is_ours(self) -> bool:
        """Whether Ray is connected, and to the job its actors were made in (not shut down since,
        nor started again: a driver's actors end with its job)."""
        return ray.is_initialized() and _ray_session() == getattr(self, "_session", None)

    def _assert_default(self, name: str) -> None:
        self._assert_open(name)
        if self._state != AsyncState.DEFAULT or self._inflight or self._received:
            raise pending_error(self._state, name, len(self._inflight) + len(self._received), "blocks")

    def _seed_list(self, seed: Optional[Union[int, Sequence[Optional[int]]]]) -> List[Optional[int]]:
        """One seed per env by the rule of :class:`ringenv.AsyncVectorEnv`, over the whole vector
        env (:func:`ringenv._checks.seeds_of`): checked here, so a bad one names its env's index in
        this vector env and no actor is sent anything.

        Raises:
            ringenv.errors.SeedError: as :func:`ringenv._checks.seeds_of` (a Rust env's seed of
                ``2**64`` or more is refused by its actor's pool, naming the env within its block).
        """
        return seeds_of(seed, self.num_envs)

    def _block_options(self, options: Optional[dict]) -> List[Optional[dict]]:
        """``options`` for each block: a ``reset_mask`` (bool array of shape ``(num_envs,)``, checked
        by :func:`ringenv._checks.reset_mask_of`) is cut into the blocks' rows; a block with no env
        to reset gets ``None`` and is skipped."""
        if options is None:
            return [None] * len(self._blocks)
        options = dict(options)
        mask = reset_mask_of(options, self.num_envs)  # (popped from the copy)
        if mask is None:
            return [dict(options) for _ in self._blocks]
        return [{**options, "reset_mask": mask[a:b].copy()} if mask[a:b].any() else None for a, b in self._blocks]

    @closed_meanwhile
    def reset_async(self, seed: Optional[Union[int, Sequence[Optional[int]]]] = None,
                    options: Optional[dict] = None) -> None:
        """Sends a reset to every actor: env ``i`` of the whole vector env gets ``seed + i`` (an
        int), ``seed[i]`` (a list of ``num_envs``), or no seed, exactly as in a local
        :class:`ringenv.AsyncVectorEnv`. ``options["reset_mask"]`` resets only the envs it marks.

        Raises:
            AlreadyPendingCallError: a call is already pending.
            ClosedEnvironmentError: the vector env is closed.
            ValueError: bad seeds or mask (TypeError: a mask that is not a bool NumPy array).
        """
        self._assert_default("reset_async")
        seeds = self._seed_list(seed)
        per_block = self._block_options(options)
        masked = options is not None and "reset_mask" in options
        if masked and any(o is None for o in per_block) and any(o is None for o in self._last_obs):
            raise ValueError("options['reset_mask'] before the first full reset")
        self._pending = []
        for k in range(self.num_actors):
            blocks = [b for b in self._actor_blocks(k) if not (masked and per_block[b] is None)]
            if not blocks:
                continue
            args = ([seeds[self._blocks[b][0]:self._blocks[b][1]] for b in blocks], [per_block[b] for b in blocks])
            ref, kind, args = self._submit(k, blocks, "reset", args)
            self._pending.append((ref, k, blocks, kind, args))
        self._state = AsyncState.WAITING_RESET

    def _actor_blocks(self, k: int) -> List[int]:
        return list(range(k * self.blocks_per_actor, (k + 1) * self.blocks_per_actor))

    def _wait_pending(self, call: str, state: AsyncState, timeout: Optional[float]) -> Dict[int, Tuple[Any, ...]]:
        """The results of the pending ``call`` by block, within ``timeout`` seconds: a
        ``multiprocessing.TimeoutError`` leaves the call pending, also while an actor that died
        is restarted under ``on_actor_failure="restart"`` (the blocks already in are kept, the
        restarted actor's reset stays in flight, and the next wait goes on from there)."""
        self._assert_open(f"{call}_wait")
        if self._state != state:
            raise no_call_error(call, state)
        deadline = None if timeout is None else time.monotonic() + timeout
        live = [p for p in self._pending if p[3] not in ("done", "recovering")]
        values = self._fetch([p[0] for p in live], timeout, f"`{call}_wait`",
                             "the call stays pending (wait again or close)")
        fetched = iter(values)  # in the order of the pending calls that are not done or recovering
        pending, self._pending = self._pending, []
        self._state = AsyncState.DEFAULT
        out: List[List[Tuple[Any, ...]]] = []
        for i, (ref, k, blocks, kind, args) in enumerate(pending):
            try:
                if kind == "done":
                    out.append(args)
                elif kind == "recovering":
                    out.append(self._await_recovery(args, deadline))
                else:
                    out.append(self._results(ref, k, blocks, kind, args, next(fetched), deadline))
            except _RestartPending as e:
                # Keep the call pending: what came in so far, the restart's reset, the rest as sent.
                self._pending = ([(None, q[1], q[2], "done", r) for q, r in zip(pending, out)]
                                 + [(None, k, blocks, "recovering", e.recovery)] + pending[i + 1:])
                self._state = state
                raise multiprocessing.TimeoutError(
                    f"`{call}_wait` ran out of time after {timeout} s while actor {k} was being restarted; the call "
                    "stays pending (wait again or close)") from None
            except Exception as e:  # the call is over; the other actors' envs' errors come with it, as notes
                raise self._with_notes(e, [self._env_error(q[0], q[1]) for q in pending[i + 1:]
                                           if q[3] not in ("done", "recovering")])
        by_block: Dict[int, Tuple[Any, ...]] = {}
        for (_, _, blocks, _, _), results in zip(pending, out):
            for b, r in zip(blocks, results):
                by_block[b] = r
        return by_block

    def _fetch(self, refs: List[Any], timeout: Optional[float], what: str, stays: str) -> List[Any]:
        """The values of ``refs`` in one ``ray.get`` (the common case), or ``None`` for each when
        one of them failed (each is then fetched alone by :meth:`_get`, which sorts out the
        failures).

        Raises:
            multiprocessing.TimeoutError: not all finished within ``timeout`` (nothing consumed).
        """
        try:
            return ray.get(refs, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise multiprocessing.TimeoutError(f"{what} ran out of time after {timeout} s; {stays}") from None
        except (ray.exceptions.RayTaskError, ray.exceptions.RayActorError):
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
            if len(ready) < len(refs):
                raise multiprocessing.TimeoutError(f"{what} ran out of time after {timeout} s; {stays}") from None
            return [None] * len(refs)

    def _assemble(self, blocks: List[int], by_block: Dict[int, Tuple[Any, ...]],
                  env_ids: Optional[np.ndarray] = None) -> Tuple[Any, ...]:
        """Concatenates the blocks' results (in env order) and vectorises their infos over the
        batch ``env_ids`` (a ``recv``'s), else over the whole vector env."""
        parts = [by_block[b] for b in blocks]
        for b, p in zip(blocks, parts):
            self._last_obs[b] = p[0]
        obs = _concat(self.single_observation_space, [p[0] for p in parts])
        rewards = np.concatenate([p[1] for p in parts]).astype(np.float64, copy=False)
        terminated = np.concatenate([p[2] for p in parts])
        truncated = np.concatenate([p[3] for p in parts])
        raw: Dict[int, Dict[str, Any]] = {}
        for p in parts:
            raw.update(p[4])
        self._env_infos = raw
        if not self._vector_infos:
            infos: Dict[str, Any] = {}
        elif env_ids is not None:
            infos = add_batch_infos(raw, env_ids, self.num_envs, self._add_info)
        else:
            infos = add_infos({}, sorted(raw.items()), self.num_envs, self._add_info)
        return obs, rewards, terminated, truncated, infos

    @closed_meanwhile
    def reset_wait(self, timeout: Optional[float] = None) -> Tuple[Any, Dict[str, Any]]:
        """Waits for the pending reset; ``(observations, infos)`` as :class:`ringenv.AsyncVectorEnv`.

        Raises:
            NoAsyncCallError: no reset is pending.
            multiprocessing.TimeoutError: ``timeout`` passed; the reset stays pending.
            ringenv.errors.ActorDiedError: an actor died.
            ringenv.errors.WorkerDiedError: a worker process inside an actor died.
            ClosedEnvironmentError: closed, or Ray was shut down meanwhile (which closes it).
            Exception: whatever an env raised.
        """
        by_block = self._wait_pending("reset", AsyncState.WAITING_RESET, timeout)
        for b in range(len(self._blocks)):
            if b not in by_block:  # not reset (reset mask): its last observation
                n = self._blocks[b][1] - self._blocks[b][0]
                by_block[b] = (self._last_obs[b], np.zeros(n), np.zeros(n, np.bool_), np.zeros(n, np.bool_), {})
        obs, _, _, _, infos = self._assemble(list(range(len(self._blocks))), by_block)
        return obs, infos

    def reset(self, *, seed: Optional[Union[int, Sequence[Optional[int]]]] = None,
              options: Optional[dict] = None) -> Tuple[Any, Dict[str, Any]]:
        """Resets every sub-env; see :meth:`reset_async` and :meth:`reset_wait`."""
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def _check_batch(self, actions: Any, count: int) -> Any:
        actions = host_actions(actions, None)  # torch tensors as NumPy
        if isinstance(self.single_action_space, FLAT_SPACES):
            actions = np.asarray(actions)
            shape = (count, *(self.single_action_space.shape or ()))
            if actions.ndim == 0:
                raise TypeError(f"actions must be a batch of {count} actions (an array of shape {shape}), "
                                f"got the scalar {actions!r}")
            if actions.shape != shape:
                raise ValueError(f"actions have shape {actions.shape}, expected {shape}")
        return actions

    @closed_meanwhile
    def step_async(self, actions: Any) -> None:
        """Sends each actor its envs' rows of ``actions`` (an element of ``action_space``: for a
        Box an array of shape ``(num_envs, *single_action_space.shape)``; torch tensors are moved
        to the host), one call per actor.

        Raises:
            AlreadyPendingCallError: a call is already pending.
            ClosedEnvironmentError: the vector env is closed.
            TypeError: a scalar instead of a batch of actions.
            ValueError: actions of the wrong shape; the actors' pools check the rest (raised by
                :meth:`step_wait`).
        """
        self._assert_default("step_async")
        actions = self._check_batch(actions, self.num_envs)
        self._pending = []
        for k in range(self.num_actors):
            blocks = self._actor_blocks(k)
            args = [take(self.single_action_space, actions, slice(*self._blocks[b]), self.num_envs) for b in blocks]
            ref, kind, args = self._submit(k, blocks, "step", args)
            self._pending.append((ref, k, blocks, kind, args))
        self._state = AsyncState.WAITING_STEP

    @closed_meanwhile
    def step_wait(self, timeout: Optional[float] = None) -> Tuple[Any, np.ndarray, np.ndarray, np.ndarray, Dict[str, Any]]:
        """Waits for the pending step.

        Returns:
            ``(observations, rewards, terminations, truncations, infos)`` as
            :class:`ringenv.AsyncVectorEnv` returns them (new arrays the caller owns; rewards
            ``float64``, terminations and truncations ``bool``, each of shape ``(num_envs,)``).
            Envs of a restarted actor come back reset and truncated, with
            ``infos["actor_restarted"]``.

        Raises:
            NoAsyncCallError: no step is pending.
            multiprocessing.TimeoutError: ``timeout`` passed; the step stays pending.
            ringenv.errors.ActorDiedError: an actor died; the vector env is closed.
            ringenv.errors.WorkerDiedError: a worker process inside an actor died, under the
                local ``on_worker_failure="raise"``; the vector env is closed too.
            ClosedEnvironmentError: closed, or Ray was shut down meanwhile (which closes it).
            Exception: whatever an env raised.
        """
        by_block = self._wait_pending("step", AsyncState.WAITING_STEP, timeout)
        return self._assemble(list(range(len(self._blocks))), by_block)  # type: ignore[return-value]

    def step(self, actions: Any) -> Tuple[Any, np.ndarray, np.ndarray, np.ndarray, Dict[str, Any]]:
        """Steps every sub-env; see :meth:`step_async` and :meth:`step_wait`."""
        self.step_async(actions)
        return self.step_wait()

    # -- calls, infos, close --------------------------------------------------------------------

    @closed_meanwhile
    def call(self, name: str, *args: Any, **kwargs: Any) -> Tuple[Any, ...]:
        """Calls ``name`` on every sub-env (or reads the attribute); a tuple in env order.

        Raises:
            AlreadyPendingCallError: a call is already pending.
            ClosedEnvironmentError: the vector env is closed.
            ringenv.errors.ActorDiedError: an actor died (not restarted here, whatever the policy).
            Exception: whatever a sub-env raised.
        """
        self._assert_default("call")
        refs = [a.call.remote(name, args, kwargs) for a in self._actors]
        return tuple(r for k, ref in enumerate(refs) for r in self._get(ref, k, recover=False))

    def get_attr(self, name: str) -> Tuple[Any, ...]:
        """The attribute ``name`` of every sub-env, in env order."""
        return self.call(name)

    @closed_meanwhile
    def set_attr(self, name: str, values: Union[List[Any], Tuple[Any, ...], Any]) -> None:
        """Sets ``name`` of env ``i`` to ``values[i]`` (a list or tuple of ``num_envs``), or of
        every env to ``values``.

        Raises:
            ValueError: a list or tuple whose length is not ``num_envs``.
        """
        self._assert_default("set_attr")
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"Values must be a list or tuple with length equal to the number of environments. "
                             f"Got `{len(values)}` values for {self.num_envs} environments.")
        refs = []
        for k, a in enumerate(self._actors):
            refs.append(a.set_attr.remote(name, [values[i] for i in self.actor_info[k]["env_ids"]]))
        for k, ref in enumerate(refs):
            self._get(ref, k, recover=False)

    def env_infos(self) -> List[Dict[str, Any]]:
        """Each env's own info dict from the last ``reset``, ``step`` or ``recv`` (a list of
        ``num_envs`` dicts in env order, empty where there was none), as
        :meth:`ringenv.AsyncVectorEnv.env_infos`."""
        return [self._env_infos.get(i, {}) for i in range(self.num_envs)]

    def close_extras(self, timeout: Optional[float] = None, terminate: bool = False) -> None:
        """Closes every actor's pools (their workers exit), then kills the actors (``ray.kill``,
        no restart). Calls in flight are first awaited up to ``timeout`` seconds (default 10);
        with ``terminate=True``, or calls still running, the actors are killed at once and their
        worker processes die with them (each watches its parent)."""
        actors = getattr(self, "_actors", [])
        if not actors:
            return
        # Closed from here on: a call another thread has in flight fails as closed (closed_meanwhile).
        self._closing_thread = threading.get_ident()
        self.closed = True
        pending = [p[4]["ref"] if p[3] == "recovering" else p[0] for p in getattr(self, "_pending", [])
                   if p[3] != "done"]
        pending = [r for r in pending if r is not None]
        if pending:  # as Gymnasium, which names the call
            logger.warn(f"Calling `close` while waiting for a pending call to `{self._state.value}` to complete.")
        refs = pending + list(getattr(self, "_inflight", {}))
        wait_s = 10.0 if timeout is None else timeout
        busy = False
        if not self._ray_is_ours():  # ray.shutdown(): the actors went with Ray, and a call would start a new one
            terminate = True
        if refs and not terminate:
            _, busy_refs = ray.wait(refs, num_returns=len(refs), timeout=wait_s)
            busy = bool(busy_refs)
        if not (terminate or busy):
            try:
                ray.get([a.close.remote() for a in actors], timeout=wait_s)
            except Exception:  # dead or slow: killed below all the same
                pass
        self._kill_all()
        self._pending, self._inflight, self._received = [], {}, {}
        self._state = AsyncState.DEFAULT
        self.closed = True

    def __del__(self) -> None:
        if not getattr(self, "closed", True):
            try:
                self.close(terminate=True)
            except Exception:  # interpreter shutting down
                pass

    def __repr__(self) -> str:
        return f"ringenv.ray.RayVectorEnv(num_envs={self.num_envs}, num_actors={self.num_actors})"
