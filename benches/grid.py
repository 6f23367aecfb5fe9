"""The benchmark grid: ringenv with default settings against what a user would pick instead
(Gymnasium's SyncVectorEnv and AsyncVectorEnv, Gymnasium's vectorised CartPole, EnvPool), over env
cost x observation x infos x workers x sync/async batches, quiet and beside one busy-looping
neighbour (``benches/neighbour.py``); then the targets, each with a verdict from this run's figures.

Python envs (:class:`GridEnv`) busy-wait their cost per step and return 16 float32s or a Dict of
12 leaves (151,552 bytes), with no infos or three scalars; the ceiling is the cores times a
single-env loop. Every row is measured by ``ringenv.cli._measure.measure``. The output replaces
the ``grid`` section of ``benches/RESULTS.md`` (``benches/results_sections.py``). With
``--baseline DIR`` every ringenv row is measured with this build and another alternately
(``benches/ab.py``) and nothing is written.

Usage::

    python benches/grid.py                      # the full grid (~15 min on 2 cores)
    python benches/grid.py --quick              # a corner at short durations: a check that it runs
    python benches/grid.py --quick --baseline DIR  # A/B of two builds
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import gymnasium as gym
import numpy as np

import ab
import results_sections
import ringenv
from neighbour import busy_neighbour
from ringenv.cli._common import machine_info, resolve_env, usable_cores, whole_workers_reason
from ringenv._plan import plan_workers
from ringenv.cli._measure import WARMUP_MIN_STEPS, busy_wait, measure, single_loop_steps_per_s

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = results_sections.markers("grid")

COSTS_US = (0.0, 40.0, 200.0, 1000.0)
OBSERVATIONS = ("16 floats", "Dict 148 KiB")
INFOS = ("none", "3 scalars")
TRUNCATE_AFTER = 1000  # steps per episode


def dict_space() -> gym.spaces.Dict:
    """The big observation: four uint8 frames, int16 maps and int64 id grids, 151,552 bytes."""
    leaves: Dict[str, gym.spaces.Space] = {}
    for i in range(4):
        leaves[f"frame{i}"] = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
        leaves[f"height{i}"] = gym.spaces.Box(-1000, 1000, (48, 48, 2), np.int16)
        leaves[f"ids{i}"] = gym.spaces.Box(0, 2**31 - 1, (32, 32, 2), np.int64)
    return gym.spaces.Dict(leaves)


def space_bytes(space: gym.spaces.Space) -> int:
    if isinstance(space, gym.spaces.Dict):
        return sum(space_bytes(s) for s in space.spaces.values())
    return int(np.prod(space.shape)) * np.dtype(space.dtype).itemsize


class GridEnv(gym.Env):
    """``step`` busy-waits ``cost_us`` µs, changes one element of its preallocated observation
    (one of :data:`OBSERVATIONS`) and truncates every :data:`TRUNCATE_AFTER` steps."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, cost_us: float, obs: str, infos: str):
        self.cost_s = cost_us * 1e-6
        self.with_infos = infos != "none"
        if obs == "16 floats":
            self.observation_space = gym.spaces.Box(-1.0, 1.0, (16,), np.float32)
            self.obs: Any = np.zeros(16, np.float32)
            self._cell = self.obs
        else:
            self.observation_space = dict_space()
            self.obs = {k: np.zeros(s.shape, s.dtype) for k, s in self.observation_space.spaces.items()}
            self._cell = self.obs["frame0"].reshape(-1)
        self.t = 0

    def _info(self) -> Dict[str, Any]:
        if not self.with_infos:
            return {}
        return {"score": 0.5 * self.t, "lives": 3 - self.t % 3, "has_key": self.t % 2 == 0}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.obs, self._info()

    def step(self, action):
        if self.cost_s:
            busy_wait(self.cost_s)
        self.t += 1
        self._cell[0] = self.t % 100
        return self.obs, 1.0, False, self.t >= TRUNCATE_AFTER, self._info()



