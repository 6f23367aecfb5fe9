"""Per-step infos of each kind of value (``--kinds``: no info, number, tuple, str, None, list,
namedtuple, array; and gym-simplegrid's env where installed), stepped through ringenv (default,
``num_workers=0``, ``num_workers=2, inline=False``) beside Gymnasium's vector envs: which values
keep a step on the typed path (``bindings/src/infos.rs``) and what the others cost. Rows run
``--rounds`` times in turn, quiet and beside the busy neighbour. Writes its section of
``benches/RESULTS.md``.

Usage: ``python benches/info_kinds.py [--envs 8] [--cost-us 0] [--seconds 1] [--rounds 2]
[--kinds no info,number,...] [--conditions quiet,neighbour] [--output RESULTS.md|-]``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import results_sections
from neighbour import busy_neighbour

MESSAGES = ("moved", "bumped into a wall", "picked up the key", "opened the door")


class Position(NamedTuple):
    x: int
    y: int


#: Each kind's info value at step ``t`` (``None`` for ``no info``: the info is empty).
VALUES: Dict[str, Optional[Callable[[int], Any]]] = {
    "no info": None,
    "number": lambda t: t / 2,
    "tuple": lambda t: (t % 8, t % 5),
    "str": lambda t: MESSAGES[t % 4],
    "None": lambda t: None,
    "list": lambda t: [t % 8, t % 5],
    "namedtuple": lambda t: Position(t % 8, t % 5),
    "array": lambda t: np.array([t % 2 == 0, True, t % 3 != 0, False]),
}

#: Whether each kind keeps a step on the typed path.
TYPED = {"no info": "-", "number": "yes", "tuple": "yes", "str": "yes", "None": "yes", "list": "yes",
         "namedtuple": "no", "array": "yes"}


class InfoKindEnv(gym.Env):
    """Busy-waits ``cost_us`` µs per step; its info holds a value of ``kind`` (:data:`VALUES`)."""

    action_space = spaces.Discrete(4)
    observation_space = spaces.Discrete(64)

    def __init__(self, kind: str, cost_us: float):
        self.value, self.cost_s, self.t = VALUES[kind], cost_us * 1e-6, 0

    def _info(self) -> Dict[str, Any]:
        return {} if self.value is None else {"step_count": self.t, "extra": self.value(self.t)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return 0, self._info()

    def step(self, action):
        from ringenv.cli._measure import busy_wait
        self.t += 1
        if self.cost_s:
            busy_wait(self.cost_s)
        return self.t % 64, 0.0, False, self.t % 500 == 0, self._info()


RUNTIMES = ("gymnasium SyncVectorEnv", "gymnasium AsyncVectorEnv", "ringenv default", "ringenv num_workers=0",
            "ringenv 2 workers, inline=False")


def _simplegrid() -> Optional[Callable[[], gym.Env]]:
    """A factory of gym-simplegrid's ``SimpleGrid-8x8-v0``, or ``None`` where it is not installed."""
    try:
        import gym_simplegrid  # noqa: F401 - registers its envs
    except ImportError:
        return None
    return lambda: gym.make("SimpleGrid-8x8-v0")


def rows(kinds: List[str], envs: int, cost_us: float, seconds: float, rounds: int) -> Dict[str, Dict[str, List[float]]]:
    """Steps/s of each row (a kind, or ``SimpleGrid-8x8-v0``) in each runtime, ``rounds`` times."""
    import ringenv
    from ringenv.cli._measure import measure

    factories = {kind: functools.partial(InfoKindEnv, kind, cost_us) for kind in kinds}
    simplegrid = _simplegrid()
    if simplegrid is not None:
        factories["gym-simplegrid SimpleGrid-8x8-v0"] = simplegrid
    out: Dict[str, Dict[str, List[float]]] = {row: {name: [] for name in RUNTIMES} for row in factories}
    for _ in range(rounds):
        for row, factory in factories.items():
            fns = [factory] * envs
            makers = {
                "gymnasium SyncVectorEnv": lambda: gym.vector.SyncVectorEnv(fns),
                "gymnasium AsyncVectorEnv": lambda: gym.vector.AsyncVectorEnv(fns),
                "ringenv default": lambda: ringenv.AsyncVectorEnv(fns),
                "ringenv num_workers=0": lambda: ringenv.AsyncVectorEnv(fns, num_workers=0),
                "ringenv 2 workers, inline=False": lambda: ringenv.AsyncVectorEnv(fns, num_workers=2, inline=False),
            }
            for name in RUNTIMES:
                m = measure(makers[name], num_envs=envs, seconds=seconds, seed=0)
                out[row][name].append(m.steps_per_s)
                print(f"  {row} / {name}: {m.steps_per_s:,.0f} steps/s", file=sys.stderr, flush=True)
    return out


def section(report: Dict[str, Any]) -> List[str]:
    a = report["args"]
    end = results_sections.markers("info_kinds")[1]
    lines = results_sections.section_head("info_kinds", "Infos of each kind of value", report) + [
        f"{a.envs} envs of {a.cost_us:g} µs per step, each info `{{\"step_count\": t, \"extra\": VALUE}}` on every "
        f"step, {a.seconds:g} s per row through the one measurement loop, {a.rounds} rounds in turn, each runtime's "
        "default settings. The figure is the median, the spread in brackets; the ratio is ringenv's default "
        "against the faster of Gymnasium's two (medians).",
    ]
    for condition, table in report["conditions"].items():
        lines += [
            "",
            f"**{condition}**" + (" (beside `python -c \"while True: pass\"`)" if condition == "neighbour" else ""),
            "",
            "| info value | typed | " + " | ".join(RUNTIMES) + " | ringenv / best peer |",
            "|---|---|" + "---:|" * (len(RUNTIMES) + 1),
        ]
        for row, runs in table.items():
            best_peer = max(float(np.median(runs[n])) for n in RUNTIMES[:2])
            cells = " | ".join(results_sections.median_spread(runs[n]) for n in RUNTIMES)
            ratio = float(np.median(runs["ringenv default"])) / best_peer
            lines.append(f"| {row} | {TYPED.get(row, 'yes')} | {cells} | {ratio:.2f}x |")
    return lines + [end]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--cost-us", type=float, default=0.0, help="µs of busy work per env step")
    p.add_argument("--seconds", type=float, default=1.0, help="seconds per row")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--kinds", default=",".join(VALUES), help=f"comma-separated, of {', '.join(VALUES)}")
    p.add_argument("--conditions", default="quiet,neighbour", help="comma-separated, of quiet, neighbour")
    results_sections.add_output_argument(p)
    a = p.parse_args(argv)
    kinds = [k for k in a.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in VALUES]
    if unknown:
        p.error(f"--kinds: unknown {unknown}; choose from {list(VALUES)}")
    conditions = [c for c in a.conditions.split(",") if c]
    if not conditions or any(c not in ("quiet", "neighbour") for c in conditions):
        p.error(f"--conditions must name quiet and/or neighbour, got {a.conditions!r}")
    t0 = time.perf_counter()
    report: Dict[str, Any] = {**results_sections.report_head(a), "conditions": {}}
    for condition in conditions:
        print(f"{condition}:", file=sys.stderr, flush=True)
        with busy_neighbour() if condition == "neighbour" else contextlib.nullcontext():
            report["conditions"][condition] = rows(kinds, a.envs, a.cost_us, a.seconds, a.rounds)
    results_sections.publish("info_kinds", section(report), a.output)
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
