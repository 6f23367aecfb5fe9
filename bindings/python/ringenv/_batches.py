"""Asynchronous batches for :class:`ringenv.AsyncVectorEnv`: EnvPool's ``async_reset`` /
``send`` / ``recv`` with ``batch_size < num_envs``, as :class:`AsyncBatches`, a part the vector env
holds.

The unit of work is a worker: each worker process steps its contiguous block of
``num_envs // num_workers`` envs, so a batch is the union of ``batch_size // (num_envs //
num_workers)`` workers' blocks. ``recv`` returns the first workers to finish (or, with
``deterministic=True``, the earliest sent, whatever finished first); while the caller computes
actions for that batch, the other workers keep stepping.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ringenv._pickling import reset_payload
from ringenv._protocol import borrowed, busy_error, warn_restarted
from ringenv._slots import Slots
from ringenv.errors import _remote_errors

__all__ = ["AsyncBatches", "default_async_workers", "check_batch_size", "worker_ranges"]


def check_batch_size(num_envs: int, num_workers: int, batch_size: int, inline: bool = False) -> None:
    """Raises ``ValueError`` naming the constraint when ``batch_size`` envs cannot be a union of
    whole workers' blocks: the ``num_workers`` blocks (with ``inline``, the last one is this
    process's share) must be equal (``num_envs % num_workers == 0``) and ``batch_size`` must be
    a multiple of the block size."""
    if not isinstance(batch_size, (int, np.integer)) or not 1 <= batch_size <= num_envs:
        raise ValueError(f"batch_size must be an integer from 1 to num_envs ({num_envs}), got {batch_size!r}")
    processes = f"{num_workers - 1} worker process{'' if num_workers == 2 else 'es'}"
    blocks = (f"{num_workers} blocks ({processes} + the inline share)" if inline
              else f"num_workers ({num_workers})")
    if num_envs % num_workers:
        raise ValueError(f"batch_size < num_envs needs equal worker blocks: num_envs ({num_envs}) is not a "
                         f"multiple of {blocks}")
    block = num_envs // num_workers
    if batch_size % block:
        raise ValueError(f"batch_size ({batch_size}) must be a multiple of the envs per worker "
                         f"(num_envs {num_envs} / {blocks} = {block}): a batch is whole workers")


DEFAULT_ASYNC_WORKERS_PER_CORE = 4
"""The most worker processes per usable core (counting at least 2 cores) that the default
``num_workers`` of asynchronous batches starts: :func:`default_async_workers` refuses a layout
needing more (a prime ``num_envs`` needs one process per env) rather than start them unasked."""


def default_async_workers(num_envs: int, batch_size: int, cores: int) -> int:
    """The default ``num_workers`` for ``batch_size < num_envs``: the smallest worker count of at
    least ``cores`` (at least 2) that divides ``num_envs`` into blocks dividing ``batch_size``;
    the largest such count when none reaches ``cores``.

    Raises:
        ValueError: when no worker count fits (``batch_size`` shares no block size with
            ``num_envs``), naming both; or when the fewest that fits is more than
            :data:`DEFAULT_ASYNC_WORKERS_PER_CORE` per core (67 envs in batches of 16 fit only
            67 processes of one env), naming the count and what to pass instead.
    """
    fits = [w for w in range(2, num_envs + 1) if num_envs % w == 0 and batch_size % (num_envs // w) == 0]
    if not fits:
        raise ValueError(f"no worker count splits num_envs ({num_envs}) into blocks that make up "
                         f"batch_size ({batch_size}); choose batch_size dividing num_envs, or pass num_workers")
    enough = [w for w in fits if w >= max(2, cores)]
    chosen = enough[0] if enough else fits[-1]
    limit = DEFAULT_ASYNC_WORKERS_PER_CORE * max(2, cores)
    if chosen > limit:
        raise ValueError(
            f"num_envs ({num_envs}) in batches of batch_size ({batch_size}): the fewest worker processes whose "
            f"equal blocks of envs make up a batch is {chosen} (blocks of {num_envs // chosen} "
            f"env{'' if num_envs == chosen else 's'}), more than "
            f"the default starts on {cores} usable cores (at most {limit}); pass num_workers={chosen} to start "
            f"them, or choose a num_envs that is a multiple of batch_size")
    return chosen


def worker_ranges(num_envs: int, num_workers: int) -> Iterator[Tuple[int, int]]:
    """The contiguous env-id ranges ``(start, stop)`` of ``num_workers`` workers
    (``numpy.array_split``'s rule, as the runtime's layout computes them)."""
    base, extra = divmod(num_envs, num_workers)
    start = 0
    for w in range(num_workers):
        stop = start + base + (1 if w < extra else 0)
        yield start, stop
        start = stop


def _runs(pieces: List[Tuple[int, int, int]]) -> List[Tuple[int, int, int]]:
    """The ``(slot, start, stop)`` pieces (ascending env ids), each merged with the next while
    that one's rows follow in the same slot: one run when they all do."""
    runs = [pieces[0]]
    for piece in pieces[1:]:
        slot, start, stop = runs[-1]
        if piece[0] == slot and piece[1] == stop:
            runs[-1] = (slot, start, piece[2])
        else:
            runs.append(piece)
    return runs


