"""Lending a slot's observations to the caller instead of copying them (``copy=True``).

Copying a large batch out of shared memory holds the workers up: for the grid's Dict observation
of 148 KiB per env, 8 envs, 2 workers of 200 µs envs reached 1.68x ``SyncVectorEnv`` with the copy
where ``copy=False`` reached 1.97x (``benches/RESULTS.md``). A pool whose observation batch is at
least :data:`LEASE_MIN_BYTES` therefore gets a third slot and hands its caller *views* of the slot
the workers just wrote; a slot is **held** while any array whose memory lies in it is alive, and
commands only go to slots not held (:meth:`Leases.free_slot`). A slot is lent only when another
one stays free for the next command; otherwise its observations are copied.

"Held" is known from the reference count of one NumPy array per slot (the *token*, made from
:class:`_SlotMemory`), which every view derived from a lent observation references as its
``base``. Before every ``os.fork`` the slots held are retired: no command writes them again.
A pool in ``autoreset_mode=DISABLED``, whose masked resets copy rows from the slot that held them,
never lends (:func:`lends`).
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import Any, Callable, List, Optional, Set, Tuple

import numpy as np

__all__ = ["LEASE_MIN_BYTES", "LENDING_DEPTH", "Leases", "lends"]

#: The smallest observation batch (bytes, every env's observation of one slot) that is lent rather
#: than copied: about where a copy starts to cost more than a lend's bookkeeping (a new view per
#: leaf, a reference count per slot). ``benches/obs_copies.py`` on a 2-core machine, one ``uint8``
#: leaf: lending 0.72-0.76 µs at every size; copying 0.29 µs at 16 KiB, 1.19 µs at 64 KiB, 4.26 µs
#: at 256 KiB. Smaller batches keep plain private copies (no third slot, nothing held at a fork).
LEASE_MIN_BYTES = 64 * 1024

#: Slots a pool that lends has: the one lent, the one the next command writes, and one more so a
#: caller may hold the previous batch too.
LENDING_DEPTH = 3

#: Every live :class:`Leases`, for the fork hook.
_LIVE: "weakref.WeakSet[Leases]" = weakref.WeakSet()


def lends(copy: bool, obs_bytes: int, views: bool, device: Any, masked_resets: bool) -> bool:
    """Whether a pool lends its observations: ``copy=True``, an observation batch of
    ``obs_bytes`` bytes (in shared memory) of at least :data:`LEASE_MIN_BYTES`, observations read
    as views of arrays (``views``: a Box, Discrete, MultiDiscrete or MultiBinary space, or a Dict or
    Tuple of them), no GPU ``device`` (whose results are tensors on the GPU), and no
    ``masked_resets`` expected: a pool in ``autoreset_mode=DISABLED`` copies, since its envs are
    reset by masked resets, which keep the other envs' observations from the previous slot, and a
    lent slot holds what the caller wrote into it."""
    return bool(copy) and views and device is None and obs_bytes >= LEASE_MIN_BYTES and not masked_resets


class _SlotMemory:
    """``nbytes`` bytes of ``segment`` (a ``uint8`` array over the shared mapping) from byte
    ``offset``, exposed through NumPy's array interface (version 3): ``numpy.asarray`` of it is an
    array whose ``base`` is this object, so views of that array reference that array (the token)
    and not the segment. Holds ``segment``, which holds the mapping."""

    __slots__ = ("segment", "__array_interface__")

    def __init__(self, segment: np.ndarray, offset: int, nbytes: int):
        if offset < 0 or offset + nbytes > segment.nbytes:
            raise ValueError(f"bytes {offset}..{offset + nbytes} are outside the segment of {segment.nbytes} bytes")
        self.segment = segment
        self.__array_interface__ = {"version": 3, "shape": (nbytes,), "typestr": "|u1",
                                    "data": (segment.__array_interface__["data"][0] + offset, False)}


class Leases:
    """The slots of one pool whose observations are lent to the caller.

    Args:
        segment: the pool's segment as a ``uint8`` array.
        spans: per slot, the ``(start, stop)`` byte offsets in ``segment`` that hold every
            observation leaf of that slot.
        build: ``build(slot, token, start)`` gives the slot's observation batch as views of
            ``token`` (a ``uint8`` array of ``spans[slot]``, whose byte 0 is segment byte
            ``start``), batched as the observation space.
        fresh: ``fresh(batch, rows)`` gives ``batch``, or its rows ``rows = (start, stop)`` (env
            ids; ``None``: all), in new containers holding new views of its arrays (what
            :meth:`lend` returns; a caller may change either).
    """

    def __init__(self, segment: np.ndarray, spans: List[Tuple[int, int]],
                 build: Callable[[int, np.ndarray, int], Any],
                 fresh: Callable[[Any, Optional[Tuple[int, int]]], Any]):
        self._tokens = [np.asarray(_SlotMemory(segment, a, b - a)) for a, b in spans]
        self._batches = [build(s, token, spans[s][0]) for s, token in enumerate(self._tokens)]
        self._fresh = fresh
        #: Each token's reference count while the caller holds nothing of it.
        self._own = [self._count(s) for s in range(len(self._tokens))]
        #: Slots held when the process forked: never written again.
        self.retired: Set[int] = set()
        _LIVE.add(self)

    @property
    def depth(self) -> int:
        return len(self._tokens)

    def _count(self, slot: int) -> int:
        return sys.getrefcount(self._tokens[slot])

    def held(self, slot: int) -> bool:
        """Whether the caller holds an array of ``slot``'s observations, or ``slot`` was retired
        at a fork: no command may write it."""
        return slot in self.retired or self._count(slot) > self._own[slot]

    def free_slot(self, preferred: int) -> int:
        """``preferred`` if it is not :meth:`held`, else the first slot that is not.

        Raises:
            RuntimeError: every slot is held (cannot happen: :meth:`lend` keeps one free).
        """
        if not self.held(preferred):
            return preferred
        for s in range(self.depth):
            if not self.held(s):
                return s
        raise RuntimeError("every slot of the pool is held by the caller")  # pragma: no cover - lend keeps one free

    def lend(self, slot: int, rows: Optional[Tuple[int, int]] = None) -> Optional[Any]:
        """``slot``'s observation batch (or its rows ``rows = (start, stop)``: one run of envs of an
        asynchronous batch) as new views for the caller when another slot stays free for the next
        command (not :meth:`held`), else ``None``: copy it instead."""
        if slot in self.retired:
            return None
        for s in range(self.depth):
            if s != slot and not self.held(s):
                return self._fresh(self._batches[slot], rows)
        return None

    def retire_held(self) -> None:
        """Retires the slots held now (before a fork: see the module's docstring)."""
        self.retired.update(s for s in range(self.depth) if self.held(s))


def _before_fork() -> None:
    for leases in list(_LIVE):
        leases.retire_held()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork)
