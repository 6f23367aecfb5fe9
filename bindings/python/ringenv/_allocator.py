"""Keeping glibc's ``malloc`` from handing a step's large arrays back to the kernel.

glibc's ``malloc`` serves blocks above its mmap threshold (128 KiB at start) with ``mmap``, and
gives freed memory at the top of its heap back to the kernel past its trim threshold (twice the
mmap threshold). Freeing one mmapped block raises both thresholds to that block's size (glibc's
malloc.c, "dynamic mmap threshold"; ``mallopt(3)``). Until a process has done that, anything
that allocates and frees a few 100 KiB per step (a ``copy=True`` batch of a 148 KiB Dict
observation, 1.2 MB a step for 8 envs; Gymnasium's ``SyncVectorEnv`` copying the same) gets fresh
pages from the kernel at every step, each faulted in and zeroed: on the 2-core VM, 250 page
faults a step and 8,711 steps/s, against 26,040-40,104 once one 2 MiB array had been freed
before (2026-11-24 23:20 UTC, ``benches/grid.py``'s 0 µs Dict env, 8 envs). Which state a
process is in depends on what it ran before.

:func:`settle_allocator` puts the process in the state of one that has freed a large array: it
allocates and frees :data:`SETTLE_BYTES` (``numpy.empty``: no page is touched). ringenv calls it
when a vector env is made (in the main process, where the batches are copied), and its measurement
loop before every measurement, so that no runtime is measured in a fresh process's worse state.
The cost: glibc then keeps up to twice :data:`SETTLE_BYTES` of freed memory at the heap's top
for reuse instead of returning it at once. Elsewhere (musl, macOS) it is a harmless allocation.
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
    thresholds to that size (see the module's docstring); idempotent, ~10 µs."""
    block = np.empty(SETTLE_BYTES, np.uint8)
    del block
