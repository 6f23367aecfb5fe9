"""The main process's own CPU per batch and per env step, with every env in worker processes
(``inline=False``) and ``spin_us=0``, so that what the main process burns is its own work (writing
actions, sending, sleeping on the futex, building results and infos), not spinning.

Envs of ~0 cost: ``benches/grid.py``'s :class:`GridEnv` with 16 float32s or its 148 KiB Dict,
without infos and with three scalars, and the built-in Rust CartPole (4 float32s, no infos);
each stepped every env at a time (``step``) and in asynchronous batches of half the envs
(``send``/``recv``), at 16, 64 and 256 envs, ``--workers`` worker processes (default 2: an async
batch is one worker's block). CPU is ``time.process_time()`` of this process over whole windows
of batches; a row's figure is the median of its windows, in its median round of ``--rounds``
rounds over every row (the order reversed every other round), and the section says how far the
rounds spread. Per configuration, a least-squares line
``a + b * envs per batch`` in µs. Then the targets, each with a verdict from this run's figures.
Writes the ``main_cost`` section of ``benches/RESULTS.md`` (``benches/results_sections.py``).
With ``--baseline DIR`` each row is measured with this build and another alternately
(``benches/ab.py``; the figure is env steps per second of main-process CPU) and nothing is written.

Usage::

    python benches/main_cost.py                 # every row, 3 rounds (~4 min on 2 cores)
    python benches/main_cost.py --quick         # 16 and 64 envs, short windows, printed only
    python benches/main_cost.py --quick --baseline DIR
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

import ab
import results_sections
import ringenv
from grid import GridEnv

#: (observation, host) of each env kind.
ENVS = {"16 floats": "python", "Dict 148 KiB": "python", "Rust CartPole": "rust"}
INFOS = ("none", "3 scalars")
MODES = ("step", "async")
SIZES = (16, 64, 256)

#: The targets: µs per batch and per env of flat observations without infos; µs more per env with
#: three scalar infos; async batches' µs per env step over stepping every env's.
TARGET_BATCH_US, TARGET_ENV_US, TARGET_INFOS_US, TARGET_ASYNC_RATIO = 10.0, 0.1, 0.3, 1.2


def rows(sizes: List[int]) -> List[Dict[str, Any]]:
    """Every row: env x infos x mode x num_envs (the Rust CartPole has no infos)."""
    return [{"env": env, "infos": infos, "mode": mode, "num_envs": n,
             "batch_size": n if mode == "step" else n // 2}
            for env in ENVS for infos in INFOS if not (ENVS[env] == "rust" and infos != "none")
            for mode in MODES for n in sizes]


def label(row: Dict[str, Any]) -> str:
    mode = "step" if row["mode"] == "step" else f"async {row['batch_size']}"
    return f"{row['env']}, infos {row['infos']}, {row['num_envs']} envs, {mode}"


def make(row: Dict[str, Any], workers: int) -> Any:
    kwargs = dict(num_workers=workers, inline=False, spin_us=0.0,
                  batch_size=row["batch_size"])
    if ENVS[row["env"]] == "rust":
        return ringenv.make_vec("CartPole-v1", row["num_envs"], vector_kwargs=kwargs)
    fn = functools.partial(GridEnv, 0.0, row["env"], row["infos"])
    return ringenv.AsyncVectorEnv([fn] * row["num_envs"], **kwargs)


def measure_row(row: Dict[str, Any], workers: int, seconds: float, windows: int) -> Dict[str, Any]:
    """The row's figures: µs of main-process CPU per batch (median of ``windows`` windows of
    ``seconds / windows`` wall seconds each, after a warm-up), per env step, and steps/s."""
    envs = make(row, workers)
    try:
        batch = row["batch_size"]
        rng = np.random.default_rng(0)
        actions = [rng.integers(0, 2, batch).astype(envs.single_action_space.dtype) for _ in range(8)]
        if batch < row["num_envs"]:
            envs.async_reset(seed=0)
            recv, send = envs.recv, envs.send

            def step(a: np.ndarray) -> Any:
                results = recv()
                send(a, results[4]["env_id"])
                return results
        else:
            envs.reset(seed=0)
            step = envs.step
        held = None  # the last results stay alive until the next arrive, as a policy loop holds them
        for i in range(200):
            held = step(actions[i % 8])
        per_batch, rates, batches = [], [], 0
        before = resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(windows):
            count, wall0, cpu0 = 0, time.perf_counter(), time.process_time()
            end = wall0 + seconds / windows
            while True:
                for a in actions:
                    held = step(a)
                count += len(actions)
                if time.perf_counter() >= end:
                    break
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            per_batch.append(cpu / count * 1e6)
            rates.append(count * batch / wall)
            batches += count
        after = resource.getrusage(resource.RUSAGE_SELF)
        del held
    finally:
        envs.close()
    us = float(np.median(per_batch))
    return {**row, "us_per_batch": us, "us_per_step": us / batch, "windows_us": per_batch,
            "steps_per_s": float(np.median(rates)),
            # the kernel's share of this process's CPU (getrusage: system over user + system time)
            "sys_share": (after.ru_stime - before.ru_stime)
            / max(1e-9, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime),
            # context switches of this process per batch: sleeps (voluntary) and preemptions
            "sleeps": (after.ru_nvcsw - before.ru_nvcsw) / batches,
            "preempted": (after.ru_nivcsw - before.ru_nivcsw) / batches}


def fit(points: List[Tuple[int, float]]) -> Optional[Tuple[float, float]]:
    """``(a, b)`` of the least-squares line ``a + b * x`` through ``(x, y)`` points (two or more x)."""
    if len({x for x, _ in points}) < 2:
        return None
    b, a = np.polyfit([x for x, _ in points], [y for _, y in points], 1)
    return float(a), float(b)


def configurations(measured: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per (env, infos, mode): its rows and the fit of µs per batch against envs per batch."""
    out: Dict[Tuple[str, str, str], Dict[str, Any]] = {}
    for r in measured:
        key = (r["env"], r["infos"], r["mode"])
        out.setdefault(key, {"env": key[0], "infos": key[1], "mode": key[2], "rows": []})["rows"].append(r)
    for c in out.values():
        c["fit"] = fit([(r["batch_size"], r["us_per_batch"]) for r in c["rows"]])
    return list(out.values())


