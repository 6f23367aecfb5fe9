"""How fast big structured observations move: a Dict of ~150 KB in 14 leaves (uint8, int16,
int64). Measures the worker's write path (Gymnasium's ``write_to_shared_memory`` against
``ringenv._obs_writer``), the main process's read path (``copy=True`` lent, copied,
``copy=False``; with and without ``ringenv.settle_allocator()``), where lending starts to pay
against a copy (:data:`LEND_KIB`), and end-to-end steps/s against ``SyncVectorEnv``. Writes its
section of ``benches/RESULTS.md``.

Usage: ``python benches/obs_copies.py [--seconds 1] [--envs 8] [--repeats 5] [--output RESULTS.md|-]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import time
import timeit
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import create_shared_memory, write_to_shared_memory

import results_sections

LEAVES = (
    [(f"rgb{i}", (80, 80, 3), np.uint8) for i in range(5)]
    + [(f"map{i}", (48, 48), np.int16) for i in range(5)]
    + [(f"ids{i}", (1000,), np.int64) for i in range(4)]
)
SPACE = spaces.Dict({k: spaces.Box(0, 100, shape, dtype) for k, shape, dtype in LEAVES})
OBS_BYTES = sum(int(np.prod(s)) * np.dtype(d).itemsize for _, s, d in LEAVES)
GRID_OBS_BYTES = 151_552  # benches/grid.py's Dict (grid.space_bytes(grid.dict_space()))

#: The read paths of :func:`read_row`, by name.
READ_PATHS = ("copy=True", "copy=True, copied", "copy=False")


class BigDictEnv(gym.Env):
    """New arrays every step (as real envs return), infos every step, ~``work_us`` µs of Python
    work per step."""

    metadata = {"render_modes": []}

    def __init__(self, work_us: float = 120.0):
        self.observation_space = SPACE
        self.action_space = spaces.Discrete(4)
        self.work = max(1, int(work_us * 25))  # ~25 loop iterations per microsecond, roughly
        self.t = 0
        self.base = {k: np.zeros(shape, dtype) for k, shape, dtype in LEAVES}

    def _obs(self):
        return {k: v + (self.t % 7) for k, v in self.base.items()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {"t": 0}

    def step(self, action):
        self.t += 1
        acc = 0
        for i in range(self.work):
            acc += i
        return self._obs(), 1.0, False, self.t % 200 == 0, {"t": self.t, "score": acc % 97, "ok": True}


def _best_s(fn: Callable[[], Any], seconds: float, repeats: int) -> float:
    """Seconds per call of ``fn``: the best of ``repeats`` ``timeit`` runs of about
    ``seconds / repeats`` each."""
    timer = timeit.Timer(fn)
    number, took = timer.autorange()
    number = max(1, int(number * seconds / repeats / max(took, 1e-9)))
    return min(timer.repeat(repeat=repeats, number=number)) / number


def write_path(seconds: float, repeats: int) -> Dict[str, float]:
    """Seconds to write one env's observation into its row, per writer."""
    from ringenv import _layout, _obs_writer

    n = 8
    leaves = _layout.plan(SPACE, n)
    bufs = [np.zeros(_layout.leaf_bytes(leaf) * n, np.uint8) for leaf in leaves]
    mem = create_shared_memory(SPACE, n=n, ctx=_layout._Context(bufs))
    value = BigDictEnv()._obs()
    write = _obs_writer.writer(SPACE, 3, mem)
    return {
        "Gymnasium `write_to_shared_memory`": _best_s(lambda: write_to_shared_memory(SPACE, 3, value, mem),
                                                      seconds, repeats),
        "ringenv `_obs_writer` (one `copyto` per leaf)": _best_s(lambda: write(value), seconds, repeats),
    }


#: Batch sizes (KiB) of :func:`lend_vs_copy`.
LEND_KIB = (4, 16, 64, 256, 1024)


