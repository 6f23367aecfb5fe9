"""Asynchronous batches with and without the inline share (docs/INLINE.md): why
``AsyncVectorEnv(env_fns, batch_size=B)`` puts every env in a worker process by default. For
``benches/grid.py``'s Python envs, batches of half, with ``--policies`` µs of the caller's work
between ``recv`` and ``send``, quiet and beside the busy neighbour; ``--repeats`` alternating
rounds, medians with the spread. Writes its section of ``benches/RESULTS.md`` (``--output -``: none).

Usage::

    python benches/async_share.py --costs 40,200 --policies 0,200 --repeats 5 --output -
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results_sections  # noqa: E402
import ringenv  # noqa: E402
from grid import OBSERVATIONS, GridEnv  # noqa: E402
from neighbour import busy_neighbour  # noqa: E402
from ringenv.cli._measure import measure  # noqa: E402

LAYOUTS = ("default", "share")


def measure_layout(layout: str, cost: float, obs: str, policy_us: float, num_envs: int, seconds: float) -> float:
    """Steps/s of one layout (``default`` or ``share``) of the env."""
    fns = [functools.partial(GridEnv, cost, obs, "3 scalars")] * num_envs
    extra = {"inline": True} if layout == "share" else {}
    make = functools.partial(ringenv.AsyncVectorEnv, fns, batch_size=num_envs // 2, **extra)
    m = measure(make, num_envs=num_envs, seconds=seconds, seed=0, batch_size=num_envs // 2,
                warmup_s=min(0.3, seconds / 2), policy_s=policy_us * 1e-6)
    return m.steps_per_s


def run_condition(name: str, args) -> List[Dict[str, object]]:
    """Every row, ``args.repeats`` rounds each, under ``name`` (``quiet`` or ``neighbour``)."""
    rows = []
    with busy_neighbour() if name == "neighbour" else contextlib.nullcontext():
        for cost in args.costs:
            for obs in args.observations:
                for policy in args.policies:
                    figures: Dict[str, List[float]] = {layout: [] for layout in LAYOUTS}
                    for r in range(args.repeats):
                        for layout in (LAYOUTS if r % 2 == 0 else LAYOUTS[::-1]):
                            figures[layout].append(measure_layout(layout, cost, obs, policy, args.num_envs,
                                                                  args.seconds))
                    row = {"condition": name, "cost_us": cost, "obs": obs, "policy_us": policy,
                           **{k: sorted(v) for k, v in figures.items()}}
                    rows.append(row)
                    print(f"  [{name}] {cost} µs, {obs}, policy {policy} µs: default "
                          f"{np.median(row['default']):,.0f}, share {np.median(row['share']):,.0f}",
                          file=sys.stderr, flush=True)
    return rows


def section(rows: List[Dict[str, object]], report: Dict[str, object]) -> List[str]:
    args = report["args"]
    lines = results_sections.section_head(
        "async_share", "Asynchronous batches: the default (worker processes only) against the inline share",
        report) + [
        f"{args.num_envs} of `benches/grid.py`'s Python envs with 3 scalar infos every step, batches of "
        f"{args.num_envs // 2} (`recv`/`send`); *default*: `AsyncVectorEnv(env_fns, batch_size="
        f"{args.num_envs // 2})`, *share*: the same with `inline=True`; *policy*: µs busy-waited between "
        "`recv` and `send`. Steps/s, the median of "
        f"{args.repeats} rounds of {args.seconds} s (spread in brackets), the two layouts alternating.",
        "",
        "| condition | env µs | observation | policy µs | default | share | default / share |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        d, s = float(np.median(r["default"])), float(np.median(r["share"]))
        cells = " | ".join(results_sections.median_spread(r[layout]) for layout in LAYOUTS)
        lines.append(f"| {r['condition']} | {r['cost_us']:g} | {r['obs']} | {r['policy_us']:g} | {cells} | "
                     f"{d / s:.2f}x |")
    return lines + [results_sections.markers("async_share")[1]]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--costs", type=results_sections.numbers(), default=[0.0, 40.0, 200.0, 1000.0], help="µs per env step")
    parser.add_argument("--observations", type=lambda t: t.split(","), default=list(OBSERVATIONS))
    parser.add_argument("--policies", type=results_sections.numbers(), default=[0.0, 200.0], help="µs of work between recv and send")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=0.6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--conditions", type=lambda t: t.split(","), default=["quiet", "neighbour"])
    results_sections.add_output_argument(parser)
    args = parser.parse_args(argv)
    for obs in args.observations:
        if obs not in OBSERVATIONS:
            parser.error(f"--observations: {obs!r} is not one of {list(OBSERVATIONS)}")
    if args.num_envs < 2 or args.num_envs % 2:
        parser.error(f"--num-envs must be even and at least 2, got {args.num_envs}")
    report = results_sections.report_head(args)
    rows = [r for c in args.conditions for r in run_condition(c, args)]
    results_sections.publish("async_share", section(rows, report), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