def evaluate(measured: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The targets, each with the rows it judges, its worst figure and whether it is met."""
    by = {(r["env"], r["infos"], r["mode"], r["num_envs"]): r for r in measured}
    out = []
    for env in ("16 floats", "Rust CartPole"):
        judged = [(n, r["us_per_batch"] / (TARGET_BATCH_US + TARGET_ENV_US * n))
                  for (e, i, m, n), r in by.items() if (e, i, m) == (env, "none", "step")]
        if judged:
            n, worst = max(judged, key=lambda x: x[1])
            out.append({"target": f"{env}, no infos, step: at most {TARGET_BATCH_US:g} µs per batch + "
                                  f"{TARGET_ENV_US:g} µs per env",
                        "figure": f"worst {n} envs: {by[(env, 'none', 'step', n)]['us_per_batch']:.1f} µs, "
                                  f"{worst:.2f}x the target's {TARGET_BATCH_US + TARGET_ENV_US * n:.1f}",
                        "met": worst <= 1.0})
    for env in ("16 floats", "Dict 148 KiB"):
        for mode in MODES:
            extra = [(n, (r["us_per_batch"] - by[(env, "none", mode, n)]["us_per_batch"]) / r["batch_size"])
                     for (e, i, m, n), r in by.items()
                     if (e, i, m) == (env, "3 scalars", mode) and (env, "none", mode, n) in by]
            if extra:
                n, worst = max(extra, key=lambda x: x[1])
                out.append({"target": f"{env}, {mode}: three scalar infos at most {TARGET_INFOS_US:g} µs more "
                                      "per env step",
                            "figure": f"worst {n} envs: {worst:+.2f} µs per env step", "met": worst <= TARGET_INFOS_US})
    for env in ENVS:
        for infos in INFOS:
            ratios = [(n, r["us_per_step"] / by[(env, infos, "step", n)]["us_per_step"])
                      for (e, i, m, n), r in by.items()
                      if (e, i, m) == (env, infos, "async") and (env, infos, "step", n) in by]
            if ratios:
                n, worst = max(ratios, key=lambda x: x[1])
                out.append({"target": f"{env}, infos {infos}: async batches within {TARGET_ASYNC_RATIO:g}x of "
                                      "step per env step",
                            "figure": f"worst {n} envs: {worst:.2f}x", "met": worst <= TARGET_ASYNC_RATIO})
    return out


def section(report: Dict[str, Any]) -> List[str]:
    a = report["args"]
    lines = results_sections.section_head("main_cost", "The main process's CPU per batch", report,
                                          f", load average {report['load']:.1f} at the start") + [
        "",
        f"Every env in {a.workers} worker processes (`inline=False`), `spin_us=0`, envs of ~0 µs; "
        f"`time.process_time()` of the main process over {a.windows} windows of {a.seconds / a.windows:g} s per "
        f"row and round, the median window's µs per batch; {a.rounds} rounds over every row, each row's figures "
        "those of its median round (µs per env step: per batch over the envs in it; sleeps: the "
        "main process's voluntary context switches per batch, `getrusage`, its sleeps on the futex; sys: the "
        "share of its CPU in the kernel, `getrusage`'s system time: the futex calls and context switches). "
        "Async: `recv` then `send` of batches of half the envs (one worker's block).",
        "",
        "| env | infos | mode | " + " | ".join(f"{n} envs µs/batch (µs/step; sleeps; sys)" for n in a.sizes)
        + " | fit: µs per batch = a + b x envs in it |",
        "|---|---|---|" + "---:|" * len(a.sizes) + "---|",
    ]
    for c in report["configurations"]:
        cells = {r["num_envs"]: f"{r['us_per_batch']:.1f} ({r['us_per_step']:.2f}; {r['sleeps']:.2f}; "
                                f"{r['sys_share']:.0%})"
                 for r in c["rows"]}
        fitted = "-" if c["fit"] is None else f"{c['fit'][0]:.1f} + {c['fit'][1]:.3f} x"
        lines.append(f"| {c['env']} | {c['infos']} | {c['mode']} | "
                     + " | ".join(cells.get(n, "-") for n in a.sizes) + f" | {fitted} |")
    median, most = report["spread"]
    lines += ["", f"Spread: a row's µs per batch ranged over {median:.0%} of its median across the rounds (the median "
              f"row; at most {most:.0%})."]
    lines += ["", "| target | this run | met |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['figure']} | {'met' if t['met'] else '**not met**'} |"
              for t in report["targets"]]
    return lines + [results_sections.markers("main_cost")[1]]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="16 and 64 envs, 0.4 s per row; prints, writes no file "
                                                        "unless --output is given")
    p.add_argument("--sizes", type=results_sections.numbers(int, 2), default=None,
                   help="num_envs values (default 16,64,256)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--seconds", type=float, default=None, help="measured seconds per row (default 2; quick 0.4)")
    p.add_argument("--windows", type=int, default=5, help="windows per row; the median is the figure (default 5)")
    p.add_argument("--rounds", type=int, default=None, help="rounds over every row, the order reversed every other "
                                                            "one; a row's figures are its median round's (default 3; "
                                                            "quick 1)")
    p.add_argument("--output", default=None, help="the results file (default benches/RESULTS.md; with --quick "
                                                  "or '-': none)")
    ab.add_arguments(p, repeats=3)
    a = p.parse_args(argv)
    a.sizes = a.sizes or ([16, 64] if a.quick else list(SIZES))
    a.seconds = a.seconds or (0.4 if a.quick else 2.0)
    a.rounds = a.rounds or (1 if a.quick else 3)
    if any(n % (2 * a.workers) for n in a.sizes):
        p.error(f"--sizes must be multiples of 2 x --workers ({2 * a.workers}): async batches are half the envs")
    output = a.output or ("-" if a.quick else str(Path(__file__).resolve().parent / "RESULTS.md"))
    if ab.child(a, lambda row: 1e6 / measure_row(row, a.workers, a.seconds, a.windows)["us_per_step"]):
        return 0
    if a.baseline:
        results = ab.compare(__file__, [{**r, "label": label(r)} for r in rows(a.sizes)], a.baseline, a.ab_repeats,
                             condition="quiet")
        print("\n".join(ab.section("main_cost (env steps per main-process CPU second)", results, a.baseline,
                                   a.ab_repeats, a.seconds)))
        return 0
    report: Dict[str, Any] = {**results_sections.report_head(a), "load": os.getloadavg()[0]}
    todo = rows(a.sizes)
    rounds: List[List[Dict[str, Any]]] = [[] for _ in todo]
    for k in range(a.rounds):  # every row once per round, the order reversed every other round
        for i in (range(len(todo)) if k % 2 == 0 else reversed(range(len(todo)))):
            m = measure_row(todo[i], a.workers, a.seconds, a.windows)
            rounds[i].append(m)
            print(f"  round {k + 1}: {label(todo[i])}: {m['us_per_batch']:.1f} µs per batch, {m['us_per_step']:.3f} per "
                  f"env step, {m['steps_per_s']:,.0f} steps/s; per batch {m['sleeps']:.2f} sleeps, "
                  f"{m['preempted']:.2f} preemptions; {m['sys_share']:.0%} in the kernel", file=sys.stderr, flush=True)
    # A row's figures are those of its median round; its spread, the rounds' range around that median.
    measured = [sorted(ms, key=lambda m: m["us_per_batch"])[len(ms) // 2] for ms in rounds]
    spreads = [(max(m["us_per_batch"] for m in ms) - min(m["us_per_batch"] for m in ms)) / med["us_per_batch"]
               for ms, med in zip(rounds, measured)]
    report.update(configurations=configurations(measured), targets=evaluate(measured),
                  spread=(float(np.median(spreads)), max(spreads)))
    results_sections.publish("main_cost", section(report), output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