def env_rows(cost_us: float, obs: str, infos: str, num_envs: int, workers: List[int]) -> List[Dict[str, Any]]:
    """The rows of one Python env: the two peers, then ringenv per worker count, sync and with
    async batches of ``num_envs // 2`` where they are whole workers."""
    fns = [functools.partial(GridEnv, cost_us, obs, infos)] * num_envs
    rows: List[Dict[str, Any]] = [
        {"runtime": "gymnasium SyncVectorEnv", "peer": True, "workers": None, "mode": "step",
         "make": lambda: gym.vector.SyncVectorEnv(fns)},
        {"runtime": "gymnasium AsyncVectorEnv", "peer": True, "workers": num_envs, "mode": "step",
         "make": lambda: gym.vector.AsyncVectorEnv(fns)},
    ]
    rows.append({**ringenv_plan(num_envs, None, num_envs), "mode": "step",
                 "make": functools.partial(ringenv.AsyncVectorEnv, fns)})
    for w in workers:
        if w > num_envs:
            continue
        rows.append({**ringenv_plan(num_envs, w, num_envs), "mode": "step",
                     "make": functools.partial(ringenv.AsyncVectorEnv, fns, num_workers=w)})
    half = num_envs // 2
    if half >= 1:
        rows.append({**ringenv_plan(num_envs, None, half), "mode": "async", "batch_size": half,
                     "make": functools.partial(ringenv.AsyncVectorEnv, fns, batch_size=half)})
    for w in workers:
        if half >= 1 and w <= num_envs and whole_workers_reason(num_envs, w, half) is None:
            rows.append({**ringenv_plan(num_envs, w, half), "mode": "async", "batch_size": half,
                         "make": functools.partial(ringenv.AsyncVectorEnv, fns, num_workers=w, batch_size=half)})
    for r in rows:
        r.update(group="python", cost_us=cost_us, obs=obs, infos=infos, num_envs=num_envs)
        r.setdefault("batch_size", num_envs)
    return rows


def ringenv_plan(num_envs: int, workers: Optional[int], batch_size: int, host: str = "python") -> Dict[str, Any]:
    """A ringenv row's fields: ``workers`` as given (``None``: the default) and what
    ``plan_workers`` makes of it here (``processes``, ``inline``, ``stepping``)."""
    processes, inline = plan_workers(num_envs, workers, None, host, batch_size, None)
    return {"runtime": "ringenv", "peer": False, "workers": workers, "default": workers is None,
            "processes": processes, "inline": inline, "stepping": processes + int(inline)}


def cartpole_rows(sizes: List[int], workers: List[int]) -> List[Dict[str, Any]]:
    """The Rust CartPole rows: per size, the peers, then ringenv through make_vec and tune's code path."""
    rows: List[Dict[str, Any]] = []
    for n in sizes:
        rows.append({"runtime": "gymnasium make_vec (vector_entry_point)", "peer": True, "workers": None,
                     "make": lambda n=n: gym.make_vec("CartPole-v1", n, vectorization_mode="vector_entry_point")})
        if _envpool_version() is not None:
            for threads in (1, 2):
                rows.append({"runtime": "EnvPool", "peer": True, "workers": threads,
                             "make": lambda n=n, t=threads: _envpool(n, t),
                             "actions": "int32"})
        else:
            rows.append({"runtime": "EnvPool", "peer": True, "workers": None, "status": "not installed"})
        rows.append({**ringenv_plan(n, None, n, "rust"), "runtime": "ringenv make_vec",
                     "make": lambda n=n: ringenv.make_vec("CartPole-v1", n)})
        for w in workers:
            if w > 2:
                continue  # the target's rows: 1 and 2 workers
            rows.append({**ringenv_plan(n, w, n, "rust"), "runtime": "ringenv make_vec",
                         "make": lambda n=n, w=w: ringenv.make_vec("CartPole-v1", n, vector_kwargs={"num_workers": w})})
            rows.append({**ringenv_plan(n, w, n, "rust"), "runtime": "ringenv tune", "tune": True})
        for r in rows:
            r.setdefault("num_envs", n)
    for r in rows:
        r.update(group="cartpole", mode="step")
        r["batch_size"] = r["num_envs"]
    return rows


def _envpool(n: int, threads: int):
    from envpool_cartpole import EnvPoolVector

    return EnvPoolVector("CartPole-v1", n, threads, 0)


