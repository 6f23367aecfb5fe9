"""The busy neighbour of the benchmarks: one process keeping a core busy, as another user's job on
a shared machine would."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from typing import Iterator

#: What the neighbour runs: a Python loop that never sleeps (one core's worth of runnable work).
PROGRAM = "while True: pass"

#: Seconds the neighbour runs before the first measurement, so the kernel already counts it as
#: runnable when the first pool starts.
HEAD_START_S = 0.2


@contextlib.contextmanager
def busy_neighbour(head_start_s: float = HEAD_START_S) -> Iterator[subprocess.Popen]:
    """Runs :data:`PROGRAM` for the ``with`` block, after a head start; kills it on the way out."""
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM])
    try:
        time.sleep(head_start_s)
        yield proc
    finally:
        proc.kill()
        proc.wait()
