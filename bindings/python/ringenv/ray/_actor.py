"""The Ray actor of ``ringenv.ray``: one per node (or per share of a node), hosting ordinary local
ringenv pools, one per *block* of envs.

A call steps a whole block, never one env, so Ray's per-call cost (~1 ms) is paid per block.
The actor is threaded (``max_concurrency`` = blocks + 1); calls on one block are never concurrent,
and different blocks are different pools. Results leave as NumPy arrays and each env's own info
dict, which the driver (:mod:`ringenv.ray.vector`) vectorises as a local vector env does.
"""

from __future__ import annotations

import os
import traceback
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ringenv.errors import _env_ids_text, _merged, _shift_notes
from ringenv.vector import AsyncVectorEnv

__all__ = ["PoolActor", "Block", "StartupFailure"]

#: ``(start, stop, build)``: the global env ids ``[start, stop)`` of a block and a callable
#: returning the local :class:`ringenv.AsyncVectorEnv` of those envs, cloudpickled by the driver
#: (unpickled in the actor, where a factory's module that cannot be imported is a startup failure).
Block = Tuple[int, int, bytes]


class StartupFailure(Exception):
    """A block's pool could not be built in the actor (raised by every call of the actor; the driver
    makes it a :class:`ringenv.errors.WorkerStartupError` naming the actor)."""

    def __init__(self, error: BaseException, cause: Optional[BaseException], env_ids: Tuple[int, ...],
                 traceback: str, unpickling: bool):
        super().__init__(error, cause, env_ids, traceback, unpickling)
        self.error, self.cause, self.env_ids, self.traceback, self.unpickling = (error, cause, env_ids, traceback,
                                                                                  unpickling)

    def __str__(self) -> str:
        return f"{type(self.error).__name__}: {self.error}"


def _shift_env_ids(error: BaseException, start: int) -> BaseException:
    """Makes the env ids a local pool's error names global (a block's pool counts from 0), in its
    attributes and in its message (``"worker 0 (pid 7, envs [0, 1]) died"``), the env of its last
    error (``last_error["env_id"]``, ``"(env 1)"`` in the message) too."""
    def rewrite(old: str, new: str) -> None:
        if start and len(error.args) == 1 and isinstance(error.args[0], str):
            error.args = (error.args[0].replace(old, new, 1),)

    env_ids = getattr(error, "env_ids", None)
    if isinstance(env_ids, tuple) and all(isinstance(i, int) for i in env_ids):
        shifted = tuple(i + start for i in env_ids)
        error.env_ids = shifted  # type: ignore[attr-defined]
        rewrite(f"envs {_env_ids_text(env_ids)}", f"envs {_env_ids_text(shifted)}")
    last_error = getattr(error, "last_error", None)
    if isinstance(last_error, dict) and isinstance(last_error.get("env_id"), int):
        rewrite(f"(env {last_error['env_id']})", f"(env {last_error['env_id'] + start})")
        error.last_error = {**last_error, "env_id": last_error["env_id"] + start}  # type: ignore[attr-defined]
    env_id = getattr(error, "env_id", None)
    if isinstance(env_id, int):
        error.env_id = env_id + start  # type: ignore[attr-defined]
    return error


def _infos(envs: AsyncVectorEnv, start: int) -> Dict[int, Dict[str, Any]]:
    """Each env's own info dict of the block's last call, keyed by global env id (empty ones left
    out)."""
    return {start + i: info for i, info in enumerate(envs.env_infos()) if info}


