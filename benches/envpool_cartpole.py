"""ringenv's Rust CartPole-v1 against EnvPool's C++ CartPole-v1, in one run.

Random seeded actions, episodes ending and resetting; EnvPool on ``T`` threads of this process
(:class:`EnvPoolVector`), ringenv on ``W`` worker processes (``make_vec``,
``copy=False, check_actions=False``), each stepped with ``step`` and with ``async_reset`` then
``recv``/``send`` batches of ``N/2``. Each row: steps/s, tree cores and its ratio to EnvPool's row
of the same shape; :func:`evaluate_targets` gives the target's verdict. ``benches/run_all.py`` runs it.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import results_sections

from python_envs import figures, finish, usable_cores, versions
from ringenv.cli._measure import measure

ENV_ID = "CartPole-v1"


class EnvPoolVector:
    """An EnvPool env behind the calls the measurement loop makes (``reset``, ``step``,
    ``async_reset``, ``recv``, ``send``, ``close``, ``single_action_space``); int32 actions for
    Discrete spaces; seeded at ``make`` (``reset``'s seed is ignored)."""

    def __init__(self, env_id: str, num_envs: int, threads: int, seed: int, batch_size: Optional[int] = None):
        import envpool

        self.env = envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, batch_size=batch_size or num_envs,
                                num_threads=threads, seed=seed)
        self.single_action_space = self.env.action_space
        self.step, self.recv, self.send = self.env.step, self.env.recv, self.env.send

    def reset(self, seed=None):
        return self.env.reset()

    def async_reset(self, seed=None):
        self.env.async_reset()

    def close(self):
        getattr(self.env, "close", lambda: None)()


def configurations(num_envs: List[int], workers: List[int]) -> List[Dict[str, Any]]:
    """Every row: for each ``num_envs``, EnvPool's (sync, then async batches of half) for each
    thread count, then ringenv's the same way for each worker count."""
    rows = []
    for n in num_envs:
        for runtime in ("EnvPool", "ringenv make_vec"):
            for w in workers:
                rows.append({"runtime": runtime, "num_envs": n, "workers": w, "mode": "step", "batch_size": n})
                if n % 2 == 0 and (runtime == "EnvPool" or (n % w == 0 and w % 2 == 0)):
                    rows.append({"runtime": runtime, "num_envs": n, "workers": w, "mode": "async",
                                 "batch_size": n // 2})
    return rows


def run_row(row: Dict[str, Any], seconds: float) -> Dict[str, Any]:
    """Measures one row with the one measurement loop (see ``python_envs.figures``); EnvPool's envs
    are seeded at ``make``."""
    n, b, w = row["num_envs"], row["batch_size"], row["workers"]
    envpool_row = row["runtime"] == "EnvPool"
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 2, b, dtype=np.int32 if envpool_row else np.int64) for _ in range(256)]

    def make():
        if envpool_row:
            return EnvPoolVector(ENV_ID, n, w, 0, batch_size=b)
        import ringenv

        return ringenv.make_vec(ENV_ID, num_envs=n, vector_kwargs=dict(num_workers=w, copy=False,
                                                                       check_actions=False, batch_size=b))

    m = measure(make, num_envs=n, seconds=seconds, seed=0, batch_size=b, actions=actions,
                warmup_s=min(1.0, 0.2 * seconds))
    return figures(m)


def label(row: Dict[str, Any]) -> str:
    """A row's configuration in words, e.g. ``EnvPool, 32 envs, 2 threads, async batch 16``."""
    unit = ("thread" if row["runtime"] == "EnvPool" else "worker") + ("s" if row["workers"] != 1 else "")
    mode = "step" if row["mode"] == "step" else f"async batch {row['batch_size']}"
    return f"{row['runtime']}, {row['num_envs']} envs, {row['workers']} {unit}, {mode}"


def add_peer_ratios(rows: List[Dict[str, Any]]) -> None:
    """Sets ``ratio_to_envpool`` of each measured ringenv row: its steps/s over EnvPool's row of
    the same ``num_envs``, mode and threads = workers, where that row ran."""
    peers = {(r["num_envs"], r["mode"], r["workers"]): r for r in rows
             if r["runtime"] == "EnvPool" and "steps_per_s" in r}
    for r in rows:
        peer = peers.get((r["num_envs"], r["mode"], r["workers"]))
        if r["runtime"] != "EnvPool" and "steps_per_s" in r and peer is not None:
            r["ratio_to_envpool"] = r["steps_per_s"] / peer["steps_per_s"]