def run_row(row: Dict[str, Any], seconds: float, warmup: float) -> None:
    """Measures ``row`` in place (its figures, or ``status`` with the error)."""
    if row.get("status"):
        return
    try:
        if row.get("tune"):
            from ringenv.cli.tune import measure_configuration

            figures = measure_configuration(resolve_env("CartPole-v1"), row["num_envs"], row["workers"],
                                            inline=row["inline"], seconds=seconds, warmup_s=warmup)
        else:
            actions = None
            if row.get("actions") == "int32":
                rng = np.random.default_rng(0)
                actions = [rng.integers(0, 2, row["batch_size"], dtype=np.int32) for _ in range(256)]
            m = measure(row["make"], num_envs=row["num_envs"], seconds=seconds, seed=0,
                        batch_size=row["batch_size"], actions=actions, warmup_s=warmup)
            figures = m.figures()
        row.update(status="ok", steps_per_s=figures["steps_per_s"], tree_cores=figures["cpu"]["tree_cores"],
                   main_cores=figures["cpu"]["main_cores"], p50_ms=figures["batch_latency_ms"]["p50"],
                   p99_ms=figures["batch_latency_ms"]["p99"], startup_s=figures["startup_s"],
                   env_steps=figures["env_steps"], wall_s=figures["wall_s"])
    except Exception as e:  # a row that fails is reported; the others still run
        row["status"] = f"error: {type(e).__name__}: {e}"[:200]


def label(row: Dict[str, Any]) -> str:
    """A row in words, e.g. ``200 µs, Dict 148 KiB, 3 scalars: ringenv 2 workers async 4``."""
    w = row["workers"]
    unit = "thread" if row["runtime"] == "EnvPool" else "worker"
    counted = w is not None and (not row["peer"] or row["runtime"] == "EnvPool")  # not Gymnasium's own
    who = row["runtime"] + (f" {w} {unit}{'s' if w != 1 else ''}" if counted else "")
    if not row["peer"]:
        who += (" default" if w is None else "") + (" + inline" if row.get("inline") else "")
    mode = f" async {row['batch_size']}" if row["mode"] == "async" else ""
    if row["group"] == "cartpole":
        return f"CartPole-v1 {row['num_envs']} envs: {who}"
    return f"{row['cost_us']:g} µs, {row['obs']}, infos {row['infos']}: {who}{mode}"



def run_condition(name: str, args) -> Dict[str, Any]:
    """Every row once, under condition ``name`` (``quiet`` or ``neighbour``)."""
    neighbour = busy_neighbour() if name == "neighbour" else contextlib.nullcontext()
    started = time.time()
    load = os.getloadavg()[0]
    envs: List[Dict[str, Any]] = []
    cartpole: List[Dict[str, Any]] = []
    with neighbour:
        for cost in args.costs:
            for obs in args.observations:
                for infos in args.infos:
                    factory = functools.partial(GridEnv, cost, obs, infos)
                    single = single_loop_steps_per_s(factory, args.seconds)
                    rows = env_rows(cost, obs, infos, args.num_envs, args.workers)
                    for r in rows:
                        run_row(r, args.seconds, args.warmup)
                        progress(name, r)
                    envs.append({"cost_us": cost, "obs": obs, "infos": infos, "single_steps_per_s": single,
                                 "ceiling_steps_per_s": args.cores * single, "rows": rows})
        for r in cartpole_rows(args.cartpole_envs, args.workers):
            run_row(r, args.seconds, args.warmup)
            progress(name, r)
            cartpole.append(r)
    for env in envs:
        add_ratios(env["rows"], env["ceiling_steps_per_s"])
    for n in args.cartpole_envs:
        add_ratios([r for r in cartpole if r["num_envs"] == n], None)
    for r in [r for e in envs for r in e["rows"]] + cartpole:
        r.pop("make", None)  # a factory, not a figure
    return {"name": name, "load_average_at_start": load, "minutes": (time.time() - started) / 60,
            "envs": envs, "cartpole": cartpole}


def progress(condition: str, row: Dict[str, Any]) -> None:
    figure = f"{row['steps_per_s']:,.0f} steps/s" if row.get("status") == "ok" else row.get("status")
    print(f"  [{condition}] {label(row)}: {figure}", file=sys.stderr, flush=True)


