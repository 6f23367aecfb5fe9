"""Asynchronous batches for :class:`ringenv.AsyncVectorEnv`: EnvPool's ``async_reset`` /
``send`` / ``recv`` with ``batch_size < num_envs``.

The unit of work is a worker: each worker process steps its contiguous block of
``num_envs // num_workers`` envs, so a batch is the union of ``batch_size // (num_envs //
num_workers)`` workers' blocks. ``recv`` returns the first workers to finish (or, with
``deterministic=True``, the earliest sent, whatever finished first); while the caller computes
actions for that batch, the other workers keep stepping.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import cloudpickle
import numpy as np
from gymnasium import logger
from gymnasium.error import AlreadyPendingCallError
from gymnasium.vector.utils import concatenate, create_empty_array, iterate, read_from_shared_memory

from ringenv.errors import WorkerDiedError, _remote_exception

__all__ = ["BatchesMixin", "default_async_workers", "check_batch_size"]


def check_batch_size(num_envs: int, num_workers: int, batch_size: int) -> None:
    """Raises ``ValueError`` naming the constraint when ``batch_size`` envs cannot be a union of
    whole workers' blocks: the workers must have equal blocks (``num_envs % num_workers == 0``)
    and ``batch_size`` must be a multiple of the block size."""
    if not isinstance(batch_size, (int, np.integer)) or not 1 <= batch_size <= num_envs:
        raise ValueError(f"batch_size must be an integer from 1 to num_envs ({num_envs}), got {batch_size!r}")
    if num_envs % num_workers:
        raise ValueError(f"batch_size < num_envs needs equal worker blocks: num_envs ({num_envs}) is not a "
                         f"multiple of num_workers ({num_workers})")
    block = num_envs // num_workers
    if batch_size % block:
        raise ValueError(f"batch_size ({batch_size}) must be a multiple of the envs per worker "
                         f"(num_envs {num_envs} / num_workers {num_workers} = {block}): a batch is whole workers")


def default_async_workers(num_envs: int, batch_size: int, cores: int) -> int:
    """The default ``num_workers`` for ``batch_size < num_envs``: the smallest worker count of at
    least ``cores`` (at least 2) that divides ``num_envs`` into blocks dividing ``batch_size``;
    the largest such count when none reaches ``cores``.

    Raises:
        ValueError: when no worker count fits (``batch_size`` shares no block size with
            ``num_envs``), naming both.
    """
    fits = [w for w in range(2, num_envs + 1) if num_envs % w == 0 and batch_size % (num_envs // w) == 0]
    if not fits:
        raise ValueError(f"no worker count splits num_envs ({num_envs}) into blocks that make up "
                         f"batch_size ({batch_size}); choose batch_size dividing num_envs, or pass num_workers")
    enough = [w for w in fits if w >= max(2, cores)]
    return enough[0] if enough else fits[-1]


def _contiguous(pieces: List[Tuple[int, int, int]]) -> bool:
    """Whether the ``(slot, start, stop)`` pieces are one run of rows of one slot."""
    return all(p[0] == pieces[0][0] and p[1] == q[2] for p, q in zip(pieces[1:], pieces))


def _rows(x: Any, index: np.ndarray) -> Any:
    """The rows ``index`` of every array in a (possibly nested) info dict."""
    if isinstance(x, dict):
        return {k: _rows(v, index) for k, v in x.items()}
    if isinstance(x, np.ndarray) and x.ndim >= 1:
        return x[index]
    return x


class BatchesMixin:
    """``async_reset`` / ``send`` / ``recv`` (mixed into :class:`ringenv.AsyncVectorEnv`, whose
    attributes it uses)."""

    # Set by AsyncVectorEnv._start.
    num_envs: int
    batch_size: int
    deterministic: bool
    copy: bool
    _pool: Any
    #: Each worker's env ids ``(start, stop)``, which worker steps each env, and how many
    #: workers make up one batch.
    _ranges: List[Tuple[int, int]]
    _worker_of: np.ndarray
    _per_recv: int
    _sent: List[Optional[str]]
    _last_slots: List[Optional[int]]
    _device: Any
    #: The env ids array the last recv returned and its workers (send's fast path).
    _recv_ids: Tuple[Optional[np.ndarray], List[int]] = (None, [])
    single_observation_space: Any
    observation_space: Any

    def async_reset(self, seed: Optional[Union[int, Sequence[Optional[int]]]] = None,
                    options: Optional[dict] = None) -> None:
        """Sends a reset to every env and returns at once (EnvPool's ``async_reset``); the first
        observations then come back through :meth:`recv`, ``batch_size`` envs at a time, with
        reward 0 and terminated/truncated False. ``seed`` as in :meth:`reset`: env ``i`` gets
        ``seed + i`` (an int) or ``seed[i]``.

        Raises:
            AlreadyPendingCallError: a synchronous call is pending, or batches are still in flight
                (``recv`` them first).
            ValueError: bad seeds; ClosedEnvironmentError.
        """
        seeds = self._seed_list(seed)  # type: ignore[attr-defined]
        self._assert_default("async_reset")  # type: ignore[attr-defined]
        if options is not None and "reset_mask" in options:
            raise ValueError("async_reset resets every env: options['reset_mask'] is not supported here")
        self._pool.write_seeds(seeds, None)
        workers = list(range(self._pool.num_workers))
        if self._device is not None:
            self._device.before_reuse(self._pool.next_slot_of(w) for w in workers)
        self._pool.send(workers, "reset", None if options is None else cloudpickle.dumps(options))
        for w in workers:
            self._sent[w] = "reset"

    def send(self, actions: Any, env_ids: Optional[Sequence[int]] = None) -> None:
        """Sends ``actions`` to the envs ``env_ids`` and returns at once (EnvPool's ``send``).

        Args:
            actions: the actions of those envs, in the order of ``env_ids``: an array of shape
                ``(len(env_ids), *single_action_space.shape)`` (integers for Discrete,
                MultiDiscrete and MultiBinary spaces), or for other action spaces a batch of that
                many elements.
            env_ids: the env ids, usually ``infos["env_id"]`` of the last :meth:`recv`; any order,
                but they must make up whole workers' blocks of envs (``None``: every env).

        Raises:
            TypeError: a scalar instead of a batch of actions.
            ValueError: an env id out of range or repeated, env ids that do not make up whole
                workers, envs whose last results were not received yet, actions of the wrong
                shape or dtype, or with ``check_actions=True`` out of range (nothing is sent).
            AlreadyPendingCallError: a synchronous call is pending; ClosedEnvironmentError.
        """
        self._assert_open("send")  # type: ignore[attr-defined]
        if self._state.value != "default":  # type: ignore[attr-defined]
            raise AlreadyPendingCallError(f"Calling `send` while waiting for a pending call to "
                                          f"`{self._state.value}` to complete", str(self._state.value))  # type: ignore[attr-defined]
        last_ids, last_workers = self._recv_ids
        if last_ids is not None and env_ids is last_ids:
            ids, workers = last_ids, last_workers  # what recv returned: known to be whole workers
        else:
            ids, workers = self._whole_workers(env_ids)
        busy = [int(w) for w in workers if self._sent[w] is not None]
        if busy:
            a, b = self._ranges[busy[0]]
            raise ValueError(f"envs {a}..{b - 1} (worker {busy[0]}) were sent actions whose "
                             "results were not received yet: recv them first")
        slots = [self._pool.next_slot_of(w) for w in workers]
        if len(set(slots)) == 1:
            slot_of: Any = slots[0]
        else:
            by_worker = dict(zip(workers, slots))
            slot_of = np.array([by_worker[int(w)] for w in self._worker_of[ids]])
        payload = self._write_actions(actions, ids, slot_of)  # type: ignore[attr-defined]
        if self._device is not None:
            self._device.before_reuse(slots)
        self._pool.send(workers, "step", payload)
        for w in workers:
            self._sent[w] = "step"

    def _whole_workers(self, env_ids: Optional[Sequence[int]]) -> Tuple[np.ndarray, List[int]]:
        """``(env ids array, workers)`` for ``env_ids`` (``None``: every env), or ``ValueError``
        naming what is wrong: not integers, out of range, repeated, not whole workers."""
        n = self.num_envs
        ids = np.arange(n) if env_ids is None else np.asarray(env_ids)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise ValueError(f"env_ids must be a 1-D sequence of integers, got {ids!r}")
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            bad = int(ids[(ids < 0) | (ids >= n)][0])
            raise ValueError(f"env id {bad} is outside [0, {n})")
        workers = np.unique(self._worker_of[ids])
        if np.unique(ids).size != ids.size:
            raise ValueError(f"env_ids repeat an env: {ids.tolist()}")
        if ids.size == 0 or ids.size != sum(self._ranges[w][1] - self._ranges[w][0] for w in workers):
            raise ValueError(f"env_ids {ids.tolist()} do not make up whole workers: the workers step the envs "
                             f"{self._ranges} (start, stop) (a batch is whole workers, as recv returns them)")
        return ids, [int(w) for w in workers]

    def recv(self, timeout: Optional[float] = None) -> Tuple[Any, np.ndarray, np.ndarray, np.ndarray, Dict[str, Any]]:
        """Waits for the next ``batch_size`` envs (EnvPool's ``recv``): the first workers to
        finish, or with ``deterministic=True`` the earliest sent.

        Returns:
            ``(observations, rewards, terminations, truncations, infos)`` of the batch, in the
            order of ``infos["env_id"]`` (an ``int32`` array of shape ``(batch_size,)``, ascending
            within each worker's block): observations batched as ``observation_space`` with
            ``batch_size`` rows; rewards ``float64``, terminations and truncations ``bool``, each
            of shape ``(batch_size,)``; infos vectorised over the batch. Observations are views of
            shared memory when the batch is contiguous and ``copy=False`` (valid until those envs
            step again), else copies.

        Raises:
            ValueError: fewer than ``batch_size`` envs are in flight (nothing to wait for).
            multiprocessing.TimeoutError: ``timeout`` seconds passed (the batch stays in flight).
            ringenv.errors.WorkerDiedError, or the exception an env raised.
        """
        self._assert_open("recv")  # type: ignore[attr-defined]
        k = self._per_recv
        try:
            batch = self._pool.recv(k, self.deterministic, timeout)
        except WorkerDiedError:
            self._release(0.0)  # type: ignore[attr-defined]  # closed: every descriptor goes now
            raise
        batch.sort(key=lambda b: b[0])  # ascending env ids (the order is the same in both modes)
        pieces, messages, restarted, error = [], [], [], None
        resets = []
        for worker, slot, message, err, restart in batch:
            start, stop = self._ranges[worker]
            pieces.append((slot, start, stop))
            resets.append(self._sent[worker] == "reset")
            self._sent[worker] = None
            self._last_slots[worker] = slot
            if message is not None:
                messages.append((worker, message))
            if restart is not None:
                restarted.append(restart)
                logger.warn(f"ringenv worker {restart['worker']} (pid {restart['pid']}, envs "
                            f"{restart['env_ids'][0]}..{restart['env_ids'][1]}) {restart['status']} and was "
                            "restarted; its envs were reset")
            error = error or err
        if error is not None:
            raise _remote_exception(error)
        # One run of rows when the workers' blocks follow each other in one slot.
        runs = [(pieces[0][0], pieces[0][1], pieces[-1][2])] if _contiguous(pieces) else pieces
        ids = np.concatenate([np.arange(a, b, dtype=np.int32) for _, a, b in runs])
        self._restarted = restarted
        infos = self._absorb(messages)  # type: ignore[attr-defined]
        infos = _rows(infos, ids) if infos else {}
        infos["env_id"] = ids
        self._recv_ids = (ids, [b[0] for b in batch])
        if self._device is not None:
            obs, rewards, terminated, truncated = self._device.batch(runs, self.copy)
        else:
            obs = self._batch_observations(runs, ids)
            rewards = np.concatenate([self._reward[s][a:b] for s, a, b in runs], dtype=np.float64)  # type: ignore[attr-defined]
            terminated = np.concatenate([self._terminated[s][a:b] for s, a, b in runs])  # type: ignore[attr-defined]
            truncated = np.concatenate([self._truncated[s][a:b] for s, a, b in runs])  # type: ignore[attr-defined]
        if any(resets):
            for (s, a, b), was_reset in zip(pieces, resets):
                if was_reset:
                    at = int(np.searchsorted(ids, a))
                    rewards[at:at + b - a], terminated[at:at + b - a], truncated[at:at + b - a] = 0.0, False, False
        return obs, rewards, terminated, truncated, infos

    def _batch_observations(self, runs: List[Tuple[int, int, int]], ids: np.ndarray) -> Any:
        """The observations of the ``(slot, start, stop)`` runs of rows: a view of shared memory
        for one run of a flat space with ``copy=False``, else a new batch."""
        flat = self._obs_flat  # type: ignore[attr-defined]
        if flat is not None:
            if len(runs) == 1:
                s, a, b = runs[0]
                return flat[s][a:b].copy() if self.copy else flat[s][a:b]
            return np.concatenate([flat[s][a:b] for s, a, b in runs])
        space = self.single_observation_space  # type: ignore[attr-defined]
        if self._obs_mem is not None:  # type: ignore[attr-defined]
            full = {s: read_from_shared_memory(space, self._obs_mem[s], n=self.num_envs)  # type: ignore[attr-defined]
                    for s in {r[0] for r in runs}}
            per_env = {s: list(iterate(self.observation_space, obs)) for s, obs in full.items()}  # type: ignore[attr-defined]
            items = [per_env[s][i] for s, a, b in runs for i in range(a, b)]
        else:
            items = [self._env_obs[i] for i in ids]  # type: ignore[attr-defined]
        out: Any = create_empty_array(space, n=len(items), fn=np.zeros)
        return concatenate(space, items, out)
