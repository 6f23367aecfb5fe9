"""The wake-up policy against fixed spin bounds, in one run (the default ``spin_us=None`` should
come within 10% of the best fixed ``spin_us``); or, with ``--baseline DIR``, the default policy of
this build against another build's, row by row. A benchmark, not a test.

For one env and each worker count, it measures steps/s of a ringenv vector env with every
``spin_us`` of ``--spins`` (default ``none,0,20,50,100,200,500,2000``; ``none`` is the default
policy), interleaved: ``--repeats`` rounds, each measuring every setting once in a rotated order,
so drift of the machine during the run falls on all settings alike. Each setting's figure is the
median of its rounds, with the spread (min..max) beside it. Then the same again with a busy
neighbour: a process running ``while True: pass`` (``--neighbour both``, the default; ``off`` or
``on`` for one of the two).

Envs (``--env``, default ``cartpole,py:0,py:40,py:200``; with the defaults of ``--num-envs`` 16,
``--workers default,1,2``, ``--repeats`` 3 and ``--seconds`` 0.5, the section recorded in
``benches/RESULTS.md``, about 11 minutes on 2 cores):

- ``cartpole``: ringenv's Rust CartPole (``ringenv.make_vec("CartPole-v1", n)``): waits of
  ~1-20 µs, where spinning decides everything;
- ``py:C``: a Python env whose ``step`` busy-waits ``C`` µs on ``time.perf_counter`` (``C = 0``:
  returns a preallocated ``(4,)`` float32 observation and does nothing else), through
  ``ringenv.AsyncVectorEnv``.

Every measurement goes through :func:`ringenv.cli._measure.measure` (the one measurement loop):
reset with a seed, warm-up, then ``--seconds`` of stepping with pre-generated actions, CPU of the
process tree read from ``/proc``. Each row prints steps/s (median and spread), the tree's CPU in
cores busy, and for the default its ratio to the best fixed bound's median, with ``ok`` when it
is at least 0.90.

The run is written to ``benches/RESULTS.md`` as its section between ``<!-- wakeup:begin -->`` and
``<!-- wakeup:end -->`` (``--output -``: nothing written): one row per env, worker count and
condition, with the default's median and spread, the best fixed bound's, ``spin_us=0``'s and the
ratio, and a line counting the rows within 10%.

With ``--baseline DIR`` (``DIR``: a ``PYTHONPATH`` entry holding another build's ``ringenv``,
``benches/ab.py``) only the default policy runs, each row (env, worker count, condition) measured
``--ab-repeats`` rounds with each build alternately, each measurement in its own subprocess; the
table gives both medians and new/old, and nothing is written to ``benches/RESULTS.md``.
``--quick`` shortens the rounds to 0.3 s (with ``--baseline`` and the default envs, workers,
conditions and 3 rounds: 24 rows, 144 measurements of about 2 s each with the subprocess's start,
5-6 minutes on 2 cores).

Usage::

    python benches/wakeup_policy.py --env cartpole,py:0,py:40 --num-envs 16 --workers default,1,2
    python benches/wakeup_policy.py --env cartpole --num-envs 16 --workers 1,2
    python benches/wakeup_policy.py --env py:40 --num-envs 16 --workers 1,2,4 --seconds 2
    python benches/wakeup_policy.py --env cartpole --spins none,0,2000 --repeats 3 --seconds 0.5 \\
        --neighbour off --json /tmp/wakeup.json --output -
    python benches/wakeup_policy.py --quick --baseline /work/main/.venv/lib/python3.11/site-packages
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import platform
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import gymnasium as gym
import numpy as np

import ab
import results_sections
import ringenv
from neighbour import busy_neighbour
from ringenv.cli._common import machine_info, machine_line
from ringenv.cli._measure import busy_wait, measure

BEGIN, END = results_sections.markers("wakeup")
OBS_SHAPE = (4,)
DEFAULT_SPINS = "none,0,20,50,100,200,500,2000"


class NullEnv(gym.Env):
    """Returns a preallocated observation (float32, shape ``(4,)``); reward 0, never ends."""

    observation_space = gym.spaces.Box(-1.0, 1.0, OBS_SHAPE, np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, cost_s: float = 0.0):
        self.obs = np.zeros(OBS_SHAPE, np.float32)
        self.cost_s = cost_s

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.obs, {}

    def step(self, action):
        if self.cost_s:
            busy_wait(self.cost_s)
        return self.obs, 0.0, False, False, {}


def maker(env: str, num_envs: int, workers: Optional[int], spin_us: Optional[float]) -> Callable[[], Any]:
    """A function building the vector env of ``env`` (``cartpole`` or ``py:C``) with ``workers``
    worker processes (``None``: ringenv's default, the cores less one and the main process's
    inline share)."""
    if env == "cartpole":
        kwargs = {"num_workers": workers, "spin_us": spin_us}
        return lambda: ringenv.make_vec("CartPole-v1", num_envs, vector_kwargs=kwargs)
    if env.startswith("py:"):
        cost_s = float(env[3:]) * 1e-6
        fns = [lambda: NullEnv(cost_s)] * num_envs
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


def section(report: Dict[str, Any], started: str) -> List[str]:
    """The run as the ``wakeup`` section of ``benches/RESULTS.md`` (markers included)."""
    a = report["args"]
    lines = [
        BEGIN,
        "## The wake-up policy against fixed spin bounds (`benches/wakeup_policy.py`)",
        "",
        "Written by `benches/wakeup_policy.py`; edit the script, not this section. "
        f"Machine: {machine_line(machine_info())}; {started}.",
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
    p.add_argument("--output", default=str(Path(__file__).resolve().parent / "RESULTS.md"),
                   help="the results file to write this run's section into; - for none")
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
    report: Dict[str, Any] = {"machine": {"platform": platform.platform(), "processor": platform.processor(),
                                          "cpus": len(__import__("os").sched_getaffinity(0))},
                              "args": vars(a), "grids": []}
    envs = [e.strip() for e in a.env.split(",") if e.strip()]
    for env in envs:
        maker(env, a.num_envs, None, None)  # a bad --env fails before anything runs
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
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
            json.dump(report, f, indent=1)
    results_sections.publish("wakeup", section(report, started), a.output)
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