class PoolActor:
    """Hosts the local pools of ``blocks`` (made remote by the driver with ``ray.remote``).

    Args:
        blocks: the actor's blocks, in env order: ``(start, stop, build)`` each (:data:`Block`).
    """

    def __init__(self, blocks: Sequence[Block]):
        import ray.cloudpickle

        self._ranges = [(int(a), int(b)) for a, b, _ in blocks]
        self._pools: List[AsyncVectorEnv] = []
        self._incarnation = os.urandom(8).hex()  # new each time Ray (re)creates the actor
        # A failure to build is kept and raised by every call (describe first), not raised here: Ray
        # reports an error of an actor's constructor (or of unpickling its arguments: a factory's
        # module this node cannot import) as a bare ActorDiedError that loses the exception (a
        # factory's KeyError, a WorkerStartupError), which a method's error keeps.
        self._startup_error: Optional[StartupFailure] = None
        for a, b, payload in blocks:
            unpickling = True
            try:
                build = ray.cloudpickle.loads(payload)
                unpickling = False
                self._pools.append(build())
            except Exception as e:
                self.close()
                cause = e.__cause__ if isinstance(e.__cause__, Exception) else None
                self._startup_error = StartupFailure(_shift_env_ids(e, a), cause, tuple(range(a, b)),
                                                     "".join(traceback.format_exception(e)), unpickling)
                break

    def _check(self) -> None:
        if self._startup_error is not None:
            raise self._startup_error

    def describe(self) -> Dict[str, Any]:
        """Where the actor runs and what its envs are: ``pid``, ``node_id``, ``node_ip``, the
        single spaces, ``metadata``, ``render_mode``, ``spec`` and each pool's ``num_workers``."""
        import ray

        self._check()
        first = self._pools[0]
        return {
            "pid": os.getpid(),
            "actor_id": ray.get_runtime_context().get_actor_id(),
            "incarnation": self._incarnation,
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "single_observation_space": first.single_observation_space,
            "single_action_space": first.single_action_space,
            "metadata": first.metadata,
            "render_mode": first.render_mode,
            "spec": getattr(first, "spec", None),
            "num_workers": [p.num_workers for p in self._pools],
        }

    def reset(self, blocks: Sequence[int], seeds: Sequence[Sequence[Optional[int]]],
              options: Sequence[Optional[dict]]) -> List[Tuple[Any, Dict[int, Dict[str, Any]]]]:
        """Resets the local ``blocks`` (``seeds[k]``: one seed per env of block ``k``,
        ``options[k]`` its options); returns ``(observations, infos by global env id)`` per
        block. Raises as :meth:`step`."""
        self._check()
        calls = [(b, lambda b=b, s=s, o=o: self._pools[b].reset_async(seed=list(s), options=o))
                 for b, s, o in zip(blocks, seeds, options)]
        return [(obs, _infos(self._pools[b], self._ranges[b][0]))
                for b, (obs, _) in self._each_block(calls, "reset_wait")]

    def step(self, blocks: Sequence[int], actions: Sequence[Any]) -> List[Tuple[Any, ...]]:
        """Steps the local ``blocks`` with ``actions[k]`` (a batch for block ``k``), all blocks at
        once; returns ``(observations, rewards, terminations, truncations, infos by global env
        id)`` per block.

        Raises:
            the error of a block's pool, its env ids made global; when several blocks' envs
            raised, one error with the others as notes (:func:`ringenv.errors._merged`). Every
            block started is waited for first, so each pool is left with no call pending and
            steps again on the next call, as a local vector env does after an env's error.
        """
        self._check()
        calls = [(b, lambda b=b, a=a: self._pools[b].step_async(a)) for b, a in zip(blocks, actions)]
        return [(obs, rewards, terminated, truncated, _infos(self._pools[b], self._ranges[b][0]))
                for b, (obs, rewards, terminated, truncated, _) in self._each_block(calls, "step_wait")]

    def _each_block(self, calls: Sequence[Tuple[int, Any]], wait: str) -> List[Tuple[int, Any]]:
        """Runs each ``(block, start)`` of ``calls`` (``start`` starts the block's call), then
        ``wait`` of every block that started; ``(block, result)`` in the order of ``calls``, or
        the errors of all that failed, merged, raised once every started block was waited for."""
        errors: List[BaseException] = []
        started = []
        for b, begin in calls:
            try:
                begin()
            except Exception as e:
                errors.append(self._global(e, b))
                break  # a bad call: the blocks after it are not started, as a local pool checks first
            started.append(b)
        out = []
        for b in started:
            try:
                out.append((b, getattr(self._pools[b], wait)()))
            except Exception as e:
                errors.append(self._global(e, b))
        if errors:
            raise _merged(errors)
        return out

    def _global(self, error: BaseException, b: int) -> BaseException:
        """``error`` of block ``b``'s pool with its env ids, its notes' too, made global."""
        _shift_notes(error, self._ranges[b][0])
        return _shift_env_ids(error, self._ranges[b][0])

    def call(self, name: str, args: tuple, kwargs: dict) -> List[Any]:
        """``call(name, *args, **kwargs)`` of every block's pool, results in env order."""
        return [r for p in self._pools for r in p.call(name, *args, **kwargs)]

    def set_attr(self, name: str, values: Sequence[Any]) -> None:
        """Sets ``name`` of every env to ``values[i]`` (``values`` in the actor's env order)."""
        at = 0
        for p in self._pools:
            p.set_attr(name, list(values[at:at + p.num_envs]))
            at += p.num_envs

    def close(self) -> None:
        """Closes every pool: their workers exit."""
        pools, self._pools = self._pools, []
        for p in pools:
            try:
                p.close()
            except Exception:  # close the others anyway
                pass