def add_ratios(rows: List[Dict[str, Any]], ceiling: Optional[float]) -> None:
    """Sets each measured ringenv row's ratios: ``vs_best_peer``, ``vs_sync``, ``vs_vector``, ``ceiling_ratio``."""
    ok = [r for r in rows if r.get("status") == "ok"]
    peers = [r for r in ok if r["peer"]]
    best = max(peers, key=lambda r: r["steps_per_s"], default=None)
    sync = next((r for r in peers if r["runtime"] == "gymnasium SyncVectorEnv"), None)
    vector = next((r for r in peers if r["runtime"].startswith("gymnasium make_vec")), None)
    for r in ok:
        if r["peer"]:
            r["best"] = r is best
            continue
        if best is not None:
            r["vs_best_peer"] = r["steps_per_s"] / best["steps_per_s"]
            r["best_peer"] = label(best).split(": ", 1)[1]
        if sync is not None:
            r["vs_sync"] = r["steps_per_s"] / sync["steps_per_s"]
        if vector is not None:
            r["vs_vector"] = r["steps_per_s"] / vector["steps_per_s"]
        if ceiling:
            r["ceiling_ratio"] = r["steps_per_s"] / ceiling



def _worst(rows: List[Dict[str, Any]], key: str) -> Dict[str, Any]:
    return min(rows, key=lambda r: r[key])


def evaluate(cond: Dict[str, Any], cores: int) -> List[Dict[str, Any]]:
    """The targets under one condition, each ``{"target", "met" (None: not measured), "measured"}``."""
    python_rows = [r for e in cond["envs"] for r in e["rows"] if r.get("status") == "ok" and not r["peer"]]
    cart_rows = [r for r in cond["cartpole"] if r.get("status") == "ok" and not r["peer"]]
    out: List[Dict[str, Any]] = []

    def verdict(target: str, rows: List[Dict[str, Any]], key: str, threshold: float, fmt: str = "{:.2f}x",
                why_missing: str = "no such row ran") -> None:
        rows = [r for r in rows if key in r]
        if not rows:
            out.append({"target": target, "met": None, "measured": f"not measured: {why_missing}"})
            return
        failing = [r for r in rows if r[key] < threshold]
        worst = _worst(rows, key)
        text = f"worst {fmt.format(worst[key])} ({label(worst)})"
        if failing:
            text = f"{len(failing)} of {len(rows)} rows below; " + text
        else:
            text = f"all {len(rows)} rows; " + text
        out.append({"target": target, "met": not failing, "measured": text})

    verdict("at least 1.0x the best peer on every row", python_rows + cart_rows, "vs_best_peer", 1.0)
    verdict("at least 1.0x the best peer on every row, default settings (the default columns only)",
            [r for r in python_rows + cart_rows if r.get("default")], "vs_best_peer", 1.0,
            why_missing="no default row ran")
    verdict("envs of 200 µs or more, 2 workers: at least 1.7x SyncVectorEnv",
            [r for r in python_rows if r["cost_us"] >= 200 and r["stepping"] == 2], "vs_sync", 1.7,
            why_missing="no 200 or 1000 µs row with 2 workers")
    for cost, share in ((40.0, 0.90), (1000.0, 0.95)):
        target = f"at least {share:.0%} of the {cores}-core ceiling at {cost:g} µs per step"
        if cond["name"] != "quiet":
            out.append({"target": target, "met": None,
                        "measured": "not applicable: the neighbour holds a core, so the machine's ceiling is not "
                                    "the rows' ceiling"})
            continue
        # oversubscribed rows can read above the ceiling (a preempted busy-wait still sees its clock run)
        best_rows = []
        for e in cond["envs"]:
            rows = [r for r in e["rows"] if r.get("status") == "ok" and not r["peer"] and e["cost_us"] == cost
                    and r["stepping"] <= cores]
            if rows:
                best_rows.append(max(rows, key=lambda r: r["ceiling_ratio"]))
        verdict(target + " (each env's best configuration)", best_rows, "ceiling_ratio", share, fmt="{:.1%}",
                why_missing=f"no {cost:g} µs env ran")
    verdict("big Dict with per-step infos at ~200 µs, 2 workers: at least 1.5x SyncVectorEnv",
            [r for r in python_rows if r["cost_us"] == 200 and r["obs"] == OBSERVATIONS[1]
             and r["infos"] != "none" and r["stepping"] == 2], "vs_sync", 1.5,
            why_missing="the 200 µs Dict env with infos did not run")
    verdict("Rust CartPole, 16 and 64 envs, 1 and 2 workers, make_vec and tune: at least 3x Gymnasium's "
            "vectorised CartPole", [r for r in cart_rows if r["workers"] != 0], "vs_vector", 3.0)
    out.append({"target": "spin_us=None within 10% of the best fixed spin_us on every row", "met": None,
                "measured": "not measured here: the grid runs default settings only (docs/WAKEUP.md)"})
    return out


