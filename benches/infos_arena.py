"""Per-step infos through the info arena against through the control socket (the arena turned
off with ``info_arena_bytes=0``): steps/s of a cheap env returning a few scalar infos every step,
and the control messages the main process received per step.

Usage: ``python benches/infos_arena.py [--seconds 2] [--envs 8] [--workers 1]``. Figures from a
shared machine are noisy; rerun on a quiet one before quoting them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import ringenv
from ringenv import _native

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from info_envs import EveryStepInfoEnv  # noqa: E402


def run(seconds: float, envs: int, workers: int, arena) -> tuple:
    real = _native.Pool
    _native.Pool = lambda *a, **k: real(*a, info_arena_bytes=arena, **k)  # type: ignore[misc]
    try:
        vec = ringenv.AsyncVectorEnv([EveryStepInfoEnv for _ in range(envs)], num_workers=workers)
    finally:
        _native.Pool = real  # type: ignore[misc]
    try:
        vec.reset(seed=0)
        actions = np.zeros(envs, np.int64)
        for _ in range(100):
            vec.step(actions)
        before = sum(vec._pool.control_message_counts(w)[1] for w in range(workers))
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            vec.step(actions)
            n += 1
        elapsed = time.perf_counter() - start
        received = sum(vec._pool.control_message_counts(w)[1] for w in range(workers)) - before
        return n * envs / elapsed, received / n
    finally:
        vec.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--workers", type=int, default=1)
    args = p.parse_args()
    for name, arena in (("info arena (default)", None), ("control socket (info_arena_bytes=0)", 0)):
        sps, per_step = run(args.seconds, args.envs, args.workers, arena)
        print(f"{name:38s} {sps:9.0f} steps/s  {per_step:.2f} control messages per step")


if __name__ == "__main__":
    main()
