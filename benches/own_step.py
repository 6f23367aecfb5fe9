"""How long an env's own ``step`` takes inside each runtime (issue 12: "the env's own step ran 42%
slower inside a worker than in SyncVectorEnv; find out why"). Writes its section of
``benches/RESULTS.md``.

Each env is wrapped in :class:`TimedStep`, which adds the wall time of every ``env.step`` call
(``time.perf_counter_ns`` around the inner env's ``step``, nothing else) to a counter in the env's
own process; after the timed window the counters are read with ``call("step_timing")``, so each
process's figure is its own envs' mean µs per ``step``. Runtimes, each with default settings
unless named: Gymnasium's ``SyncVectorEnv``; ringenv with ``num_workers=0`` (this process steps
every env, no worker process); ringenv's default (one worker process and the main process's
share on 2 cores); the default with ``spin_us=0`` (every wait sleeps on the futex at once) and
with ``spin_us=2000`` (every wait spins). Envs: Gymnasium's ``CartPole-v1`` (``gymnasium.make``,
16 envs) and MiniGrid's ``MiniGrid-DoorKey-8x8-v0`` (8 envs, when ``minigrid`` is installed: the
``bench`` extra). Every row runs through the one measurement loop (``ringenv.cli._measure``),
``--rounds`` times in turn; figures are medians with the spread in brackets.

Usage: ``python benches/own_step.py [--seconds 1] [--rounds 3] [--output RESULTS.md|-]``.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np

import results_sections


class TimedStep(gym.Wrapper):
    """Counts the wall time of the inner env's ``step`` (ns) and its calls."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.step_ns = 0
        self.steps = 0

    def step(self, action):
        t = time.perf_counter_ns()
        out = self.env.step(action)
        self.step_ns += time.perf_counter_ns() - t
        self.steps += 1
        return out

    def step_timing(self) -> Tuple[int, int]:
        """``(ns, calls)`` of ``step`` since the env was made."""
        return self.step_ns, self.steps


def make_timed(env_id: str) -> TimedStep:
    if env_id.startswith("MiniGrid"):
        import minigrid  # noqa: F401  (registers MiniGrid's ids)
    return TimedStep(gym.make(env_id))


#: The runtimes, in the order they run each round: (name, vector env kwargs, None: SyncVectorEnv).
RUNTIMES: List[Tuple[str, Optional[Dict[str, Any]]]] = [
    ("gymnasium SyncVectorEnv", None),
    ("ringenv num_workers=0", {"num_workers": 0}),
    ("ringenv default", {}),
    ("ringenv default, spin_us=0", {"spin_us": 0}),
    ("ringenv default, spin_us=2000", {"spin_us": 2000}),
]


def envs_to_run() -> List[Tuple[str, int]]:
    out = [("CartPole-v1", 16)]
    if importlib.util.find_spec("minigrid") is not None:
        out.append(("MiniGrid-DoorKey-8x8-v0", 8))
    return out


def main_process_envs(envs: Any, n: int) -> range:
    """The env ids this process steps: every env of a ``SyncVectorEnv``, the inline worker's of a
    ringenv pool (all of them with ``num_workers=0``), none when every env is in a worker process."""
    pool = getattr(envs, "_pool", None)
    if pool is None:
        return range(n)
    inline = pool.inline_worker
    return range(0) if inline is None else pool.env_ids(inline)


def one_row(env_id: str, n: int, kwargs: Optional[Dict[str, Any]], seconds: float) -> Dict[str, float]:
    """steps/s, and the mean µs per ``step`` of the envs in worker processes and in this process."""
    import ringenv
    from ringenv.cli._measure import measure

    fns: List[Callable[[], gym.Env]] = [functools.partial(make_timed, env_id)] * n
    made: List[Any] = []
    timings: Dict[str, Any] = {}

    def make():
        made.append(gym.vector.SyncVectorEnv(fns) if kwargs is None else ringenv.AsyncVectorEnv(fns, **kwargs))
        return made[0]

    def read_counters(phase: str) -> None:  # the loop's "close" phase comes just before it closes the env
        if phase == "close" and made:
            timings["per_env"] = made[0].call("step_timing")
            timings["main_envs"] = main_process_envs(made[0], n)

    m = measure(make, num_envs=n, seconds=seconds, seed=0, on_phase=read_counters)
    per_env = [ns / max(calls, 1) / 1000 for ns, calls in timings["per_env"]]
    main = timings["main_envs"]
    row = {"steps_per_s": m.steps_per_s}
    for key, ids in (("main_us", main), ("worker_us", [i for i in range(n) if i not in main])):
        if ids:
            row[key] = float(np.mean([per_env[i] for i in ids]))
    return row


def run(seconds: float, rounds: int) -> Dict[str, Dict[str, List[Dict[str, float]]]]:
    out: Dict[str, Dict[str, List[Dict[str, float]]]] = {}
    for env_id, n in envs_to_run():
        out[f"{env_id} ({n} envs)"] = results = {name: [] for name, _ in RUNTIMES}
        for _ in range(rounds):
            for name, kwargs in RUNTIMES:
                row = one_row(env_id, n, kwargs, seconds)
                results[name].append(row)
                print(f"  {env_id} {name}: {row}", file=sys.stderr, flush=True)
    return out


def _median(rows: List[Dict[str, float]], key: str, fmt: str) -> str:
    values = [r[key] for r in rows if key in r]
    return results_sections.median_spread(values, fmt) if values else "-"


def section(report: Dict[str, Any]) -> List[str]:
    a = report["args"]
    end = results_sections.markers("own_step")[1]
    lines = results_sections.section_head("own_step", "An env's own `step` inside each runtime", report) + [
        "µs per call of the env's own `step` (a wrapper's `perf_counter_ns` around the inner env's `step`, "
        "read from each env's process), in a worker process and in the main process; steps/s of the vector env. "
        f"{a.seconds:g} s per row through the one measurement loop, {a.rounds} rounds in turn; the median, the "
        "spread in brackets.",
        "",
        "| env | runtime | steps/s | `step` µs, worker process | `step` µs, main process |",
        "|---|---|---:|---:|---:|",
    ]
    for env, results in report["results"].items():
        for name, _ in RUNTIMES:
            rows = results[name]
            lines.append(f"| {env} | {name} | {_median(rows, 'steps_per_s', ',.0f')} | "
                         f"{_median(rows, 'worker_us', '.2f')} | {_median(rows, 'main_us', '.2f')} |")
    return lines + [end]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=1.0, help="seconds per row")
    p.add_argument("--rounds", type=int, default=3)
    results_sections.add_output_argument(p)
    a = p.parse_args(argv)
    if a.seconds <= 0 or a.rounds < 1:
        p.error("--seconds must be positive and --rounds at least 1")
    t0 = time.perf_counter()
    report: Dict[str, Any] = {**results_sections.report_head(a), "results": run(a.seconds, a.rounds)}
    results_sections.publish("own_step", section(report), a.output)
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