VERDICT = {True: "met", False: "**NOT met**", None: "-"}


def _cell(r: Optional[Dict[str, Any]]) -> str:
    if r is None:
        return ""
    if r.get("status") != "ok":
        return str(r.get("status", "-"))
    text = f"{r['steps_per_s']:,.0f}"
    if r["peer"]:
        return f"**{text}**" if r.get("best") else text
    ratio = r.get("vs_best_peer")
    return f"{text} ({ratio:.2f}x)" if ratio is not None else text


def _column(r: Dict[str, Any]) -> str:
    if r["peer"]:
        return {"gymnasium SyncVectorEnv": "Sync", "gymnasium AsyncVectorEnv": "Async"}.get(
            r["runtime"], "Gymnasium vector" if r["runtime"].startswith("gymnasium make_vec")
            else f"EnvPool {r['workers']} thr" if r["workers"] else "EnvPool")
    name = {"ringenv": "ringenv", "ringenv make_vec": "make_vec", "ringenv tune": "tune"}[r["runtime"]]
    mode = f" async {r['batch_size']}" if r["mode"] == "async" else ""
    who = f"default ({r['processes']}w{'+inline' if r['inline'] else ''})" if r.get("default") else (
        "0w (in-process)" if r["workers"] == 0 else f"{r['workers']}w{'+inline' if r['inline'] else ''}")
    return f"{name} {who}{mode}"


def section(report: Dict[str, Any]) -> List[str]:
    m = report["machine"]
    s = report["settings"]
    lines = [
        BEGIN,
        "## The grid: default settings, "
        + " and ".join("quiet" if c["name"] == "quiet" else "with a busy neighbour" for c in report["conditions"])
        + (" (`--quick`: a corner of the grid)" if s.get("quick") else "") + " (`benches/grid.py`)",
        "",
        "Written by `benches/grid.py` (`scripts/bench.sh` runs it); edit the script, not this section.",
        f"Machine: {m['cores']} cores usable ({m['cpu_count']} in all), CPU {m.get('cpu_model') or 'unknown'}, "
        f"{m['platform']}; Python {m['python']}, ringenv {m['ringenv']}, gymnasium {m['gymnasium']}, "
        f"numpy {m['numpy']}" + (f", EnvPool {report['envpool']}" if report.get("envpool") else ", EnvPool not "
                                 "installed") + f"; {report['date']}.",
        f"Each row: {s['warmup']:g} s warm-up, then {s['seconds']:g} s measured by the one measurement loop "
        "(`ringenv.cli._measure`); steps/s counts env steps.",
        f"Python envs: {s['num_envs']} of them, each step busy-waits its cost; observation 16 float32s or a Dict of 12 "
        "uint8/int16/int64 leaves (151,552 bytes); infos none or 3 scalars every step; truncated every "
        f"{TRUNCATE_AFTER} steps. Every runtime with its default settings (ringenv: `AsyncVectorEnv(env_fns)`, "
        "the *default* column, then `AsyncVectorEnv(env_fns, num_workers=w)`; with `batch_size=num_envs/2` for the "
        "async rows, recv/send). `Nw`: N worker processes; `+inline`: the main process steps one more share "
        "itself (ringenv's default wherever the processes plus the main process fit the cores); `0w (in-process)`: "
        "`num_workers=0`, no worker process, the main process steps every env. The Rust CartPole target counts "
        "the default, 1 and 2 workers.",
        "Ratios in brackets: ringenv's steps/s over the best peer's (in **bold**) in the same condition. The "
        "ceiling is cores x a single-env loop in one process.",
        "",
        "### Targets, computed from this run",
        "",
        "| target | " + " | ".join(c["name"] + f" (load {c['load_average_at_start']:.1f} at start)"
                                   for c in report["conditions"]) + " |",
        "|---|" + "---|" * len(report["conditions"]),
    ]
    targets = [t["target"] for t in report["conditions"][0]["targets"]]
    for i, target in enumerate(targets):
        cells = []
        for c in report["conditions"]:
            t = c["targets"][i]
            cells.append(f"{VERDICT[t['met']]}: {t['measured']}" if t["met"] is not None else t["measured"])
        lines.append(f"| {target} | " + " | ".join(cells) + " |")
    lines.append("")
    for c in report["conditions"]:
        title = "quiet" if c["name"] == "quiet" else "with one busy-looping neighbour process"
        lines += [f"### Python envs, {title} ({c['minutes']:.1f} min)", ""]
        columns: List[str] = []
        for e in c["envs"]:
            for r in e["rows"]:
                if _column(r) not in columns:
                    columns.append(_column(r))
        lines.append("| cost µs | observation | infos | ceiling | " + " | ".join(columns) + " |")
        lines.append("|---|---|---|---|" + "---|" * len(columns))
        for e in c["envs"]:
            by = {_column(r): r for r in e["rows"]}
            lines.append(f"| {e['cost_us']:g} | {e['obs']} | {e['infos']} | {e['ceiling_steps_per_s']:,.0f} | "
                         + " | ".join(_cell(by.get(col)) for col in columns) + " |")
        lines.append("")
        lines += [f"### Rust CartPole, {title}", ""]
        columns = []
        for r in c["cartpole"]:
            if _column(r) not in columns:
                columns.append(_column(r))
        lines.append("| envs | " + " | ".join(columns) + " | worst x Gymnasium vector (the target's rows) |")
        lines.append("|---|" + "---|" * (len(columns) + 1))
        for n in report["settings"]["cartpole_envs"]:
            rows = [r for r in c["cartpole"] if r["num_envs"] == n]
            by = {_column(r): r for r in rows}
            vs = [r["vs_vector"] for r in rows if "vs_vector" in r and r["workers"] != 0]  # default, 1 and 2
            worst = f"{min(vs):.2f}x" if vs else "-"
            lines.append(f"| {n} | " + " | ".join(_cell(by.get(col)) for col in columns) + f" | {worst} |")
        lines.append("")
    lines.append(END)
    return lines



