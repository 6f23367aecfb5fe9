"""What an idle pool costs: CPU seconds of the main process and each worker while nothing is
called, for the default wait policy (``spin_us=None``) and ``spin_us=0``, after ``--steps`` steps
and ``--settle`` s; with the workers' wake-ups (voluntary context switches).
Rust and Gymnasium ``CartPole-v1``, 8 envs; medians of ``--rounds`` with the spread. Run it on a
quiet machine (docs/WAKEUP.md). Writes its section of ``benches/RESULTS.md``.

Usage: ``python benches/idle_cpu.py [--seconds 20] [--settle 5] [--rounds 2] [--output RESULTS.md|-]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np
import psutil

import results_sections

NUM_ENVS = 8


def _rust(spin_us: Optional[float]) -> Any:
    import ringenv

    return ringenv.make_vec("CartPole-v1", NUM_ENVS, vector_kwargs={"spin_us": spin_us})


def _python(spin_us: Optional[float]) -> Any:
    import ringenv

    return ringenv.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * NUM_ENVS, spin_us=spin_us)


#: (row name, how the vector env is made).
ROWS: List[Tuple[str, Callable[[], Any]]] = [
    ("Rust CartPole, default", lambda: _rust(None)),
    ("Rust CartPole, `spin_us=0`", lambda: _rust(0)),
    ("Python CartPole, default", lambda: _python(None)),
    ("Python CartPole, `spin_us=0`", lambda: _python(0)),
]


def _cpu_s(process: psutil.Process) -> float:
    t = process.cpu_times()
    return t.user + t.system


def _wakeups(process: psutil.Process) -> int:
    return process.num_ctx_switches().voluntary


def one_row(make: Callable[[], Any], steps: int, settle: float, seconds: float) -> Dict[str, float]:
    envs = make()
    try:
        envs.reset(seed=0)
        actions = np.zeros(NUM_ENVS, dtype=np.int64)
        for _ in range(steps):
            envs.step(actions)
        time.sleep(settle)
        me = psutil.Process()
        workers = me.children()
        main0, workers0 = _cpu_s(me), [_cpu_s(w) for w in workers]
        wakeups0 = [_wakeups(w) for w in workers]
        time.sleep(seconds)
        main1, workers1 = _cpu_s(me), [_cpu_s(w) for w in workers]
        wakeups1 = [_wakeups(w) for w in workers]
    finally:
        envs.close()
    per_worker = [(b - a) / seconds * 100 for a, b in zip(workers0, workers1)]
    return {"main_pct": (main1 - main0) / seconds * 100, "worker_pct": float(np.mean(per_worker)),
            "workers": len(workers),
            "wakeups_per_s": float(np.mean([(b - a) / seconds for a, b in zip(wakeups0, wakeups1)]))}


def run(a: argparse.Namespace) -> Dict[str, List[Dict[str, float]]]:
    results: Dict[str, List[Dict[str, float]]] = {name: [] for name, _ in ROWS}
    for r in range(a.rounds):
        for name, make in ROWS:
            row = one_row(make, a.steps, a.settle, a.seconds)
            results[name].append(row)
            print(f"round {r + 1}: {name}: main {row['main_pct']:.3f}% of a core, each worker "
                  f"{row['worker_pct']:.3f}%, wake-ups {row['wakeups_per_s']:.2f}/s", file=sys.stderr)
    return results


def section(report: Dict[str, Any]) -> List[str]:
    a = report["args"]
    end = results_sections.markers("idle_cpu")[1]

    def med(rows: List[Dict[str, float]], key: str, fmt: str) -> str:
        return results_sections.median_spread([r[key] for r in rows], fmt)

    lines = results_sections.section_head(
        "idle_cpu", "What an idle pool costs", report, f", load {report['load']:.2f} at start") + [
        f"{NUM_ENVS} envs, default settings but `spin_us`; each pool reset and stepped {a.steps} times, idle "
        f"{a.settle:g} s, then CPU over {a.seconds:g} s idle (psutil, user + system, 10 ms ticks) in % of one "
        "core; wake-ups are each worker's main thread's voluntary context switches (one per futex sleep). "
        f"{a.rounds} rounds in turn; the median, the spread in brackets.",
        "",
        "| pool | workers | main process, % of a core | each worker, % of a core | each worker's wake-ups per s |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, _ in ROWS:
        rows = report["results"][name]
        lines.append(f"| {name} | {rows[0]['workers']} | {med(rows, 'main_pct', '.3f')} | "
                     f"{med(rows, 'worker_pct', '.3f')} | {med(rows, 'wakeups_per_s', '.2f')} |")
    return lines + [end]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=20.0, help="idle seconds measured per row")
    p.add_argument("--settle", type=float, default=5.0, help="idle seconds before the window")
    p.add_argument("--steps", type=int, default=2000, help="steps before the pool is left idle")
    p.add_argument("--rounds", type=int, default=2)
    results_sections.add_output_argument(p)
    a = p.parse_args(argv)
    if a.seconds <= 0 or a.settle < 0 or a.steps < 0 or a.rounds < 1:
        p.error("--seconds must be positive, --settle and --steps not negative, --rounds at least 1")
    t0 = time.perf_counter()
    report = {**results_sections.report_head(a), "load": os.getloadavg()[0]}
    report["results"] = run(a)
    results_sections.publish("idle_cpu", section(report), a.output)
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
