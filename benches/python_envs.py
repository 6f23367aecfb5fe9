"""Throughput of Python envs through ringenv and through Gymnasium's vector envs, in one run.

The null env (``--costs 0``) returns a preallocated ``(4,)`` float32 observation, so the runtime's
own overhead is measured; a busy env of ``C`` µs busy-waits on ``time.perf_counter`` (a sleep
would leave its core free and overshoot by the timer slack). Per cost, a single-env loop gives
the ceiling (cores x its steps/s) and the env's own cost; each row reports steps/s, its ratio to
the ceiling, tree CPU over the env's own cost and tree cores. ringenv rows (``copy=False,
check_actions=False``, 1, 2, 4, ... ``--max-workers`` workers, sync and async batches) against
Gymnasium's AsyncVectorEnv and SyncVectorEnv; ``--device cuda`` adds ringenv rows on the GPU.
``benches/run_all.py`` runs it and writes its tables and :func:`evaluate_targets`' verdicts.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import gymnasium as gym
import numpy as np
import psutil
import results_sections
from ringenv.cli._common import usable_cores
from ringenv.cli._measure import Measurement, busy_wait, measure
from ringenv.cli._measure import single_loop_steps_per_s as _single_loop

OBS_SHAPE = (4,)


class NullEnv(gym.Env):
    """Returns a preallocated observation (float32, shape ``(4,)``); reward 0, never ends."""

    observation_space = gym.spaces.Box(-1.0, 1.0, OBS_SHAPE, np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        self.obs = np.zeros(OBS_SHAPE, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.obs, {}

    def step(self, action):
        return self.obs, 0.0, False, False, {}


class BusyEnv(NullEnv):
    """:class:`NullEnv` whose ``step`` busy-waits ``cost_s`` seconds on ``time.perf_counter``
    (CPU-bound, like a real env's work; see the module docstring for why not ``time.sleep``)."""

    def __init__(self, cost_s: float):
        super().__init__()
        self.cost_s = cost_s

    def step(self, action):
        busy_wait(self.cost_s)
        return self.obs, 0.0, False, False, {}


def make_env(cost_us: float) -> gym.Env:
    """The null env for a cost of 0 µs, else a busy env of ``cost_us`` µs per step."""
    return NullEnv() if cost_us == 0 else BusyEnv(cost_us * 1e-6)



def figures(m: Measurement) -> Dict[str, Any]:
    """The figures this benchmark reports of one measurement of the one measurement loop
    (``ringenv.cli._measure``): ``steps_per_s``, ``env_steps``, ``wall_s``, ``startup_s``
    (building the env), ``cpu_s`` (tree CPU seconds in the timed window) and ``tree_cores``
    (``cpu_s / wall_s``)."""
    return {"steps_per_s": m.steps_per_s, "env_steps": m.env_steps, "wall_s": m.wall_s, "startup_s": m.startup_s,
            "cpu_s": m.tree_cpu_s, "tree_cores": m.tree_cpu_s / m.wall_s}


def single_loop_steps_per_s(cost_us: float, seconds: float) -> float:
    """Steps/s of one env stepped by a plain ``env.step`` loop in this process."""
    return _single_loop(functools.partial(make_env, cost_us), seconds)



def worker_counts(max_workers: int) -> List[int]:
    """1, 2, 4, ... below ``max_workers``, then ``max_workers``."""
    counts, w = {max_workers}, 1
    while w < max_workers:
        counts.add(w)
        w *= 2
    return sorted(counts)


def configurations(num_envs: int, max_workers: int, device: Optional[str]) -> List[Dict[str, Any]]:
    """Every row of one cost: ringenv's (synchronous for each worker count, then asynchronous
    batches of ``num_envs/2`` and ``num_envs/4`` wherever such a batch is whole workers' blocks:
    from 2 and 4 workers; each again on ``device`` when given), then Gymnasium's two vector envs."""
    rows = []
    workers = worker_counts(max_workers)
    for dev in [None] + ([device] if device else []):
        for w in workers:
            rows.append({"runtime": "ringenv AsyncVectorEnv", "mode": "step", "workers": w, "batch_size": num_envs,
                         "device": dev or "cpu"})
        for divisor in (2, 4):
            for w in workers:
                # ringenv's rule: blocks of num_envs/w envs per worker, a batch of whole blocks
                if num_envs % w == 0 and num_envs % divisor == 0 and w % divisor == 0:
                    rows.append({"runtime": "ringenv AsyncVectorEnv", "mode": "async", "workers": w,
                                 "batch_size": num_envs // divisor, "device": dev or "cpu"})
    rows.append({"runtime": "gymnasium AsyncVectorEnv", "mode": "step", "workers": num_envs, "batch_size": num_envs,
                 "device": "cpu"})
    rows.append({"runtime": "gymnasium SyncVectorEnv", "mode": "step", "workers": None, "batch_size": num_envs,
                 "device": "cpu"})
    return rows


def run_row(row: Dict[str, Any], cost_us: float, num_envs: int, seconds: float) -> Dict[str, Any]:
    """Measures one row with the one measurement loop; returns its figures (see :func:`figures`)."""
    import ringenv

    fns = [functools.partial(make_env, cost_us)] * num_envs
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 2, row["batch_size"], dtype=np.int64) for _ in range(16)]
    synchronize = None
    kwargs: Dict[str, Any] = {"copy": False, "num_workers": row["workers"], "check_actions": False,
                              "batch_size": row["batch_size"]}
    if row["device"] != "cpu":
        import torch

        kwargs["device"] = row["device"]
        synchronize = torch.cuda.synchronize  # the clock stops once the last copy has landed

    def make():
        if row["runtime"] == "ringenv AsyncVectorEnv":
            return ringenv.AsyncVectorEnv(fns, **kwargs)
        if row["runtime"] == "gymnasium AsyncVectorEnv":
            return gym.vector.AsyncVectorEnv(fns, shared_memory=True, copy=False)
        return gym.vector.SyncVectorEnv(fns, copy=False)

    m = measure(make, num_envs=num_envs, seconds=seconds, seed=0, batch_size=row["batch_size"], actions=actions,
                warmup_s=min(1.0, 0.2 * seconds), synchronize=synchronize)
    return figures(m)


def label(row: Dict[str, Any]) -> str:
    """A row's configuration in words, e.g. ``ringenv AsyncVectorEnv, 4 workers, async batch 16``."""
    w = "in-process" if row["workers"] is None else f"{row['workers']} worker{'s' if row['workers'] != 1 else ''}"
    mode = "step" if row["mode"] == "step" else f"async batch {row['batch_size']}"
    dev = "" if row["device"] == "cpu" else f", device={row['device']}"
    return f"{row['runtime']}, {w}, {mode}{dev}"



def _ok(rows: List[Dict[str, Any]], **match: Any) -> List[Dict[str, Any]]:
    return [r for r in rows if "steps_per_s" in r and all(r[k] == v for k, v in match.items())]


def evaluate_targets(report: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The speed targets that this benchmark measures, each as ``{"target", "measured",
    "met"}``; ``met`` is ``True``, ``False`` or ``None`` (not measured in this run, ``measured``
    says why). Computed from ``report`` (this script's JSON) alone."""
    cores, n = report["cores"], report["num_envs"]
    by_cost = {c["cost_us"]: c for c in report["costs"]}
    out: List[Dict[str, Any]] = []

    def missing(target: str, why: str) -> None:
        out.append({"target": target, "measured": f"not measured: {why}", "met": None})

    t = f"null env, {n} envs: best ringenv configuration >= 1,000,000 steps/s"
    rows = _ok(by_cost[0]["rows"], runtime="ringenv AsyncVectorEnv", device="cpu") if 0 in by_cost else []
    if rows:
        best = max(rows, key=lambda r: r["steps_per_s"])
        out.append({"target": t, "measured": f"{best['steps_per_s']:,.0f} steps/s ({label(best)})",
                    "met": best["steps_per_s"] >= 1e6})
    else:
        missing(t, "--costs lacks 0" if 0 not in by_cost else "no ringenv row ran")
    t = f"null env, {n} envs, 4 workers ({cores} cores): >= 300,000 steps/s"
    rows = _ok(by_cost[0]["rows"], runtime="ringenv AsyncVectorEnv", device="cpu", workers=4) if 0 in by_cost else []
    if rows:
        best = max(rows, key=lambda r: r["steps_per_s"])
        out.append({"target": t, "measured": f"{best['steps_per_s']:,.0f} steps/s ({label(best)})",
                    "met": best["steps_per_s"] >= 3e5})
    else:
        missing(t, "--costs lacks 0" if 0 not in by_cost else "no 4-worker row (--max-workers below 4?)")
    for cost, ratio, cpu in ((40, 0.90, None), (750, 0.94, 1.07)):
        t = f"~{cost} µs env: >= {ratio:.0%} of the {cores}-core ceiling" + (
            f" with tree CPU <= {cpu:.2f}x the env's own cost (one configuration)" if cpu else "")
        if cores != 2:
            t += " (stated for 2 cores)"
        rows = _ok(by_cost[cost]["rows"], runtime="ringenv AsyncVectorEnv", device="cpu") if cost in by_cost else []
        # oversubscribed rows can read above the ceiling (a preempted busy-wait still sees its clock run)
        rows = [r for r in rows if isinstance(r["workers"], int) and r["workers"] <= cores]
        if not rows:
            missing(t, f"--costs lacks {cost}" if cost not in by_cost else "no ringenv row ran")
            continue
        fits = [r for r in rows if r["ceiling_ratio"] >= ratio and (cpu is None or r["cpu_ratio"] <= cpu)]
        best = max(fits or rows, key=lambda r: r["ceiling_ratio"])
        text = f"{best['ceiling_ratio']:.1%} of ceiling"
        if cpu:
            text += f", tree CPU {best['cpu_ratio']:.3f}x env cost"
        out.append({"target": t, "measured": f"{text} ({label(best)})", "met": bool(fits)})
    t = "16 cores, ~750 µs env, 16 workers: >= 90% of 16x the single-env loop"
    rows = _ok(by_cost[750]["rows"], runtime="ringenv AsyncVectorEnv", device="cpu", workers=16) \
        if 750 in by_cost else []
    if cores < 16:
        missing(t, f"this machine has {cores} cores")
    elif not rows:
        missing(t, "--costs lacks 750" if 750 not in by_cost else "no 16-worker row (run with --max-workers 16)")
    else:
        best = max(rows, key=lambda r: r["steps_per_s"])
        ratio = best["steps_per_s"] / (16 * by_cost[750]["single_steps_per_s"])
        out.append({"target": t, "measured": f"{ratio:.1%} of 16x single ({label(best)})", "met": ratio >= 0.90})
    t = "device=\"cuda\": steps/s >= 95% of CPU-only (best of each, ~750 µs env)"
    cost = 750 if 750 in by_cost else max(by_cost)
    gpu = [r for r in _ok(by_cost[cost]["rows"], runtime="ringenv AsyncVectorEnv") if r["device"] != "cpu"]
    cpu_rows = _ok(by_cost[cost]["rows"], runtime="ringenv AsyncVectorEnv", device="cpu")
    if not report.get("device"):
        missing(t, "run without --device cuda")
    elif not gpu or not cpu_rows:
        missing(t, "no CUDA row ran")
    else:
        bg, bc = max(gpu, key=lambda r: r["steps_per_s"]), max(cpu_rows, key=lambda r: r["steps_per_s"])
        ratio = bg["steps_per_s"] / bc["steps_per_s"]
        out.append({"target": t.replace("~750", f"~{cost:g}"),
                    "measured": f"{ratio:.1%}: {bg['steps_per_s']:,.0f} ({label(bg)}) vs {bc['steps_per_s']:,.0f} "
                                f"({label(bc)})", "met": ratio >= 0.95})
    return out



def check_device(device: Optional[str]) -> Optional[str]:
    """``None`` when ringenv batches can go to ``device`` here, else why not (for a usage error):
    ringenv's own check of a ``device`` argument (``ringenv._staging.parse_device``)."""
    from ringenv._staging import parse_device
    from ringenv.errors import CudaUnavailableError

    try:
        parse_device(device)
    except (ValueError, TypeError, CudaUnavailableError) as e:
        return str(e)
    return None


def versions() -> Dict[str, str]:
    import ringenv

    out = {"python": platform.python_version(), "ringenv": ringenv.__version__, "gymnasium": gym.__version__,
           "numpy": np.__version__, "psutil": psutil.__version__}
    if "torch" in sys.modules:
        out["torch"] = sys.modules["torch"].__version__
    return out


def table(cost: Dict[str, Any]):
    from rich import box
    from rich.table import Table

    t = Table(title=f"~{cost['cost_us']:g} µs per step: single-env loop {cost['single_steps_per_s']:,.0f} steps/s, "
                    f"ceiling {cost['ceiling_steps_per_s']:,.0f}", box=box.SIMPLE_HEAD, title_justify="left")
    for name in ("runtime", "workers", "mode", "device", "steps/s", "x ceiling", "tree CPU / env cost", "tree cores"):
        t.add_column(name, justify="left" if name in ("runtime", "mode", "device") else "right", no_wrap=True)
    return t


def add_row(t, r: Dict[str, Any]) -> None:
    w = "in-proc" if r["workers"] is None else str(r["workers"])
    mode = "step" if r["mode"] == "step" else f"async {r['batch_size']}"
    if "steps_per_s" not in r:
        t.add_row(r["runtime"], w, mode, r["device"], r["status"], "", "", "")
        return
    t.add_row(r["runtime"], w, mode, r["device"], f"{r['steps_per_s']:,.0f}", f"{r['ceiling_ratio']:.3f}",
              f"{r['cpu_ratio']:.3f}", f"{r['tree_cores']:.2f}")


def set_ratios(row: Dict[str, Any], cores: int, single_steps_per_s: float) -> None:
    """Adds ``ceiling_ratio`` and ``cpu_ratio`` to a measured row (see the module docstring)."""
    if "steps_per_s" in row:
        row["ceiling_ratio"] = row["steps_per_s"] / (cores * single_steps_per_s)
        row["cpu_ratio"] = row["cpu_s"] / (row["env_steps"] / single_steps_per_s)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement (default 3)")
    parser.add_argument("--costs", type=results_sections.numbers(), default=[0.0, 40.0, 750.0],
                        help="µs per env step, comma-separated; 0 is the null env (default 0,40,750)")
    parser.add_argument("--num-envs", type=int, default=32, help="envs per vector env (default 32)")
    parser.add_argument("--max-workers", type=int, default=4,
                        help="ringenv rows use 1, 2, 4, ... up to this many workers (default 4; 16 on a 16-core "
                             "machine)")
    parser.add_argument("--device", default=None,
                        help="also measure every ringenv row with this device (e.g. cuda); refused without CUDA")
    parser.add_argument("--json", default=None, help="write every figure to this JSON file")
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error(f"argument --seconds: must be positive, got {args.seconds:g}")
    if args.num_envs < 1:
        parser.error(f"argument --num-envs: must be at least 1, got {args.num_envs}")
    if not 1 <= args.max_workers <= args.num_envs:
        parser.error(f"argument --max-workers: must be from 1 to --num-envs ({args.num_envs}), got {args.max_workers}")
    if args.json and not Path(args.json).resolve().parent.is_dir():
        parser.error(f"argument --json: the folder of {args.json!r} does not exist")
    device = None if args.device in (None, "cpu") else args.device
    why = check_device(device)
    if why:
        parser.error(f"argument --device {args.device}: {why}; run without --device (CPU only) or on a machine "
                     "with an NVIDIA GPU")

    from rich.console import Console
    from rich.live import Live

    console = (Console(highlight=False, markup=False) if sys.stdout.isatty()
               else Console(width=160, no_color=True, highlight=False, markup=False))
    cores = usable_cores()
    report: Dict[str, Any] = {"cores": cores, "num_envs": args.num_envs, "seconds": args.seconds,
                              "max_workers": args.max_workers, "device": device,
                              "costs": []}
    report["versions"] = versions()
    console.print(f"Python envs, {args.num_envs} envs, {args.seconds:g} s per row, {cores} cores; "
                  + ", ".join(f"{k} {v}" for k, v in report["versions"].items()))
    for cost_us in args.costs:
        before = single_loop_steps_per_s(cost_us, args.seconds)
        cost: Dict[str, Any] = {"cost_us": cost_us, "single_steps_per_s_before": before, "single_steps_per_s": before,
                                "ceiling_steps_per_s": cores * before, "rows": []}
        t = table(cost)
        # On a terminal the table grows row by row (then makes way for the final one); elsewhere
        # (a pipe, benches/run_all.py) a line per row on stderr says how far the run is.
        with Live(t, console=console, auto_refresh=False, transient=True) as live:
            for row in configurations(args.num_envs, args.max_workers, device):
                try:
                    row.update(run_row(row, cost_us, args.num_envs, args.seconds))
                except Exception as e:  # a row that cannot run is reported, the others still run
                    row["status"] = f"error: {type(e).__name__}: {e}"
                cost["rows"].append(row)
                set_ratios(row, cores, before)
                add_row(t, row)
                live.refresh()
                if not console.is_terminal:
                    figure = f"{row['steps_per_s']:,.0f} steps/s" if "steps_per_s" in row else row["status"]
                    print(f"  ~{cost_us:g} µs: {label(row)}: {figure}", file=sys.stderr, flush=True)
        after = single_loop_steps_per_s(cost_us, args.seconds)
        single = max(before, after)  # the faster single loop: the higher ceiling, the stricter ratios
        cost.update(single_steps_per_s_after=after, single_steps_per_s=single, ceiling_steps_per_s=cores * single,
                    env_cost_s=1 / single)
        final = table(cost)
        for row in cost["rows"]:
            set_ratios(row, cores, single)
            add_row(final, row)
        console.print(final)
        console.print(f"single-env loop before the rows {before:,.0f} steps/s, after {after:,.0f}; ratios use the "
                      "faster\n")
        report["costs"].append(cost)
    finish(console, report, evaluate_targets(report), args.json)
    return 0


def finish(console: Any, report: Dict[str, Any], targets: List[Dict[str, Any]], json_path: Optional[str]) -> None:
    """Stores ``targets`` in ``report``, prints each verdict, and writes the report to
    ``json_path`` (if given)."""
    report["targets"] = targets
    for target in targets:
        verdict = {True: "met", False: "NOT met", None: "not measured"}[target["met"]]
        console.print(f"[{verdict}] {target['target']}: {target['measured']}")
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