def lend_vs_copy(seconds: float, repeats: int) -> Dict[int, Dict[str, float]]:
    """Per batch size of :data:`LEND_KIB`: seconds of ``Leases.lend`` of a slot of one ``uint8``
    leaf of 8 rows, and of a ``copy()`` of the same batch (over a segment-like buffer)."""
    from ringenv._leases import Leases

    out: Dict[int, Dict[str, float]] = {}
    segment = np.zeros(3 * max(LEND_KIB) * 1024, np.uint8)
    for kib in LEND_KIB:
        size = kib * 1024
        leases = Leases(segment, [(s * size, (s + 1) * size) for s in range(3)],
                        lambda s, token, start, size=size: np.frombuffer(token, np.uint8, size).reshape(8, -1),
                        lambda batch, rows: batch.view())
        batch = segment[:size].reshape(8, -1)
        out[kib] = {"lend": _best_s(lambda: leases.lend(0), seconds, repeats),
                    "copy": _best_s(batch.copy, seconds, repeats)}
    return out


def _env(obs: str) -> Callable[[], gym.Env]:
    """A factory of the env of the read rows' observation ``obs`` (one of :data:`READ_OBS`)."""
    if obs == "14 leaves":
        return BigDictEnv
    from grid import GridEnv  # benches/grid.py's env: its 12-leaf Dict, one preallocated observation

    return functools.partial(GridEnv, 0.0, "Dict 148 KiB", "none")


def read_row(obs: str, path: str, workers: Optional[int], settle: bool, envs: int, seconds: float,
             repeats: int) -> float:
    """Seconds per batch of the read ``path`` (one of :data:`READ_PATHS`) of a live vector env of
    ``envs`` envs of observation ``obs`` (``workers``: its ``num_workers``, ``None`` for the
    default), in this process, keeping the last batch as a policy loop does; with ``settle``, after
    :func:`ringenv.settle_allocator`."""
    import ringenv
    import ringenv.vector

    if settle:
        ringenv.settle_allocator()
    if path == "copy=True, copied":
        ringenv.vector.lends = lambda *args: False
    vec = ringenv.AsyncVectorEnv([_env(obs)] * envs, num_workers=workers, copy=path != "copy=False")
    try:
        vec.reset(seed=0)
        slots, held = vec._slots, [None]

        def read() -> None:
            held[0] = slots.observations(0, vec.copy)

        return _best_s(read, seconds, repeats)
    finally:
        vec.close()


def _read_in_child(row: Dict[str, Any], envs: int, seconds: float, repeats: int) -> float:
    """:func:`read_row` of ``row`` (a :data:`READ_ROWS` entry as a dict) in a new Python process
    (its allocator as a fresh program's)."""
    spec = json.dumps({**row, "envs": envs, "seconds": seconds, "repeats": repeats})
    out = subprocess.run([sys.executable, __file__, "--read-row", spec], check=True, capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parent)
    return float(out.stdout.strip().splitlines()[-1])


#: The observations of the read rows: this script's (a batch of 8 has leaves of 37-154 KB, the
#: largest above glibc's first mmap threshold, 128 KiB) and ``benches/grid.py``'s (every leaf of
#: a batch of 8 at or below it: served from the heap, whose top glibc trims until it is settled).
READ_OBS = ("14 leaves", "grid Dict")

#: The read rows: (observation, path, num_workers, settle).
READ_ROWS = [(obs, "copy=True", None, True) for obs in READ_OBS] \
    + [(obs, "copy=True, copied", workers, settle) for obs in READ_OBS for workers in (None, 0) for settle in (True, False)] \
    + [("14 leaves", "copy=False", None, True)]


def end_to_end(seconds: float, envs: int) -> Dict[str, float]:
    """Steps/s through the one measurement loop, per runtime."""
    import ringenv
    import ringenv.vector
    from ringenv.cli._measure import measure

    def copied():
        lends, ringenv.vector.lends = ringenv.vector.lends, lambda *args: False
        try:
            return ringenv.AsyncVectorEnv([BigDictEnv] * envs)
        finally:
            ringenv.vector.lends = lends

    makers = {
        "Gymnasium `SyncVectorEnv`": lambda: gym.vector.SyncVectorEnv([BigDictEnv] * envs),
        "ringenv, default (`copy=True`, batches lent)": lambda: ringenv.AsyncVectorEnv([BigDictEnv] * envs),
        "ringenv, `copy=True`, every batch copied (lending off)": copied,
        "ringenv, `copy=False`": lambda: ringenv.AsyncVectorEnv([BigDictEnv] * envs, copy=False),
    }
    return {name: measure(make, num_envs=envs, seconds=seconds, seed=0).steps_per_s for name, make in makers.items()}


