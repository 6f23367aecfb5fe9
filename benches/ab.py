"""Two builds side by side (``--baseline DIR`` of ``benches/wakeup_policy.py`` and
``benches/grid.py``): each row measured with this build's ``ringenv`` and with the one on the
``PYTHONPATH`` entry ``DIR``, alternately, each measurement in its own subprocess (the script
re-run with ``--ab-row ROW``, printing its figures after :data:`MARK`). Rounds alternate the order
so drift falls on both builds alike; the table gives each build's median steps/s and new/old."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import ringenv

#: The prefix of the line a child prints its figures on.
MARK = "ab-figures: "


def add_arguments(parser: argparse.ArgumentParser, repeats: int) -> None:
    """``--baseline DIR``, ``--ab-repeats N`` (rounds per row; default ``repeats``) and the hidden
    ``--ab-row``."""
    parser.add_argument("--baseline", metavar="DIR", default=None,
                        help="a PYTHONPATH entry holding another build's ringenv package: measure each row with "
                             "it and with this build alternately, each in a subprocess, and report new/old")
    parser.add_argument("--ab-repeats", type=int, default=repeats, help="rounds per row with --baseline")
    parser.add_argument("--ab-row", default=None, help=argparse.SUPPRESS)


def child(args: argparse.Namespace, measure: Callable[[Dict[str, Any]], float]) -> bool:
    """In a child (``--ab-row`` given): measures the row with ``measure`` (steps/s), prints it
    after :data:`MARK` and returns True; else returns False."""
    if args.ab_row is None:
        return False
    print(MARK + json.dumps({"steps_per_s": measure(json.loads(args.ab_row))}), flush=True)
    return True


def _argv_without_baseline(argv: List[str]) -> List[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--baseline":
            skip = True
        elif not a.startswith("--baseline="):
            out.append(a)
    return out


def _run(script: str, argv: List[str], row: Dict[str, Any], build: str) -> float:
    env = {**os.environ, "PYTHONPATH": build}
    cmd = [sys.executable, script, *argv, "--ab-row", json.dumps(row)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith(MARK)]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{build}: row {row} failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return float(json.loads(lines[-1][len(MARK):])["steps_per_s"])


def compare(script: str, rows: List[Dict[str, Any]], baseline: str, repeats: int,
            argv: Optional[List[str]] = None, condition: str = "") -> List[Dict[str, Any]]:
    """Each of ``rows`` (JSON-able, with a ``label``) measured ``repeats`` rounds with each build
    alternately; per row ``label``, ``condition``, median ``old``/``new``, ``ratio`` and the runs."""
    new_build = str(Path(ringenv.__file__).resolve().parent.parent)
    argv = _argv_without_baseline(sys.argv[1:] if argv is None else argv)
    out = []
    for row in rows:
        runs: Dict[str, List[float]] = {"old": [], "new": []}
        for r in range(repeats):
            sides = [("old", baseline), ("new", new_build)]
            for side, build in sides if r % 2 == 0 else sides[::-1]:
                runs[side].append(_run(script, argv, {**row, "round": r}, build))
        old, new = statistics.median(runs["old"]), statistics.median(runs["new"])
        result = {"label": row["label"], "condition": condition, "old": old, "new": new,
                  "ratio": new / old if old else float("nan"), "runs": runs}
        print(f"  [{condition}] {row['label']}: old {old:,.0f}, new {new:,.0f} steps/s, new/old {result['ratio']:.3f}",
              file=sys.stderr, flush=True)
        out.append(result)
    return out


def section(title: str, results: List[Dict[str, Any]], baseline: str, repeats: int, seconds: float) -> List[str]:
    """The A/B run as Markdown lines, the rows below tolerance (quiet 0.95, neighbour 0.90) listed."""
    lines = [f"## {title}: this build (new) against `{baseline}` (old), rows alternating", "",
             f"Each row: the median of {repeats} rounds of {seconds:g} s per build, each in its own subprocess.", "",
             "| row | condition | old steps/s | new steps/s | new/old |", "|---|---|---:|---:|---:|"]
    below = []
    for r in results:
        floor = 0.90 if r["condition"] == "neighbour" else 0.95
        mark = "" if r["ratio"] >= floor else f" **below {floor:.2f}**"
        if mark:
            below.append(f"{r['label']} ({r['condition']}): {r['ratio']:.3f}")
        lines.append(f"| {r['label']} | {r['condition']} | {r['old']:,.0f} | {r['new']:,.0f} | "
                     f"{r['ratio']:.3f}{mark} |")
    lines += ["", f"{len(results) - len(below)} of {len(results)} rows within tolerance"
              + (f"; below: {'; '.join(below)}." if below else ".")]
    return lines