#: A completion's worker (its first field): the key batches are sorted by.
_worker = operator.itemgetter(0)

#: What takes in a batch's messages, restarted workers and env ids, and returns its infos vectorised
#: over the batch (the vector env's).
Absorb = Callable[[List[Tuple[int, bytes]], List[dict], np.ndarray], Dict[str, Any]]


class AsyncBatches:
    """What each worker of a vector env was sent, and the batches of whole workers' blocks that
    :meth:`send` writes and :meth:`recv` reads; the vector env's ``async_reset``, ``send`` and
    ``recv`` check its protocol state, then call these.

    Args:
        pool: the vector env's ``ringenv._native.Pool``.
        slots: its :class:`ringenv._slots.Slots` (actions written, results read).
        num_envs, num_workers, batch_size, deterministic: as the vector env's.
        guard: the vector env's ``ringenv._native.CallGuard`` (:attr:`guard`).

    Attributes:
        ranges: each worker's env ids ``(start, stop)``.
    """

    def __init__(self, pool: Any, slots: Slots, num_envs: int, num_workers: int, batch_size: int,
                 deterministic: bool, guard: Any):
        self._pool, self._slots = pool, slots
        self.num_envs, self.batch_size, self.deterministic = num_envs, batch_size, deterministic
        self.ranges = list(worker_ranges(num_envs, num_workers))
        #: Which worker steps each env.
        self._worker_of = np.repeat(np.arange(num_workers), [b - a for a, b in self.ranges])
        #: Workers per recv: all of them for batch_size == num_envs (blocks may differ in size then).
        self._per_recv = num_workers if batch_size == num_envs else batch_size // (num_envs // num_workers)
        #: What each worker runs for send/recv: "reset", "step" or None.
        self._sent: List[Optional[str]] = [None] * num_workers
        #: The env ids array the last recv returned and its workers, ascending (their blocks one
        #: after the other in the ids): send's fast path.
        self._recv_ids: Tuple[Optional[np.ndarray], bytes, List[int]] = (None, b"", [])
        #: Whether the last batch reached the caller: set by the vector env's ``recv`` with a plain
        #: store as its last step, after :meth:`take` and the call guard's exit (no signal handler
        #: can run between it and the caller's assignment), or by :meth:`take` raising an env's
        #: error. If not (a Ctrl-C came first), the next :meth:`wait` asks the pool for that batch
        #: again; what :meth:`take` did is the same a second time (the reset rows are the
        #: workers' zeros already).
        self.taken = True
        #: ``int32`` arrays of the env ids ``start..stop`` by ``(start, stop)``, copied for each recv.
        self._id_runs: Dict[Tuple[int, int], np.ndarray] = {}
        #: ``(actions, env_ids, workers)`` of the last ``send`` since the last ``recv`` or reset:
        #: the same ``send`` made again while those workers are still in flight returns at once.
        #: So the one recovery from a Ctrl-C during a ``send``, or right after it (where the
        #: program cannot tell whether it went out), is to make it again.
        self._last_send: Optional[Tuple[Any, Any, List[int]]] = None
        #: ``(seeds, options)`` of the last reset while no ``recv`` or ``send`` came since: the same
        #: ``async_reset`` made again while every worker still runs it returns at once (the
        #: recovery from a Ctrl-C during or right after it, as for ``send``).
        self._last_reset: Optional[Tuple[List[Optional[int]], Optional[dict]]] = None
        #: Entered (``with``) by the vector env's ``send``, ``async_reset`` and ``recv`` from their
        #: first check to their return: the guard of its synchronous calls, so that one of all
        #: these runs at a time, whatever the thread. A ``send`` while another thread waits in
        #: ``recv`` is refused before any action is written (it used to write its actions, then
        #: fail with PyO3's bare "Already mutably borrowed").
        self.guard = guard

    def _id_run(self, start: int, stop: int) -> np.ndarray:
        """The kept ``int32`` array of the env ids ``start..stop`` (callers copy it: a copy is
        cheaper than ``numpy.arange``)."""
        kept = self._id_runs.get((start, stop))
        if kept is None:
            kept = self._id_runs[(start, stop)] = np.arange(start, stop, dtype=np.int32)
        return kept

    def reset(self, seeds: List[Optional[int]], options: Optional[dict], rust_envs: bool = False) -> None:
        """Sends a reset with ``seeds`` (one per env) and ``options`` to every worker
        (:meth:`ringenv.AsyncVectorEnv.async_reset`; ``rust_envs``: options as JSON).

        Raises:
            ValueError: ``options["reset_mask"]``.
            TypeError: options of a Rust env that are not JSON data.
        """
        if options is not None and "reset_mask" in options:
            raise ValueError("async_reset resets every env: options['reset_mask'] is not supported here")
        shared_seeds, payload = reset_payload(seeds, options, rust_envs)
        workers = list(range(self._pool.num_workers))
        self._last_send = None
        self._last_reset = (seeds, options)
        self._pool.recv_taken()  # a batch an interrupted recv left (see take) is superseded by the reset
        self.taken = True
        slots = [self._slots.next_slot(w) for w in workers]
        self._pool.write_seeds(shared_seeds, None)
        self._slots.before_reuse(slots)
        self._send(workers, "reset", payload)

    def send(self, actions: Any, env_ids: Optional[Sequence[int]]) -> None:
        """Writes ``actions`` of the envs ``env_ids`` and sends their workers a step
        (:meth:`ringenv.AsyncVectorEnv.send`, which lists the errors raised); returns at once when
        it repeats the last ``send`` (equal actions and env ids) whose workers are still in flight."""
        if self._last_send is not None and self._repeats_last_send(actions, env_ids):
            return
        self._last_reset = None
        last_ids, last_bytes, last_workers = self._recv_ids
        if last_ids is not None and env_ids is last_ids and last_ids.tobytes() == last_bytes:
            # what recv returned, unchanged (the caller may have written into it): whole workers, in their order
            ids, workers = last_ids, last_workers
            in_order = True
            if len(workers) == 1 and self._sent[workers[0]] is None:  # one worker's block: one run
                worker = workers[0]
                slot = self._slots.next_slot(worker)
                payload = self._slots.write_actions(actions, ids, None, [(slot, *self.ranges[worker])])
                self._slots.before_reuse((slot,))
                self._last_send = (actions, env_ids, workers)
                self._send(workers, "step", payload)
                return
        else:
            ids, workers = self._whole_workers(env_ids)
            in_order = bool(np.array_equal(ids, self._ids_of(workers)))
        sent, ranges, next_slot = self._sent, self.ranges, self._slots.next_slot
        for w in workers:
            if sent[w] is not None:
                a, b = ranges[w]
                raise ValueError(f"envs {a}..{b - 1} (worker {w}) were sent actions whose "
                                 "results were not received yet: recv them first")
        slots = [next_slot(w) for w in workers]
        if in_order:  # ids are the workers' blocks one after the other: one run per worker
            runs = [(slot, *ranges[w]) for w, slot in zip(workers, slots)]
            payload = self._slots.write_actions(actions, ids, None, runs)
        else:
            by_worker = dict(zip(workers, slots))
            slot_of = np.array([by_worker[int(w)] for w in self._worker_of[ids]])
            payload = self._slots.write_actions(actions, ids, slot_of)
        self._slots.before_reuse(slots)
        self._last_send = (actions, env_ids, workers)
        self._send(workers, "step", payload)

    def repeats_last_reset(self, seeds: List[Optional[int]], options: Optional[dict]) -> bool:
        """Whether ``async_reset`` with ``seeds`` and ``options`` repeats the last reset, which
        every worker still runs (no ``recv`` or ``send`` since): then it went out."""
        last = self._last_reset
        if last is None or any(s != "reset" for s in self._sent):
            return False
        try:
            return last[0] == seeds and bool(last[1] == options)
        except Exception:  # options that do not compare (arrays inside): not a repeat
            return False

    def _repeats_last_send(self, actions: Any, env_ids: Optional[Sequence[int]]) -> bool:
        """Whether ``send(actions, env_ids)`` repeats the last ``send`` and its workers are still
        in flight with it (then it went out: a Ctrl-C came during or right after it)."""
        assert self._last_send is not None
        last_actions, last_ids, workers = self._last_send
        if any(self._sent[w] != "step" for w in workers):
            return False
        same_ids = last_ids is env_ids or (
            last_ids is not None and env_ids is not None and np.array_equal(np.asarray(last_ids), np.asarray(env_ids)))
        if not same_ids:
            return False
        try:
            return last_actions is actions or bool(np.array_equal(np.asarray(last_actions), np.asarray(actions)))
        except Exception:  # actions NumPy cannot compare (a batch of another space): not a repeat
            return False

    def _send(self, workers: List[int], kind: str, payload: Optional[bytes]) -> None:
        """The pool's ``send`` of ``kind`` to ``workers``, then each marked as sent; an exception
        raised meanwhile (a Ctrl-C right after the pool sent) marks the workers the pool did
        send to, so that their results are taken by ``recv``, not refused as unknown."""
        try:
            self._pool.send(workers, kind, payload)
            for w in workers:
                self._sent[w] = kind
        except BaseException:
            for w in workers:
                try:
                    if self._pool.is_busy(w):
                        self._sent[w] = kind
                except Exception:  # closed meanwhile: nothing is in flight
                    pass
            raise

    def _ids_of(self, workers: List[int]) -> np.ndarray:
        """The env ids of ``workers``' blocks, one after the other."""
        return np.concatenate([np.arange(*self.ranges[w]) for w in workers])

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
        if ids.size == 0 or ids.size != sum(self.ranges[w][1] - self.ranges[w][0] for w in workers):
            raise ValueError(f"env_ids {ids.tolist()} do not make up whole workers: the workers step the envs "
                             f"{self.ranges} (start, stop) (a batch is whole workers, as recv returns them)")
        return ids, [int(w) for w in workers]

    def wait(self, timeout: Optional[float]) -> list:
        """Waits for the next batch's workers (the pool's ``recv``).

        Raises:
            ValueError: fewer than ``batch_size`` envs are in flight.
            multiprocessing.TimeoutError, ringenv.errors.WorkerDiedError.
        """
        again, self.taken = not self.taken, False
        self._last_send = self._last_reset = None
        try:
            return self._pool.recv(self._per_recv, self.deterministic, timeout, again)
        except RuntimeError as e:
            if not borrowed(e):
                raise
            raise busy_error("recv") from None

    def _take_block(self, worker: int, slot: int, message: Optional[bytes], copy: bool,
                    absorb: Absorb) -> Tuple[Any, np.ndarray, np.ndarray, np.ndarray, Dict[str, Any]]:
        """:meth:`take` of a batch of one worker's step, with no error and no restart: the same
        results with less bookkeeping (one run of rows; no reset rows to clear)."""
        start, stop = self.ranges[worker]
        self._sent[worker] = None
        self._slots.latest[worker] = slot
        ids = self._id_run(start, stop).copy()
        infos = absorb([] if message is None else [(worker, message)], [], ids)
        infos["env_id"] = ids
        self._recv_ids = (ids, ids.tobytes(), [worker])
        obs, rewards, terminated, truncated = self._slots.rows([(slot, start, stop)], ids, copy)
        return obs, rewards, terminated, truncated, infos

    def take(self, batch: list, copy: bool,
             absorb: Absorb) -> Tuple[Any, np.ndarray, np.ndarray, np.ndarray, Dict[str, Any]]:
        """The results of ``batch`` (from :meth:`wait`), as :meth:`ringenv.AsyncVectorEnv.recv`
        returns them; ``absorb`` turns its messages into infos.

        Raises:
            the exception an env raised.
        """
        if len(batch) == 1:  # one worker's block (the common batch): no runs to merge
            worker, slot, message, err, restart = batch[0]
            if err is None and restart is None and self._sent[worker] == "step":
                return self._take_block(worker, slot, message, copy, absorb)
        elif len(batch) > 1:
            batch.sort(key=_worker)  # ascending env ids (the order is the same in both modes)
        ranges, sent, latest = self.ranges, self._sent, self._slots.latest
        pieces: List[Tuple[int, int, int]] = []
        workers: List[int] = []
        messages: List[Tuple[int, bytes]] = []
        restarted: List[dict] = []
        reset_pieces: List[Tuple[int, int]] = []  # (start, stop) of the workers whose command was a reset
        errors: List[dict] = []
        for worker, slot, message, err, restart in batch:
            start, stop = ranges[worker]
            pieces.append((slot, start, stop))
            workers.append(worker)
            if sent[worker] == "reset":
                reset_pieces.append((start, stop))
            sent[worker] = None
            latest[worker] = slot
            if message is not None:
                messages.append((worker, message))
            if restart is not None:
                restarted.append(restart)
                warn_restarted(restart)
            if err is not None:
                errors.append(err)
        if errors:
            self.taken = True
            raise _remote_errors(errors)
        # Fewer pieces to read (one run of rows when the workers' blocks follow each other in one slot).
        runs = _runs(pieces)
        if len(runs) == 1:
            ids = self._id_run(runs[0][1], runs[0][2]).copy()
        else:
            ids = np.concatenate([self._id_run(a, b) for _, a, b in runs])
        infos = absorb(messages, restarted, ids)
        infos["env_id"] = ids
        self._recv_ids = (ids, ids.tobytes(), workers)
        obs, rewards, terminated, truncated = self._slots.rows(runs, ids, copy)
        for a, b in reset_pieces:  # a reset's rows: no reward, no episode end
            at = int(np.searchsorted(ids, a))
            rewards[at:at + b - a], terminated[at:at + b - a], truncated[at:at + b - a] = 0.0, False, False
        # Not marked taken here: the vector env's recv does that (:attr:`taken`) as its last step.
        return obs, rewards, terminated, truncated, infos
