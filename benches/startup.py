"""How long a vector env takes to start (the constructor to the first observations of
``reset(seed=0)``) and to close, for ringenv's default settings (Rust and Gymnasium CartPole) and
the peers (Gymnasium's vector envs and vectorised CartPole), medians of ``--rounds`` with the
spread. Writes its section of ``benches/RESULTS.md``.

Usage: ``python benches/startup.py [--num-envs 8] [--rounds 5] [--output RESULTS.md|-]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import gymnasium as gym

import results_sections


def _rows(n: int) -> List[Tuple[str, Callable[[], Any]]]:
    import ringenv

    return [
        ("ringenv, Rust CartPole (`make_vec`)", lambda: ringenv.make_vec("CartPole-v1", n)),
        ("ringenv, Python CartPole (`AsyncVectorEnv`)",
         lambda: ringenv.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * n)),
        ("Gymnasium `AsyncVectorEnv`", lambda: gym.vector.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * n)),
        ("Gymnasium `SyncVectorEnv`", lambda: gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n)),
        ("Gymnasium vectorised CartPole",
         lambda: gym.make_vec("CartPole-v1", n, vectorization_mode="vector_entry_point")),
    ]


def one_row(make: Callable[[], Any]) -> Dict[str, float]:
    """``{"start_s": constructor + first reset, "close_s": close}`` of one vector env, in seconds."""
    t0 = time.perf_counter()
    envs = make()
    try:
        envs.reset(seed=0)
        t1 = time.perf_counter()
    finally:
        t2 = time.perf_counter()
        envs.close()
    return {"start_s": t1 - t0, "close_s": time.perf_counter() - t2}


def run(a: argparse.Namespace) -> Dict[str, List[Dict[str, float]]]:
    rows = _rows(a.num_envs)
    results: Dict[str, List[Dict[str, float]]] = {name: [] for name, _ in rows}
    for r in range(a.rounds):
        for name, make in rows:
            row = one_row(make)
            results[name].append(row)
            print(f"round {r + 1}: {name}: start {row['start_s']:.3f} s, close {row['close_s']:.3f} s",
                  file=sys.stderr)
    return results


def section(report: Dict[str, Any]) -> List[str]:
    a = report["args"]
    end = results_sections.markers("startup")[1]

    def med(rows: List[Dict[str, float]], key: str) -> str:
        return results_sections.median_spread([r[key] for r in rows], ".3f")

    lines = results_sections.section_head(
        "startup", "How long a vector env takes to start", report, f", load {report['load']:.2f} at start") + [
        f"{a.num_envs} envs, default settings; seconds from the constructor's call to the return of "
        f"`reset(seed=0)`, then `close()`. {a.rounds} rounds in turn; the median, the spread in brackets.",
        "",
        "| vector env | start to first observations, s | close, s |",
        "|---|---:|---:|",
    ]
    for name, rows in report["results"].items():
        lines.append(f"| {name} | {med(rows, 'start_s')} | {med(rows, 'close_s')} |")
    return lines + [end]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    results_sections.add_output_argument(p)
    a = p.parse_args(argv)
    if a.num_envs < 1 or a.rounds < 1:
        p.error("--num-envs and --rounds must be at least 1")
    t0 = time.perf_counter()
    report = {**results_sections.report_head(a), "load": os.getloadavg()[0]}
    report["results"] = run(a)
    results_sections.publish("startup", section(report), a.output)
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
