"""The wake-up policy against fixed spin bounds, in one run (the default ``spin_us=None`` should
come within 10% of the best fixed ``spin_us``); or, with ``--baseline DIR``, the default policy of
this build against another build's, row by row (``benches/ab.py``). A benchmark, not a test.

Per env (``--env``: ``cartpole``, ringenv's Rust CartPole, or ``py:C``, a Python env busy-waiting
``C`` µs per step) and worker count, every ``spin_us`` of ``--spins`` is measured by
``ringenv.cli._measure.measure`` in ``--repeats`` interleaved rounds (the median with its spread),
quiet and beside a busy neighbour. The run replaces the ``wakeup`` section of
``benches/RESULTS.md`` (``--output -``: nothing written).

Usage::

    python benches/wakeup_policy.py                 # the recorded section, ~11 minutes on 2 cores
    python benches/wakeup_policy.py --env cartpole --spins none,0,2000 --neighbour off --output -
    python benches/wakeup_policy.py --quick --baseline DIR
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import sys
from typing import Any, Callable, Dict, List, Optional

import ab
import results_sections
import ringenv
from neighbour import busy_neighbour
from python_envs import BusyEnv
from ringenv.cli._measure import measure

BEGIN, END = results_sections.markers("wakeup")
DEFAULT_SPINS = "none,0,20,50,100,200,500,2000"


def maker(env: str, num_envs: int, workers: Optional[int], spin_us: Optional[float]) -> Callable[[], Any]:
    """A function building the vector env of ``env`` (``cartpole`` or ``py:C``) with ``workers``
    worker processes (``None``: ringenv's default, the cores less one and the main process's
    inline share)."""
    if env == "cartpole":
        kwargs = {"num_workers": workers, "spin_us": spin_us}
        return lambda: ringenv.make_vec("CartPole-v1", num_envs, vector_kwargs=kwargs)
    if env.startswith("py:"):
        cost_s = float(env[3:]) * 1e-6
        fns = [functools.partial(BusyEnv, cost_s)] * num_envs
        return lambda: ringenv.AsyncVectorEnv(fns, num_workers=workers, spin_us=spin_us)
    raise SystemExit(f"--env must be cartpole or py:MICROSECONDS, got {env!r}")


def parse_spins(text: str) -> List[Optional[float]]:
    out: List[Optional[float]] = []
    for part in text.split(","):
        part = part.strip().lower()
        out.append(None if part in ("none", "default") else float(part))
    if None not in out:
        raise SystemExit("--spins must include none (the default policy) to compare it")
    return out


def name(spin: Optional[float]) -> str:
    return "None (default)" if spin is None else f"{spin:g}"


def run_grid(env: str, num_envs: int, workers: Optional[int], spins: List[Optional[float]], repeats: int,
             seconds: float) -> Dict[str, Any]:
    """Every setting ``repeats`` times, interleaved with a rotated order; figures per setting."""
    runs: Dict[str, List[Dict[str, float]]] = {name(s): [] for s in spins}
    for r in range(repeats):
        order = spins[r % len(spins):] + spins[:r % len(spins)]
        for spin in order:
            m = measure(maker(env, num_envs, workers, spin), num_envs=num_envs, seconds=seconds, seed=r)
            f = m.figures()
            runs[name(spin)].append({"steps_per_s": f["steps_per_s"], "tree_cores": f["cpu"]["tree_cores"],
                                     "p50_ms": f["batch_latency_ms"]["p50"]})
    rows = {}
    for key, rs in runs.items():
        sps = [x["steps_per_s"] for x in rs]
        rows[key] = {"median": statistics.median(sps), "min": min(sps), "max": max(sps),
                     "tree_cores": statistics.median(x["tree_cores"] for x in rs),
                     "p50_ms": statistics.median(x["p50_ms"] for x in rs), "runs": sps}
    fixed = {k: v for k, v in rows.items() if k != name(None)}
    best = max(fixed, key=lambda k: fixed[k]["median"]) if fixed else name(None)
    ratio = rows[name(None)]["median"] / rows[best]["median"]
    return {"env": env, "num_envs": num_envs, "workers": workers, "rows": rows, "best_fixed": best,
            "default_over_best": ratio, "within_10pct": ratio >= 0.90}


def markdown(grid: Dict[str, Any], neighbour: bool) -> str:
    who = "default workers (cores - 1 + inline share)" if grid["workers"] is None else f"{grid['workers']} worker(s)"
    head = (f"{grid['env']}, {grid['num_envs']} envs, {who}, "
            f"{'with a busy neighbour' if neighbour else 'quiet'}: default / best fixed "
            f"({grid['best_fixed']}) = {grid['default_over_best']:.2f}"
            f" {'ok' if grid['within_10pct'] else 'BELOW 0.90'}")
    lines = [head, "", "| spin_us | steps/s median | spread | tree cores | p50 ms |", "|---|---|---|---|---|"]
    for key, r in grid["rows"].items():
        lines.append(f"| {key} | {r['median']:,.0f} | {r['min']:,.0f}..{r['max']:,.0f} | "
                     f"{r['tree_cores']:.2f} | {r['p50_ms']:.3f} |")
    return "\n".join(lines)


def section(report: Dict[str, Any]) -> List[str]:
    """The run as the ``wakeup`` section of ``benches/RESULTS.md`` (markers included)."""
    a = vars(report["args"])
    lines = results_sections.section_head("wakeup", "The wake-up policy against fixed spin bounds", report,
                                          script="benches/wakeup_policy.py") + [
        f"The target: the default (`spin_us=None`) within 10% of the best fixed `spin_us` of "
        f"{a['spins']} (all measured). Each setting: the median of {a['repeats']} rounds of {a['seconds']:g} s "
        "through the one measurement loop, the settings in a rotated order each round (spread in brackets). "
        "*workers*: `default` is no `num_workers` (the cores less one and the main process's share); "
        "*py:C*: a Python env busy-waiting C µs per step; *neighbour*: one `while True: pass` process.",
        "",
        "| env | envs | workers | condition | default steps/s (spread) | best fixed spin_us: steps/s | spin_us=0 | "
        "default / best |",
        "|---|---:|---|---|---|---|---:|---:|",
    ]
    below = []
    for g in report["grids"]:
        rows = g["rows"]
        d = rows[name(None)]
        zero = rows.get(name(0.0))
        who = "default" if g["workers"] is None else str(g["workers"])
        cond = "busy neighbour" if g["neighbour"] else "quiet"
        ratio = g["default_over_best"]
        mark = "" if g["within_10pct"] else " **below 0.90**"
        if not g["within_10pct"]:
            below.append(f"{g['env']} {g['num_envs']} envs, {who} workers, {cond}: {ratio:.2f}")
        lines.append(f"| {g['env']} | {g['num_envs']} | {who} | {cond} | {d['median']:,.0f} ({d['min']:,.0f}.."
                     f"{d['max']:,.0f}) | {g['best_fixed']}: {rows[g['best_fixed']]['median']:,.0f} | "
                     + (f"{zero['median']:,.0f}" if zero else "-") + f" | {ratio:.2f}{mark} |")
    n = len(report["grids"])
    lines += ["", f"Within 10% on {n - len(below)} of {n} rows" + (f"; below: {'; '.join(below)}." if below else "."),
              END]
    return lines


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="cartpole,py:0,py:40,py:200",
                   help="comma-separated envs: cartpole, or py:MICROSECONDS per step")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--workers", default="default,1,2",
                   help="comma-separated worker counts; default = no num_workers (cores - 1 + the inline share)")
    p.add_argument("--spins", default=DEFAULT_SPINS, help="comma-separated spin_us values; none = default")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seconds", type=float, default=None, help="timed seconds per measurement (default 0.5; quick 0.3)")
    p.add_argument("--quick", action="store_true", help="0.3 s per measurement")
    p.add_argument("--neighbour", choices=["off", "on", "both"], default="both")
    p.add_argument("--json", help="write every figure to this file")
    results_sections.add_output_argument(p)
    ab.add_arguments(p, repeats=3)
    a = p.parse_args(argv)
    a.seconds = a.seconds if a.seconds is not None else (0.3 if a.quick else 0.5)
    if ab.child(a, lambda row: measure(maker(row["env"], row["num_envs"], row["workers"], None),
                                       num_envs=row["num_envs"], seconds=a.seconds,
                                       seed=row["round"]).figures()["steps_per_s"]):
        return 0
    spins = parse_spins(a.spins)
    workers = [None if w == "default" else int(w) for w in a.workers.split(",")]
    phases = {"off": [False], "on": [True], "both": [False, True]}[a.neighbour]
    report: Dict[str, Any] = {**results_sections.report_head(a), "grids": []}
    envs = [e.strip() for e in a.env.split(",") if e.strip()]
    for env in envs:
        maker(env, a.num_envs, None, None)  # a bad --env fails before anything runs
    if a.baseline:
        return compare_builds(a, envs, workers, phases)
    for neighbour in phases:
        with busy_neighbour() if neighbour else contextlib.nullcontext():
            for env, w in ((e, w) for e in envs for w in workers):
                grid = run_grid(env, a.num_envs, w, spins, a.repeats, a.seconds)
                grid["neighbour"] = neighbour
                report["grids"].append(grid)
                print(markdown(grid, neighbour), end="\n\n", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1, default=vars)
    results_sections.publish("wakeup", section(report), a.output)
    return 0


def compare_builds(a: argparse.Namespace, envs: List[str], workers: List[Optional[int]], phases: List[bool]) -> int:
    """``--baseline``: the default policy of this build against the other's, every row (env,
    worker count, condition) through :func:`ab.compare`; prints the table (and ``--json``)."""
    results: List[Dict[str, Any]] = []
    for neighbour in phases:
        rows = [{"label": f"{env}, {a.num_envs} envs, {'default' if w is None else w} workers", "env": env,
                 "num_envs": a.num_envs, "workers": w} for env in envs for w in workers]
        with busy_neighbour() if neighbour else contextlib.nullcontext():
            results += ab.compare(__file__, rows, a.baseline, a.ab_repeats,
                                  condition="neighbour" if neighbour else "quiet")
    print("\n".join(ab.section("The default wait policy (`benches/wakeup_policy.py`)", results, a.baseline,
                               a.ab_repeats, a.seconds)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
