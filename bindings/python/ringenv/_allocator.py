"""An opt-in for processes that copy large batches: keep glibc's ``malloc`` from handing a step's
arrays back to the kernel.

glibc's ``malloc`` serves blocks above its mmap threshold (128 KiB at start) with ``mmap``, and
gives freed memory at the top of its heap back to the kernel past its trim threshold (twice the
mmap threshold). Freeing one mmapped block raises both thresholds to that block's size (glibc's
malloc.c, "dynamic mmap threshold"; ``mallopt(3)``). Until a process has done that, anything that
allocates and frees a few 100 KiB per step (a copied ``copy=True`` batch of a 148 KiB Dict
observation: 1.2 MB a step for 8 envs) gets fresh pages from the kernel at every step, each
faulted in and zeroed: ``benches/obs_copies.py`` copies such a batch in ~50 µs from the heap and
~330 µs from fresh pages. Which state a process is in depends on what it ran before.

:func:`settle_allocator` puts the process in the state of one that has freed a large array: it
allocates and frees :data:`SETTLE_BYTES` (``numpy.empty``: no page is touched). ringenv never
calls it in a user's process (a vector env lends a batch this large instead of copying it where it
can); call it once in a process whose batches are copied (it holds on to earlier batches, or
uses asynchronous batches). ``ringenv tune`` and ``benches/`` call it before every
measurement, so that no runtime is measured in a fresh process's worse state. The cost: glibc then
keeps up to twice :data:`SETTLE_BYTES` of freed memory at the heap's top for reuse instead of
returning it at once. Elsewhere (musl, macOS) it is a harmless allocation.

    >>> import ringenv
    >>> ringenv.settle_allocator()
"""

from __future__ import annotations

import numpy as np

__all__ = ["SETTLE_BYTES", "settle_allocator"]

#: Bytes of the block :func:`settle_allocator` allocates and frees: half of glibc's largest
#: dynamic mmap threshold (``DEFAULT_MMAP_THRESHOLD_MAX``, 32 MiB on 64-bit; glibc's malloc.c),
#: so that batches of leaves up to 16 MiB come from the heap.
SETTLE_BYTES = 16 << 20


def settle_allocator() -> None:
    """Allocates and frees :data:`SETTLE_BYTES` bytes, which raises glibc's mmap and trim
    thresholds to that size for the rest of the process (see ``ringenv/_allocator.py``);
    idempotent, ~10 µs."""
    block = np.empty(SETTLE_BYTES, np.uint8)
    del block
