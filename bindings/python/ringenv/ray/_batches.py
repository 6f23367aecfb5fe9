"""Asynchronous batches of :class:`ringenv.ray.RayVectorEnv` (EnvPool's ``async_reset`` /
``send`` / ``recv`` with ``batch_size < num_envs``).

The unit is a *block*: one local pool of an actor, stepped by one actor call. ``async_reset`` and
``send`` make one call per block and return at once; ``recv`` waits (``ray.wait``) for the first
``batch_size / block size`` blocks to finish across all actors (with ``deterministic=True``, the
earliest sent), so with two blocks per actor two calls are in flight per actor: one block steps
while the other's results travel to the learner.
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import ray
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from ringenv._protocol import AsyncState, pending_error
from ringenv.ray._closed_meanwhile import closed_meanwhile

__all__ = ["BlockBatchesMixin", "take"]


class _RestartPending(Exception):
    """A restarted actor's reset was still in flight at the caller's deadline (internal: the wait
    raises ``multiprocessing.TimeoutError`` and keeps ``recovery`` to await it again)."""

    def __init__(self, recovery: Dict[str, Any]):
        super().__init__("an actor is being restarted")
        self.recovery = recovery


def take(space: spaces.Space, batch: Any, rows: Union[slice, np.ndarray], count: int) -> Any:
    """The rows ``rows`` of a batch of ``count`` elements of ``space`` (an action batch)."""
    if isinstance(batch, np.ndarray):
        return batch[rows]
    if isinstance(space, spaces.Dict) and isinstance(batch, dict):
        return {k: take(s, batch[k], rows, count) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple) and isinstance(batch, tuple):
        return tuple(take(s, batch[i], rows, count) for i, s in enumerate(space.spaces))
    items = list(iterate(batch_space(space, count), batch))
    picked = items[rows] if isinstance(rows, slice) else [items[int(i)] for i in rows]
    return concatenate(space, picked, create_empty_array(space, n=len(picked), fn=np.zeros))  # type: ignore[arg-type]


class BlockBatchesMixin:
    """``async_reset`` / ``send`` / ``recv`` (mixed into :class:`ringenv.ray.RayVectorEnv`, whose
    attributes and helpers it uses)."""

    num_envs: int
    batch_size: int
    blocks_per_actor: int
    deterministic: bool
    single_action_space: Any
    _blocks: List[Tuple[int, int]]
    _inflight: Dict[Any, Tuple[int, str, Any]]
    _busy: List[bool]
    _state: AsyncState
    # RayVectorEnv's helpers (see there).
    _assert_open: Callable[[str], None]
    _assert_default: Callable[[str], None]
    _seed_list: Callable[[Any], List[Optional[int]]]
    _check_batch: Callable[[Any, int], Any]
    _submit: Callable[[int, List[int], str, Any], Tuple[Any, str, Any]]
    _fetch: Callable[[List[Any], Optional[float], str, str], List[Any]]
    _results: Callable[..., List[Tuple[Any, ...]]]
    _assemble: Callable[..., Tuple[Any, ...]]
    _await_recovery: Callable[[Dict[str, Any], Optional[float]], List[Tuple[Any, ...]]]
    _recovery_ref: Callable[[Dict[str, Any]], Any]
    _env_error: Callable[[Any, int], Optional[BaseException]]
    _with_notes: Callable[[BaseException, Sequence[Optional[BaseException]]], BaseException]
    _received: Dict[int, Tuple[Any, ...]]

    @closed_meanwhile
    def async_reset(self, seed: Optional[Union[int, Sequence[Optional[int]]]] = None,
                    options: Optional[dict] = None) -> None:
        """Sends a reset to every block (one call each) and returns at once; the observations come
        back through :meth:`recv`, ``batch_size`` envs at a time, with reward 0 and no
        termination. Seeds as in :meth:`reset_async`.

        Raises:
            AlreadyPendingCallError, ClosedEnvironmentError, ValueError.
        """
        self._assert_default("async_reset")
        seeds = self._seed_list(seed)
        if options is not None and "reset_mask" in options:
            raise ValueError("async_reset resets every env: options['reset_mask'] is not supported here")
        for b, (a, z) in enumerate(self._blocks):
            k = b // self.blocks_per_actor
            ref, kind, args = self._submit(k, [b], "reset", ([seeds[a:z]], [options]))
            self._inflight[ref] = (b, kind, args)
            self._busy[b] = True

    @closed_meanwhile
    def send(self, actions: Any, env_ids: Optional[Sequence[int]] = None) -> None:
        """Sends ``actions`` (in the order of ``env_ids``) to the envs ``env_ids`` (``None``: all),
        one call per block, and returns at once.

        Raises:
            ValueError: env ids out of range, repeated, not whole blocks, or whose last results
                were not received yet; actions of the wrong shape (nothing is sent).
            TypeError: a scalar; AlreadyPendingCallError; ClosedEnvironmentError.
        """
        self._assert_open("send")
        if self._state != AsyncState.DEFAULT:
            raise pending_error(self._state, "send")
        n = self.num_envs
        ids = np.arange(n) if env_ids is None else np.asarray(env_ids)
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or ids.size == 0:
            raise ValueError(f"env_ids must be a non-empty 1-D sequence of integers, got {env_ids!r}")
        if ids.min() < 0 or ids.max() >= n:
            raise ValueError(f"env id {int(ids[(ids < 0) | (ids >= n)][0])} is outside [0, {n})")
        if np.unique(ids).size != ids.size:
            raise ValueError(f"env_ids repeat an env: {ids.tolist()}")
        actions = self._check_batch(actions, ids.size)
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        calls = []
        at = 0
        while at < sorted_ids.size:
            b = int(np.searchsorted([s for s, _ in self._blocks], sorted_ids[at], side="right")) - 1
            a, z = self._blocks[b]
            if sorted_ids[at] != a or at + (z - a) > sorted_ids.size or sorted_ids[at + z - a - 1] != z - 1:
                raise ValueError(f"env_ids {ids.tolist()} do not make up whole blocks: the blocks are {self._blocks} "
                                 "(start, stop) (a batch is whole blocks, as recv returns them)")
            if self._busy[b]:
                raise ValueError(f"envs {a}..{z - 1} (block {b}) were sent actions whose results were not "
                                 "received yet: recv them first")
            calls.append((b, order[at:at + z - a]))
            at += z - a
        for b, rows in calls:
            k = b // self.blocks_per_actor
            ref, kind, args = self._submit(k, [b], "step", [take(self.single_action_space, actions, rows, ids.size)])
            self._inflight[ref] = (b, kind, args)
            self._busy[b] = True

    @closed_meanwhile
    def recv(self, timeout: Optional[float] = None) -> Tuple[Any, np.ndarray, np.ndarray, np.ndarray, Dict[str, Any]]:
        """Waits for the next ``batch_size`` envs: the first blocks to finish (``ray.wait``), or
        with ``deterministic=True`` the earliest sent.

        ``timeout`` (seconds) bounds the whole call, an actor's restart included; the blocks
        already in are kept for the next ``recv``.

        Returns:
            ``(observations, rewards, terminations, truncations, infos)`` of the batch in the
            order of ``infos["env_id"]`` (``int32``, shape ``(batch_size,)``, ascending), as
            :meth:`ringenv.AsyncVectorEnv.recv`.

        Raises:
            ValueError: fewer than ``batch_size`` envs in flight.
            multiprocessing.TimeoutError: ``timeout`` passed (the batches stay in flight).
            ringenv.errors.ActorDiedError, ringenv.errors.WorkerDiedError, or the env's exception
            (the first in env order, the others as notes; the whole batch is dropped).
            ClosedEnvironmentError: closed, or Ray was shut down (which closes it).
        """
        self._assert_open("recv")
        deadline = None if timeout is None else time.monotonic() + timeout
        block = self._blocks[0][1] - self._blocks[0][0]
        k = len(self._blocks) if self.batch_size == self.num_envs else self.batch_size // block
        refs = list(self._inflight)
        need = k - len(self._received)
        if len(refs) < need:
            raise ValueError(f"recv needs {k} blocks in flight for a batch of {self.batch_size} envs, but "
                             f"{len(refs) + len(self._received)} are: send actions first")
        if need > 0:
            candidates = refs[:need] if self.deterministic else refs
            ready, _ = ray.wait(candidates, num_returns=need, timeout=timeout)
            if len(ready) < need:
                raise multiprocessing.TimeoutError(f"recv ran out of time after {timeout} s; the batches stay in flight")
            taken = sorted(ready, key=lambda r: self._inflight[r][0])
            fresh = [r for r in taken if self._inflight[r][1] != "recovering"]
            values = dict(zip(fresh, self._fetch(fresh, None, "recv", "")))
            order = {r: i for i, r in enumerate(self._inflight)}  # send order, kept for a restart's reset
            back = []
            restarting = None
            error: Optional[BaseException] = None
            noted: List[Optional[BaseException]] = []
            for ref in taken:
                entry = self._inflight.pop(ref, None)  # none left once a failure closed the env
                if entry is None:
                    continue
                b, kind, args = entry
                if error is not None:  # the batch failed: the rest of it is dropped, as a local pool drops it
                    self._busy[b] = False
                    if kind != "recovering":  # its envs' errors too are raised, as notes
                        noted.append(self._env_error(ref, b // self.blocks_per_actor))
                    continue
                try:
                    if kind == "recovering":
                        self._received[b] = self._await_recovery(args, deadline)[0]
                    else:
                        self._received[b] = self._results(ref, b // self.blocks_per_actor, [b], kind, args,
                                                          values[ref], deadline)[0]
                except _RestartPending as e:  # in flight again, where it was: the restarted actor's reset
                    back.append((order[ref], self._recovery_ref(e.recovery), (b, "recovering", e.recovery)))
                    restarting = b // self.blocks_per_actor
                except BaseException as e:
                    self._busy[b] = False
                    error = e
            if back:
                merged = sorted(back + [(order[r], r, v) for r, v in self._inflight.items()], key=lambda t: t[0])
                self._inflight = {r: v for _, r, v in merged}
            if error is not None:
                for b in self._received:  # blocks of the failed batch that came in on an earlier recv
                    self._busy[b] = False
                self._received.clear()
                raise self._with_notes(error, noted)
            if restarting is not None:
                raise multiprocessing.TimeoutError(
                    f"recv ran out of time after {timeout} s while actor {restarting} was being restarted; the "
                    "batches stay in flight (recv again or close)")
        blocks = sorted(self._received)
        by_block = {b: self._received.pop(b) for b in blocks}
        for b in blocks:
            self._busy[b] = False
        ids = np.concatenate([np.arange(*self._blocks[b], dtype=np.int32) for b in blocks])
        obs, rewards, terminated, truncated, infos = self._assemble(blocks, by_block, ids)
        infos["env_id"] = ids
        return obs, rewards, terminated, truncated, infos