def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="a corner of the grid (0 and 200 µs, both observations, 3 scalar infos, 1 and 2 "
                             "workers, CartPole 16 envs) at 0.2 s per row: checks that it runs; writes no file "
                             "unless --output is given")
    parser.add_argument("--neighbour", choices=("both", "off", "on"), default="both",
                        help="both (default): quiet, then with one busy-looping neighbour process; off: quiet only; "
                             "on: with the neighbour only")
    parser.add_argument("--seconds", type=float, default=None, help="measured seconds per row (default 0.8; quick 0.2)")
    parser.add_argument("--warmup", type=float, default=None, help="warm-up seconds per row (default 0.3; quick 0.1)")
    parser.add_argument("--num-envs", type=int, default=8, help="envs of each Python env row (default 8)")
    parser.add_argument("--workers", type=results_sections.numbers(int, 0), default=None, help="ringenv worker counts (default 0,1,2,4; quick 1,2)")
    parser.add_argument("--costs", type=results_sections.numbers(), default=None, help="µs per env step (default 0,40,200,1000)")
    parser.add_argument("--cartpole-envs", type=results_sections.numbers(int, 1), default=None, help="Rust CartPole sizes (default 16,64)")
    parser.add_argument("--output", default=None,
                        help="the RESULTS.md whose grid section is replaced (default benches/RESULTS.md; with "
                             "--quick, or '-', none: the section is only printed, as by the other benches)")
    parser.add_argument("--json", default=None, help="also write every figure to this JSON file")
    ab.add_arguments(parser, repeats=2)
    args = parser.parse_args(argv)
    q = args.quick
    args.seconds = args.seconds if args.seconds is not None else (0.2 if q else 0.8)
    args.warmup = args.warmup if args.warmup is not None else (0.1 if q else 0.3)
    args.workers = sorted(set(args.workers or ([1, 2] if q else [0, 1, 2, 4])))
    args.costs = args.costs or ([0.0, 200.0] if q else list(COSTS_US))
    args.cartpole_envs = args.cartpole_envs or ([16] if q else [16, 64])
    args.observations = list(OBSERVATIONS)
    args.infos = ["3 scalars"] if q else list(INFOS)
    if not args.seconds > 0 or args.warmup < 0:
        parser.error("argument --seconds must be positive and --warmup at least 0")
    if args.num_envs < 2:
        parser.error(f"argument --num-envs: at least 2 (async batches are half of them), got {args.num_envs}")
    # "-" (and a --quick run without --output): print the section only (results_sections.publish).
    output = args.output if args.output is not None else ("-" if q else str(ROOT / "benches" / "RESULTS.md"))
    for path, name in ((output, "--output"), (args.json, "--json")):
        if path and path != "-" and not Path(path).resolve().parent.is_dir():
            parser.error(f"argument {name}: the folder of {path!r} does not exist")
    args.cores = usable_cores()
    if ab.child(args, lambda key: measure_one(key, args)):
        return 0
    info = machine_info()
    names = {"both": ["quiet", "neighbour"], "off": ["quiet"], "on": ["neighbour"]}[args.neighbour]
    if args.baseline:
        return compare_builds(args, names)
    print(f"grid: {len(args.costs) * len(args.observations) * len(args.infos)} Python envs x "
          f"{len(args.workers)} worker counts, CartPole {args.cartpole_envs}; {args.warmup:g} + {args.seconds:g} s per "
          f"row; conditions {', '.join(names)}; {args.cores} cores ({info.get('cpu_model')})", file=sys.stderr)
    report: Dict[str, Any] = {
        "schema": "ringenv.grid/1", "machine": info, "date": datetime.date.today().isoformat(),
        "envpool": _envpool_version(),
        "settings": {"seconds": args.seconds, "warmup": args.warmup, "num_envs": args.num_envs,
                     "workers": args.workers, "costs_us": args.costs, "observations": args.observations,
                     "infos": args.infos, "cartpole_envs": args.cartpole_envs, "quick": q,
                     "dict_bytes": space_bytes(dict_space()), "warmup_min_steps": WARMUP_MIN_STEPS,
                     "python": platform.python_version()},
        "conditions": [],
    }
    for name in names:
        cond = run_condition(name, args)
        cond["targets"] = evaluate(cond, args.cores)
        report["conditions"].append(cond)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
        print(f"wrote {args.json}", file=sys.stderr)
    results_sections.publish("grid", section(report), output)
    return 0