def section(report: Dict[str, Any]) -> List[str]:
    envs, batch = report["envs"], report["envs"] * OBS_BYTES
    end = results_sections.markers("obs_copies")[1]
    lines = results_sections.section_head(
        "obs_copies", "Big structured observations: writing, lending, copying", report) + [
        f"Observation: a Dict of {len(LEAVES)} leaves (uint8, int16, int64), {OBS_BYTES:,} bytes per env; "
        f"{envs} envs ({batch:,} bytes a batch). Function timings: best of {report['repeats']} `timeit` runs.",
        "",
        "| path | µs | GB/s |",
        "|---|---:|---:|",
    ]
    for name, s in report["write"].items():
        lines.append(f"| worker: one env's observation into its row, {name} | {s * 1e6:,.1f} | "
                     f"{OBS_BYTES / s / 1e9:.1f} |")
    for row in report["read"]:
        layout = "default layout" if row["workers"] is None else f"`num_workers={row['workers']}`"
        state = ", after `ringenv.settle_allocator()`" if row["settle"] else ""
        what = {"copy=True": "`copy=True`, lent (the default for this batch: new views of the slot)",
                "copy=True, copied": "`copy=True`, copied (lending off, as when the caller holds the other slots)",
                "copy=False": "`copy=False` (views of the slot)"}[row["path"]]
        obs = (f"{OBS_BYTES:,} B in 14 leaves" if row["obs"] == "14 leaves"
               else f"{GRID_OBS_BYTES:,} B in 12 leaves, `grid.py`'s")
        lines.append(f"| main: a batch of {envs} of {obs}, {what}, {layout}{state} | {row['s'] * 1e6:,.1f} | "
                     f"{envs * (OBS_BYTES if row['obs'] == '14 leaves' else GRID_OBS_BYTES) / row['s'] / 1e9:.1f} |")
    from ringenv._leases import LEASE_MIN_BYTES

    lines += ["", f"Lending against copying one batch of one `uint8` leaf (8 rows), by size; lending starts at "
              f"{LEASE_MIN_BYTES // 1024} KiB (`ringenv._leases.LEASE_MIN_BYTES`):", "",
              "| batch | lend µs | copy µs |", "|---:|---:|---:|"]
    for kib, t in report["lend_vs_copy"].items():
        lines.append(f"| {kib} KiB | {t['lend'] * 1e6:.2f} | {t['copy'] * 1e6:.2f} |")
    lines += ["", f"End to end, {envs} envs of ~120 µs of Python work per step, infos every step, "
              f"{report['seconds']:g} s per row through the one measurement loop (`ringenv.cli._measure`, "
              "which settles the allocator first):", "", "| runtime | steps/s | x SyncVectorEnv |", "|---|---:|---:|"]
    sync = report["end_to_end"]["Gymnasium `SyncVectorEnv`"]
    for name, sps in report["end_to_end"].items():
        lines.append(f"| {name} | {sps:,.0f} | {sps / sync:.2f}x |")
    return lines + [end]


def main(argv: List[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=1.0, help="seconds per row (timeit rows: all repeats)")
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    results_sections.add_output_argument(p)
    p.add_argument("--read-row", help=argparse.SUPPRESS)  # internal: one read_row in this process
    a = p.parse_args(argv)
    if a.read_row:
        spec = json.loads(a.read_row)
        print(read_row(spec["obs"], spec["path"], spec["workers"], spec["settle"], spec["envs"], spec["seconds"],
                       spec["repeats"]))
        return 0
    report: Dict[str, Any] = {**results_sections.report_head(a), "envs": a.envs, "repeats": a.repeats,
                              "seconds": a.seconds}
    t0 = time.perf_counter()
    report["write"] = write_path(a.seconds, a.repeats)
    report["read"] = []
    for obs, path, workers, settle in READ_ROWS:
        row = {"obs": obs, "path": path, "workers": workers, "settle": settle}
        report["read"].append({**row, "s": _read_in_child(row, a.envs, a.seconds, a.repeats)})
    report["lend_vs_copy"] = lend_vs_copy(a.seconds, a.repeats)
    report["end_to_end"] = end_to_end(a.seconds, a.envs)
    results_sections.publish("obs_copies", section(report), a.output)
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
