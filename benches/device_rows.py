"""The GPU path against the CPU path and against the path a user would write, on a machine with
an NVIDIA GPU: the rows behind docs/GPU.md's figures.

Each workload runs three ways, with default settings otherwise, the three alternating round by round:

- *cpu*: ringenv on the CPU (``device="cpu"``), the batch as NumPy arrays;
- *cuda*: ringenv with ``device="cuda"`` (batches staged in pinned memory and copied to the GPU
  asynchronously; ``torch.cuda.synchronize`` after the last timed step);
- *user*: ringenv on the CPU, then ``torch.as_tensor(x).to("cuda", non_blocking=True)`` for each
  array of the batch (each leaf of a Dict), the loop a user writes without ``device=``.

Each row is one vector env measured by ``ringenv.cli._measure.measure`` (steps/s, the median of
``--rounds`` rounds of ``--seconds`` each). Targets: *cuda* at least 0.9x *cpu* and at least
*user* on every row. Writes the ``device_rows`` section of ``benches/RESULTS.md``. With
``--device cpu`` it runs on any machine, the *cuda* and *user* paths on the CPU, and prints only:
a check of the script, not a measurement of the GPU path.

Usage::

    python benches/device_rows.py                      # every row, ~3 min on 16 cores
    python benches/device_rows.py --rows cartpole256_16w,dict148k32_4w --rounds 1
    python benches/device_rows.py --device cpu --seconds 0.3 --rounds 1
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results_sections  # noqa: E402
import ringenv  # noqa: E402
from grid import GridEnv  # noqa: E402
from python_envs import make_env  # noqa: E402
from ringenv.cli._measure import measure  # noqa: E402

PATHS = ("cpu", "cuda", "user")
#: The targets: *cuda* over *cpu*, and *cuda* over *user*.
TARGET_VS_CPU, TARGET_VS_USER = 0.9, 1.0


class ToDevice:
    """A vector env whose batches go to ``device`` as the user's own code would send them: each
    array (each leaf of a dict) through ``torch.as_tensor(x).to(device, non_blocking=True)``."""

    def __init__(self, envs: Any, device: str) -> None:
        import torch

        self._envs, self._device, self._as_tensor = envs, device, torch.as_tensor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._envs, name)

    def _to(self, x: Any) -> Any:
        if isinstance(x, dict):
            return {k: self._to(v) for k, v in x.items()}
        return self._as_tensor(x).to(self._device, non_blocking=True)

    def _batch(self, result: tuple) -> tuple:
        *arrays, infos = result
        return (*(self._to(a) for a in arrays), infos)

    def step(self, actions: Any) -> tuple:
        return self._batch(self._envs.step(actions))

    def recv(self) -> tuple:
        return self._batch(self._envs.recv())


#: name -> (description, num_envs, batch_size, make(device) -> vector env).
WORKLOADS: Dict[str, tuple] = {}


def _python(workers: int, batch: Optional[int]) -> tuple:
    fns = [functools.partial(make_env, 750.0)] * 32
    what = f"Python env of 750 µs, 32 envs, {workers} worker{'s' * (workers > 1)}" + (
        f", async batches of {batch}" if batch else "")
    return what, 32, batch, lambda device: ringenv.AsyncVectorEnv(fns, num_workers=workers, batch_size=batch,
                                                                  device=device)


def _cartpole(workers: int) -> tuple:
    return (f"Rust CartPole, 256 envs, {workers} workers", 256, None,
            lambda device: ringenv.make_vec("CartPole-v1", 256, vector_kwargs={"num_workers": workers,
                                                                              "device": device}))


def _dict(workers: int) -> tuple:
    fns = [functools.partial(GridEnv, 0.0, "Dict 148 KiB", "none")] * 32
    return (f"Dict of 148 KiB (`benches/grid.py`), ~0 µs, 32 envs, {workers} workers", 32, None,
            lambda device: ringenv.AsyncVectorEnv(fns, num_workers=workers, device=device))


for _w in (1, 4):
    WORKLOADS[f"py750x32_{_w}w"] = _python(_w, None)
WORKLOADS["py750x32_16w_async8"] = _python(16, 8)
for _w in (4, 16):
    WORKLOADS[f"cartpole256_{_w}w"] = _cartpole(_w)
WORKLOADS["dict148k32_4w"] = _dict(4)


def run_path(workload: str, path: str, device: str, seconds: float) -> Dict[str, float]:
    """One measurement of ``workload`` on ``path``: steps/s and the main process's cores."""
    _, n, batch, make = WORKLOADS[workload]
    sync = None
    if device == "cuda" and path != "cpu":
        import torch

        sync = torch.cuda.synchronize
    if path == "cpu":
        build = functools.partial(make, "cpu")
    elif path == "cuda":
        build = functools.partial(make, device)
    else:
        build = lambda: ToDevice(make("cpu"), device)  # noqa: E731
    m = measure(build, num_envs=n, seconds=seconds, seed=0, batch_size=batch, warmup_s=0.3, synchronize=sync)
    return {"steps_per_s": m.steps_per_s, "main_cores": m.main_cpu_s / m.wall_s}