ROW_KEY = ("group", "cost_us", "obs", "infos", "num_envs", "runtime", "workers", "mode", "batch_size")


def ringenv_rows(args) -> List[Dict[str, Any]]:
    """Every ringenv row the grid's settings make (no peers), each as a JSON-able key with a label."""
    rows = [r for cost in args.costs for obs in args.observations for infos in args.infos
            for r in env_rows(cost, obs, infos, args.num_envs, args.workers)]
    rows += cartpole_rows(args.cartpole_envs, args.workers)
    return [{**{k: r.get(k) for k in ROW_KEY}, "label": label(r)} for r in rows if not r["peer"]]


def measure_one(key: Dict[str, Any], args) -> float:
    """Steps/s of the row ``key`` names (:func:`ringenv_rows`), measured once in this process."""
    if key["group"] == "cartpole":
        rows = cartpole_rows([key["num_envs"]], args.workers)
    else:
        rows = env_rows(key["cost_us"], key["obs"], key["infos"], args.num_envs, args.workers)
    [row] = [r for r in rows if all(r.get(k) == key[k] for k in ROW_KEY)]
    run_row(row, args.seconds, args.warmup)
    if row["status"] != "ok":
        raise RuntimeError(row["status"])
    return float(row["steps_per_s"])


def compare_builds(args, names: List[str]) -> int:
    """``--baseline``: every ringenv row under each condition through :func:`ab.compare`."""
    results: List[Dict[str, Any]] = []
    for name in names:
        with busy_neighbour() if name == "neighbour" else contextlib.nullcontext():
            results += ab.compare(__file__, ringenv_rows(args), args.baseline, args.ab_repeats, condition=name)
    print("\n".join(ab.section("The grid (`benches/grid.py`)", results, args.baseline, args.ab_repeats,
                               args.seconds)))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def _envpool_version() -> Optional[str]:
    try:
        import envpool
    except ImportError:
        return None
    return str(envpool.__version__)


if __name__ == "__main__":
    sys.exit(main())
