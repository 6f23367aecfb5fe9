"""ringenv's main job: step real environments through ringenv and through what a user would pick
instead, in the same run on this machine, and print steps per second with ringenv's ratio to the
best of them ("vs best peer"; below 1.00x ringenv was slower).

Run through scripts/demo.sh (which sets everything up). Every runtime runs with its default
settings; each row is measured by ``ringenv.cli._measure.measure`` (random seeded actions for
``--seconds``; a vector step of 16 envs counts 16; tree CPU is the CPU seconds of the main process
and every worker per wall second). The groups: CartPole-v1 as a Python env, 16 envs, against
Gymnasium's ``SyncVectorEnv`` and ``AsyncVectorEnv``; MiniGrid-DoorKey-8x8-v0, 8 envs, with three
scalar infos every step (:class:`StepInfos`; Gymnasium's ``AsyncVectorEnv`` with
``shared_memory=False``, which its error asks for); ringenv's built-in Rust CartPole-v1, 16 envs,
against Gymnasium's own vectorised CartPole.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import gymnasium as gym

import ringenv
from ringenv.cli._common import machine_info
from ringenv.cli._measure import measure

MINIGRID_ID = "MiniGrid-DoorKey-8x8-v0"


class StepInfos(gym.Wrapper):
    """Adds three scalar infos to every ``step`` and ``reset`` of a MiniGrid env: ``step_count``
    (int), ``agent_dir`` (int, 0-3) and ``carrying_key`` (bool)."""

    def _infos(self, info: Dict[str, Any]) -> Dict[str, Any]:
        env = self.env.unwrapped
        carrying = getattr(env, "carrying", None)
        return {**info, "step_count": int(env.step_count), "agent_dir": int(env.agent_dir),
                "carrying_key": bool(carrying is not None and carrying.type == "key")}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, self._infos(info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._infos(info)


def make_python_cartpole():
    return gym.make("CartPole-v1")


def make_minigrid():
    import minigrid  # noqa: F401  (registers the MiniGrid ids)

    return StepInfos(gym.make(MINIGRID_ID))


def groups(num_envs: int, minigrid_envs: int) -> List[Dict[str, Any]]:
    """The demo's groups: each an env, its number of envs, and its rows (runtime, whether it is
    ringenv, a factory of the vector env)."""
    cartpole = [make_python_cartpole] * num_envs
    minigrid_fns = [make_minigrid] * minigrid_envs
    return [
        {"env": "CartPole-v1 (Python, gymnasium.make)", "num_envs": num_envs, "rows": [
            ("gymnasium SyncVectorEnv", False, lambda: gym.vector.SyncVectorEnv(cartpole)),
            ("gymnasium AsyncVectorEnv", False, lambda: gym.vector.AsyncVectorEnv(cartpole)),
            ("ringenv.AsyncVectorEnv", True, lambda: ringenv.AsyncVectorEnv(cartpole)),
        ]},
        {"env": f"{MINIGRID_ID} (Dict obs, 3 infos every step)", "num_envs": minigrid_envs, "rows": [
            ("gymnasium SyncVectorEnv", False, lambda: gym.vector.SyncVectorEnv(minigrid_fns)),
            # Gymnasium's default (shared_memory=True) cannot hold MiniGrid's Text mission and says to
            # pass shared_memory=False, as a user would
            ("gymnasium AsyncVectorEnv (shared_memory=False)", False,
             lambda: gym.vector.AsyncVectorEnv(minigrid_fns, shared_memory=False)),
            ("ringenv.AsyncVectorEnv", True, lambda: ringenv.AsyncVectorEnv(minigrid_fns)),
        ]},
        {"env": "CartPole-v1 (ringenv: built-in Rust; peer: Gymnasium's vectorised NumPy)", "num_envs": num_envs,
         "rows": [
            ("gymnasium make_vec (vector_entry_point)", False,
             lambda: gym.make_vec("CartPole-v1", num_envs, vectorization_mode="vector_entry_point")),
            ("ringenv.make_vec", True, lambda: ringenv.make_vec("CartPole-v1", num_envs)),
        ]},
    ]


def _workers(envs) -> Optional[str]:
    """Worker processes of a vector env, ``+inline`` when the main process steps a share too
    (``None``: every env steps in the main process)."""
    if hasattr(envs, "num_workers"):
        return f"{int(envs.num_workers)}" + ("+inline" if getattr(envs, "inline", False) else "")
    procs = getattr(envs, "processes", None)
    return str(len(procs)) if procs is not None else None


def measure_groups(seconds: float, num_envs: int = 16, minigrid_envs: int = 8,
                   on_row: Callable[[Dict[str, Any], Dict[str, Any]], None] = lambda group, row: None,
                   on_start: Callable[[Dict[str, Any], str], None] = lambda group, runtime: None
                   ) -> Iterator[Dict[str, Any]]:
    """Measures every row of every group, yielding each group (``env``, ``num_envs``, ``rows``)
    once measured; each row holds its figures or ``error``, ringenv rows ``vs_best_peer`` too."""
    for group in groups(num_envs, minigrid_envs):
        n = group["num_envs"]
        rows = []
        for runtime, is_ringenv, make in group["rows"]:
            made: List[Any] = []

            def build(make=make, made=made):
                made.append(make())
                return made[-1]

            on_start(group, runtime)
            row: Dict[str, Any] = {"runtime": runtime, "ringenv": is_ringenv}
            try:
                row.update(measure(build, num_envs=n, seconds=seconds, seed=0).figures())
                row["workers"] = _workers(made[0])
            except Exception as e:  # a runtime that fails is reported; the others still run
                row["error"] = f"{type(e).__name__}: {e}"[:200]
            rows.append(row)
            on_row(group, row)
        peers = [r for r in rows if not r["ringenv"] and "steps_per_s" in r]
        best = max(peers, key=lambda r: r["steps_per_s"], default=None)
        for r in rows:
            if r["ringenv"] and "steps_per_s" in r and best is not None:
                r["best_peer"] = best["runtime"]
                r["vs_best_peer"] = r["steps_per_s"] / best["steps_per_s"]
        yield {"env": group["env"], "num_envs": n, "rows": rows}


def compared_rows(group: Dict[str, Any]) -> Iterator[Tuple[Dict[str, Any], str]]:
    """Each row of ``group`` with how it compares: a ringenv row's ratio to the best peer
    (``"1.90x"``, ``"-"`` without one), ``"best peer"`` or ``"peer"`` for a peer; ``""`` for a row
    that failed (it has ``"error"``)."""
    best = next((r.get("best_peer") for r in group["rows"] if r.get("best_peer")), None)
    for row in group["rows"]:
        if "error" in row:
            yield row, ""
        elif row["ringenv"]:
            yield row, f"{row['vs_best_peer']:.2f}x" if "vs_best_peer" in row else "-"
        else:
            yield row, "best peer" if row["runtime"] == best else "peer"


def table_lines(group: Dict[str, Any]) -> List[str]:
    """One group as text: a title line, a header, a line per row."""
    lines = [f"{group['env']}, {group['num_envs']} envs",
             f"  {'runtime':<46}{'workers':>10}{'steps/s':>13}{'µs/step':>10}{'tree CPU':>10}{'vs best peer':>15}"]
    for row, compared in compared_rows(group):
        if "error" in row:
            lines.append(f"  {row['runtime']:<46}{'-':>10}  error: {row['error']}")
            continue
        w = "in-proc" if row["workers"] is None else str(row["workers"])
        ratio = "" if compared == "peer" else f"({compared})" if compared == "best peer" else compared
        lines.append(f"  {row['runtime']:<46}{w:>10}{row['steps_per_s']:>13,.0f}{row['us_per_env_step']:>10.2f}"
                     f"{row['cpu']['tree_cores']:>10.2f}{ratio:>15}")
    return lines


MARKERS = ("<!-- demo-table:start -->", "<!-- demo-table:end -->")


def markdown_table(info: Dict[str, Any], seconds: float, result: List[Dict[str, Any]]) -> List[str]:
    """The groups of one run as one Markdown table, after a line naming the machine and the date."""
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    lines = [f"`scripts/demo.py --seconds {seconds:g}` on {when}: {info['cores']} cores usable "
             f"({info.get('cpu_model') or 'CPU model unknown'}), {info['platform']}, Python {info['python']}, "
             f"ringenv {info['ringenv']}, gymnasium {info['gymnasium']}, numpy {info['numpy']}.", "",
             "| env | envs | runtime | workers | steps/s | µs/step | tree CPU | vs best peer |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    return lines + markdown_rows(result)


def markdown_rows(result: List[Dict[str, Any]]) -> List[str]:
    """The Markdown table rows of the groups of one run."""
    lines = []
    for group in result:
        for row, compared in compared_rows(group):
            if "error" in row:
                lines.append(f"| {group['env']} | {group['num_envs']} | {row['runtime']} | - | error: "
                             f"{row['error']} | - | - | - |")
                continue
            workers = "in-process" if row["workers"] is None else row["workers"]
            vs = f"**{compared}**" if row["ringenv"] and compared != "-" else compared
            lines.append(f"| {group['env']} | {group['num_envs']} | {row['runtime']} | {workers} | "
                         f"{row['steps_per_s']:,.0f} | {row['us_per_env_step']:.2f} | {row['cpu']['tree_cores']:.2f} | "
                         f"{vs} |")
    return lines


def write_markdown(path: str, lines: List[str]) -> None:
    """Replaces what lies between the two :data:`MARKERS` lines of the file at ``path`` with
    ``lines``; raises ``ValueError`` when the file lacks either marker."""
    with open(path) as f:
        text = f.read()
    start, end = text.find(MARKERS[0]), text.find(MARKERS[1])
    if start < 0 or end < start:
        raise ValueError(f"{path} has no {MARKERS[0]} ... {MARKERS[1]} lines to write the table between")
    start += len(MARKERS[0])
    with open(path, "w") as f:
        f.write(text[:start] + "\n" + "\n".join(lines) + "\n" + text[end:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="seconds per measurement, after the warm-up (default 2)")
    parser.add_argument("--json", default=None, help="also write every figure to this JSON file")
    parser.add_argument("--markdown", default=None, metavar="PATH",
                        help=f"also write the table as Markdown between the lines {MARKERS[0]} and {MARKERS[1]} "
                             "of this file (README.md carries them)")
    args = parser.parse_args()
    if not args.seconds > 0:
        parser.error(f"argument --seconds: must be positive, got {args.seconds:g}")
    try:
        import minigrid  # noqa: F401
    except ImportError:
        parser.error("the minigrid package is missing: pip install 'ringenv[demo]' (scripts/demo.sh installs it)")
    if args.markdown:
        try:
            write_markdown(args.markdown, [])  # fails now, not after the measurements
        except (OSError, ValueError) as e:
            parser.error(f"argument --markdown: {e}")
    info = machine_info()
    print(f"ringenv demo. Machine: {info['cores']} cores usable ({info['cpu_count']} in all), "
          f"CPU {info.get('cpu_model') or 'model unknown'}, {info['platform']}")
    print(f"Versions: ringenv {info['ringenv']}, Python {info['python']}, gymnasium {info['gymnasium']}, "
          f"numpy {info['numpy']}")
    print(f"{args.seconds:g} s per row after a warm-up; default settings for every runtime; steps/s counts env "
          "steps; tree CPU = cores busy (main process + workers); workers: N+inline = N worker processes and the main process "
          "stepping a share\n", flush=True)

    total = sum(len(group["rows"]) for group in groups(16, 8))
    done = 0

    def on_start(group, runtime):
        print(f"  [{done + 1}/{total}] {group['env']}: {runtime} ... ", end="", file=sys.stderr, flush=True)

    def on_row(group, row):
        nonlocal done
        done += 1
        print(f"{row['steps_per_s']:,.0f} steps/s" if "steps_per_s" in row else row["error"], file=sys.stderr, flush=True)

    result = []
    for group in measure_groups(args.seconds, on_start=on_start, on_row=on_row):
        result.append(group)
        print("\n".join(table_lines(group)) + "\n", flush=True)
    print("Headline, ringenv against the best peer in the same run:")
    for group in result:
        for r in group["rows"]:
            if r["ringenv"]:
                ratio = f"{r['vs_best_peer']:.2f}x {r['best_peer']}" if "vs_best_peer" in r else "not measured"
                print(f"  {group['env']}: {ratio}")
    print("\nBelow 1.00x ringenv was slower than the best alternative on this machine; benches/RESULTS.md has the "
          "full grid (scripts/bench.sh).")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "seconds": args.seconds, "groups": result}, f, indent=1)
        print(f"wrote {args.json}")
    if args.markdown:
        write_markdown(args.markdown, markdown_table(info, args.seconds, result))
        print(f"wrote the table into {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