def section(report: Dict[str, Any]) -> List[str]:
    a = report["args"]
    lines = results_sections.section_head("device_rows", "The GPU path against the CPU path and the user's own "
                                          "copies", report, f", GPU {report['gpu']}") + [
        "",
        f"Default settings; steps/s, the median of {a.rounds} round(s) of {a.seconds:g} s (spread in brackets), "
        "the three paths alternating. *cpu*: `device=\"cpu\"`; *cuda*: `device=\"cuda\"`; *user*: `device=\"cpu\"`, "
        "then `torch.as_tensor(x).to(\"cuda\", non_blocking=True)` for each array. Main: the main process's cores "
        "on the *cuda* path.",
        "",
        "| workload | cpu | cuda | user | cuda / cpu | cuda / user | main cores (cuda) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        cells = [results_sections.median_spread(r[p]) for p in PATHS]
        lines.append(f"| {r['what']} | " + " | ".join(cells)
                     + f" | {r['vs_cpu']:.2f}x | {r['vs_user']:.2f}x | {r['main_cores']:.2f} |")
    lines += ["", "| target | this run | met |", "|---|---|---|"]
    for t in report["targets"]:
        lines.append(f"| {t['target']} | {t['figure']} | {'met' if t['met'] else '**not met**'} |")
    return lines + [results_sections.markers("device_rows")[1]]


def targets(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Each target with its worst row and whether it is met."""
    out = []
    for key, bound, text in (("vs_cpu", TARGET_VS_CPU, f"`device=\"cuda\"` at least {TARGET_VS_CPU:g}x the CPU path"),
                             ("vs_user", TARGET_VS_USER, "`device=\"cuda\"` never slower than the user's own copies")):
        worst = min(rows, key=lambda r: r[key])
        out.append({"target": text + " on every row", "figure": f"worst {worst[key]:.2f}x ({worst['what']})",
                    "met": worst[key] >= bound})
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=lambda s: [w for w in s.split(",") if w], default=list(WORKLOADS),
                   help="comma-separated workloads (default all; --list names them)")
    p.add_argument("--list", action="store_true", help="print the workloads and exit")
    p.add_argument("--seconds", type=float, default=1.5, help="measured seconds per row and path (default 1.5)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the three paths (default 2)")
    p.add_argument("--device", default="cuda", help="the device of the cuda and user paths (default cuda; cpu: "
                                                    "a check of the script on any machine, printed only)")
    results_sections.add_output_argument(p)
    a = p.parse_args(argv)
    if a.list:
        print("\n".join(f"{k}: {v[0]}" for k, v in WORKLOADS.items()))
        return 0
    unknown = [w for w in a.rows if w not in WORKLOADS]
    if unknown:
        p.error(f"unknown workloads {unknown}; --list names them")
    gpu = "none"
    if a.device != "cpu":
        import torch

        if not torch.cuda.is_available():
            p.error("no CUDA device: run on a machine with an NVIDIA GPU, or pass --device cpu to check the script")
        gpu = torch.cuda.get_device_name()
    else:
        a.output = "-"
    report: Dict[str, Any] = {**results_sections.report_head(a), "gpu": gpu, "rows": []}
    for workload in a.rows:
        figures: Dict[str, List[Dict[str, float]]] = {path: [] for path in PATHS}
        for round_ in range(a.rounds):
            for path in PATHS if round_ % 2 == 0 else PATHS[::-1]:
                figures[path].append(run_path(workload, path, a.device, a.seconds))
                print(f"  {workload} {path}: {figures[path][-1]['steps_per_s']:,.0f} steps/s", file=sys.stderr,
                      flush=True)
        rates = {path: [f["steps_per_s"] for f in figures[path]] for path in PATHS}
        med = {path: float(np.median(v)) for path, v in rates.items()}
        report["rows"].append({"workload": workload, "what": WORKLOADS[workload][0], **rates,
                               "vs_cpu": med["cuda"] / med["cpu"], "vs_user": med["cuda"] / med["user"],
                               "main_cores": float(np.median([f["main_cores"] for f in figures["cuda"]]))})
    report["targets"] = targets(report["rows"])
    results_sections.publish("device_rows", section(report), a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