def evaluate_targets(report: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The speed target of this benchmark as ``[{"target", "measured", "met"}]`` (``met`` is
    ``None`` when a side has no measured row)."""
    t = "ringenv's Rust CartPole >= EnvPool's CartPole (best row of each, same run)"
    ok = [r for r in report["rows"] if "steps_per_s" in r]
    ours = [r for r in ok if r["runtime"] != "EnvPool"]
    theirs = [r for r in ok if r["runtime"] == "EnvPool"]
    if not ours or not theirs:
        why = "no ringenv row ran" if not ours else "no EnvPool row ran"
        return [{"target": t, "measured": f"not measured: {why}", "met": None}]
    a, b = max(ours, key=lambda r: r["steps_per_s"]), max(theirs, key=lambda r: r["steps_per_s"])
    measured = (f"{a['steps_per_s']:,.0f} ({label(a)}) vs {b['steps_per_s']:,.0f} ({label(b)}): "
                f"{a['steps_per_s'] / b['steps_per_s']:.2f}x")
    return [{"target": t, "measured": measured, "met": a["steps_per_s"] >= b["steps_per_s"]}]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement (default 3)")
    parser.add_argument("--num-envs", type=results_sections.numbers(int, 1), default=[16, 32], help="comma-separated (default 16,32)")
    parser.add_argument("--workers", type=results_sections.numbers(int, 1), default=[1, 2],
                        help="EnvPool threads and ringenv workers, comma-separated (default 1,2)")
    parser.add_argument("--json", default=None, help="write every figure to this JSON file")
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error(f"argument --seconds: must be positive, got {args.seconds:g}")
    if max(args.workers) > min(args.num_envs):
        parser.error(f"argument --workers: {max(args.workers)} workers for {min(args.num_envs)} envs; each worker "
                     "needs at least one env")
    if args.json and not Path(args.json).resolve().parent.is_dir():
        parser.error(f"argument --json: the folder of {args.json!r} does not exist")
    try:
        import envpool
    except ImportError:
        parser.error("EnvPool is not installed: install ringenv's bench extra (scripts/bench.sh does)")

    from rich import box
    from rich.console import Console
    from rich.table import Table

    # EnvPool builds float64 bounds for its float32 Box spaces; Gymnasium warns on every make.
    warnings.filterwarnings("ignore", message=r".*precision lowered by casting to float32")

    console = (Console(highlight=False, markup=False) if sys.stdout.isatty()
               else Console(width=160, no_color=True, highlight=False, markup=False))
    report: Dict[str, Any] = {"cores": usable_cores(), "seconds": args.seconds, "rows": [],
                              "versions": {**versions(), "envpool": envpool.__version__}}
    console.print(f"{ENV_ID}: EnvPool vs ringenv, {args.seconds:g} s per row, {report['cores']} cores; "
                  + ", ".join(f"{k} {v}" for k, v in report["versions"].items()))
    with console.status("measuring") as status:
        for row in configurations(args.num_envs, args.workers):
            status.update(f"measuring {label(row)}")
            try:
                row.update(run_row(row, args.seconds))
            except Exception as e:  # a row that cannot run is reported, the others still run
                row["status"] = f"error: {type(e).__name__}: {e}"
            report["rows"].append(row)
            if not console.is_terminal:
                figure = f"{row['steps_per_s']:,.0f} steps/s" if "steps_per_s" in row else row["status"]
                print(f"  {label(row)}: {figure}", file=sys.stderr, flush=True)
    add_peer_ratios(report["rows"])
    t = Table(box=box.SIMPLE_HEAD)
    for name in ("runtime", "envs", "threads/workers", "mode", "steps/s", "tree cores", "vs EnvPool"):
        t.add_column(name, justify="left" if name in ("runtime", "mode") else "right", no_wrap=True)
    for r in report["rows"]:
        mode = "step" if r["mode"] == "step" else f"async {r['batch_size']}"
        if "steps_per_s" not in r:
            t.add_row(r["runtime"], str(r["num_envs"]), str(r["workers"]), mode, r["status"], "", "")
            continue
        ratio = f"{r['ratio_to_envpool']:.2f}x" if "ratio_to_envpool" in r else "-"
        t.add_row(r["runtime"], str(r["num_envs"]), str(r["workers"]), mode, f"{r['steps_per_s']:,.0f}",
                  f"{r['tree_cores']:.2f}", ratio)
    console.print(t)
    finish(console, report, evaluate_targets(report), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
