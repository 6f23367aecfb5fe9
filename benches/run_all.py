"""Regenerates benches/RESULTS.md: every table, from measurements taken in one run on this machine.

Runs the criterion ring round trip (``benches/ring_roundtrip.rs``), the main job's table
(``scripts/demo.py``'s groups, quiet and beside a busy neighbour) and the examples
(``examples/sb3_ppo_cartpole.py``, ``examples/torchrl_collector.py`` at two env costs). Then each
script of :data:`SECTION_SCRIPTS` replaces its own section (``benches/results_sections.py``).

Run it through scripts/bench.sh, which installs the ``bench`` extra first.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "benches"))

#: The scripts that each write their own section of the file, run after its tables, in order.
SECTION_SCRIPTS = ["grid.py", "ray_scaling.py", "async_share.py", "wakeup_policy.py", "obs_copies.py", "text_obs.py",
                   "idle_cpu.py", "startup.py", "train_loop.py", "main_cost.py", "staging_cost.py"]


def sh(*cmd: str, **kw) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT, **kw).stdout


def criterion(warm_up: float, measure: float) -> dict:
    sh("cargo", "bench", "-p", "ringenv-runtime", "--bench", "ring_roundtrip", "--",
       "--warm-up-time", str(warm_up), "--measurement-time", str(measure))
    out = {}
    for name in ("ring_round_trip/spin", "ring_round_trip/futex", "socket_round_trip/peer"):
        path = ROOT / "target" / "criterion" / name.replace("/", "_") / "new" / "estimates.json"
        mean = json.loads(path.read_text())["mean"]
        out[name] = (mean["confidence_interval"]["lower_bound"], mean["point_estimate"],
                     mean["confidence_interval"]["upper_bound"])
    return out


def fmt_time(ns: float) -> str:
    return f"{ns / 1000:.1f} µs" if ns >= 1000 else f"{ns:.0f} ns"


def machine() -> str:
    from ringenv.cli._common import machine_info

    m = machine_info()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{m['machine']}, {m['cpu_count']} cores ({m['cpu_model'] or 'unknown CPU'}), {mem:.0f} GiB, "
            f"Linux {platform.release()}, {sh('rustc', '--version').strip()}, Python {m['python']}, "
            f"gymnasium {m['gymnasium']}, numpy {m['numpy']}")


# The PPO example must reach CartPole-v1's solved return (gym.spec("CartPole-v1").reward_threshold).
SOLVED_RETURN = 475.0
# The collector example's two settings: (µs of busy-wait per env step, total frames), and its batch.
COLLECTOR_SETTINGS = ((0.0, 16_000), (2000.0, 8_000))
FRAMES_PER_BATCH = 800


def run_example(name: str, *args: str, check: bool = True) -> dict:
    """Runs ``examples/<name>`` with ``--json`` and returns its figures; with ``check=False`` a
    non-zero exit that wrote figures is accepted (the PPO example's "not solved")."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.json"
        cmd = [sys.executable, str(ROOT / "examples" / name), *args, "--json", str(path)]
        done = subprocess.run(cmd, cwd=ROOT, stdout=sys.stderr)
        if done.returncode != 0 and (check or not path.exists()):
            raise subprocess.CalledProcessError(done.returncode, cmd)
        return json.loads(path.read_text())


def run_examples(ppo_timesteps: int) -> dict:
    """The examples: the PPO run and the collector at each of :data:`COLLECTOR_SETTINGS`."""
    print(f"== examples/sb3_ppo_cartpole.py, {ppo_timesteps} timesteps", file=sys.stderr)
    ppo = run_example("sb3_ppo_cartpole.py", "--timesteps", str(ppo_timesteps), check=False)
    collector = []
    for cost_us, frames in COLLECTOR_SETTINGS:
        print(f"== examples/torchrl_collector.py, {cost_us:g} µs per step, {frames} frames", file=sys.stderr)
        collector.append(run_example("torchrl_collector.py", "--env-cost-us", f"{cost_us:g}",
                                     "--frames-per-batch", str(FRAMES_PER_BATCH), "--total-frames", str(frames)))
    return {"ppo": ppo, "collector": collector}


def cost_label(cost_us: float) -> str:
    return "none added" if cost_us == 0 else f"{cost_us:g} µs"


def examples_section(report: dict, machine_line: str) -> list:
    """The examples: the PPO run with its solved verdict and the collector's rows."""
    ppo, collector = report["ppo"], report["collector"]
    solved = ppo["mean_return"] >= SOLVED_RETURN
    v = ppo["versions"]
    first = collector[0]
    cv = first["versions"]
    lines = [
        "## Examples",
        "",
        f"Both examples run as subprocesses of this run with `--json`. Machine: {machine_line}.",
        "",
        "### PPO on CartPole-v1 through `ringenv.sb3.SubprocVecEnv` (`examples/sb3_ppo_cartpole.py`)",
        "",
        f"Stable-Baselines3 {v['stable_baselines3']} PPO with the RL Baselines3 Zoo's tuned CartPole-v1 settings, "
        f"{ppo['num_envs']} envs,",
        f"policy on the CPU (torch {v['torch']}, {ppo['torch_threads']} thread). Steps/s counts env steps per second "
        "of training,",
        f"policy updates included. The return is the deterministic policy's over {ppo['eval_episodes']} episodes; "
        f"solved means a mean",
        f"return of at least {SOLVED_RETURN:g} (CartPole-v1's reward threshold; the maximum is 500).",
        "",
        "| seed | timesteps | env steps | training s | env steps/s | wall s (with evaluation) | mean return | "
        "verdict |",
        "|---|---|---|---|---|---|---|---|",
        f"| {ppo['seed']} | {ppo['timesteps']:,} | {ppo['env_steps']:,} | {ppo['train_s']:.1f} | "
        f"{ppo['steps_per_s']:,.0f} | {ppo['wall_s']:.1f} | {ppo['mean_return']:.1f} ± {ppo['std_return']:.1f} | "
        f"{'solved' if solved else '**NOT solved**'} |",
        "",
        "### A TorchRL collector on `torchrl.envs.ParallelEnv` and `ringenv.torchrl.ParallelEnv` "
        "(`examples/torchrl_collector.py`)",
        "",
        f"A ParallelEnv user's setting: {first['num_workers']} sub-envs of Gymnasium's {first['env_id']} "
        "(with a busy-wait added to each",
        "step, standing for an env's own work), a 2x64 MLP policy sampling the action, on the device below,",
        f"and a TorchRL collector of {first['frames_per_batch']} frames per batch (TorchRL {cv['torchrl']}, "
        f"tensordict {cv['tensordict']}, torch {cv['torch']}).",
        "TorchRL runs a process per sub-env; ringenv groups the sub-envs in one worker process per core.",
        "Start-up is the seconds to the first batch (processes started, first batch collected); steps/s",
        "counts the frames of the batches after it.",
        "",
        "| env cost per step | runtime | device | processes | start-up s | timed frames | steps/s | µs per step | "
        "vs TorchRL |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for half in collector:
        base = next((r["steps_per_s"] for r in half["runs"] if r["name"].startswith("torchrl")), None)
        cost = cost_label(half["env_cost_us"])
        for r in half["runs"]:
            peer = " (peer)" if r["name"].startswith("torchrl") else ""
            vs = f"{r['steps_per_s'] / base:.2f}x" if base else "-"
            lines.append(f"| {cost} | {r['name']}{peer} | {half['device']} | {r['processes']} | "
                         f"{r['startup_s']:.2f} | {r['frames']:,} | {r['steps_per_s']:,.0f} | "
                         f"{1e6 / r['steps_per_s']:.1f} | {vs} |")
    loads = ", ".join(f"{h['load_average']:.1f} ({cost_label(h['env_cost_us'])})" for h in collector)
    lines += ["", f"One-minute load average at the end of each collector run: {loads}.", ""]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per end-to-end measurement (default 5)")
    parser.add_argument("--criterion-seconds", type=float, default=10.0, help="criterion measurement time (default 10)")
    parser.add_argument("--output", default=str(ROOT / "benches" / "RESULTS.md"))
    parser.add_argument("--ppo-timesteps", type=int, default=100_000,
                        help="timesteps of the PPO example (default 1e5, the zoo's; below that it is not expected "
                             "to solve CartPole)")
    args = parser.parse_args()
    if not Path(args.output).resolve().parent.is_dir():
        parser.error(f"argument --output: the folder of {args.output!r} does not exist")

    print("== criterion: ring round trip", file=sys.stderr)
    ring = criterion(3.0, args.criterion_seconds)
    print("== main job table", file=sys.stderr)
    import demo
    from neighbour import busy_neighbour
    demo_groups = list(demo.measure_groups(args.seconds))
    print("== main job table, beside a busy neighbour", file=sys.stderr)
    with busy_neighbour():
        demo_groups_busy = list(demo.measure_groups(args.seconds))
    examples = run_examples(args.ppo_timesteps)

    machine_line = machine()
    lines = [
        *header(machine_line),
        "## Ring round trip between two processes (criterion)",
        "",
        "One 16-byte command pushed by the parent, popped by a child process, answered with a",
        "completion, popped by the parent (`benches/ring_roundtrip.rs`). The peer is the same round trip",
        "over a Unix socket between the same two processes: the blocking hand-off a pipe-per-env runtime",
        "such as Gymnasium's `AsyncVectorEnv` makes every step, before any pickling.",
        "",
        "| path | mean time per round trip [95% interval] |",
        "|---|---|",
    ]
    names = {"ring_round_trip/spin": "ring, spin path (both sides spin; no system call)",
             "ring_round_trip/futex": "ring, futex path (both sides asleep; two `FUTEX_WAKE`s of a sleeping process)",
             "socket_round_trip/peer": "peer: Unix socket write + blocking read"}
    for key, label in names.items():
        lo, mid, hi = ring[key]
        lines.append(f"| {label} | **{fmt_time(mid)}** [{fmt_time(lo)}, {fmt_time(hi)}] |")
    lines += [
        "",
        "The futex path is dominated by waking a sleeping process, which on a VM varies from run to run",
        "(a few µs when the sleeper's core is awake, tens of µs when it is idle). That cost is why a",
        "waiter spins first: a busy pipeline stays on the spin path and never makes a system call.",
        "",
        f"## End to end: the main job (`scripts/demo.sh`), {args.seconds:g} s per row",
        "",
        "Default settings for every runtime; random actions, `reset(seed=0)`, then steps after a warm-up;",
        "steps/s counts env steps. *vs best peer* is ringenv's steps/s over the best peer's in its group.",
        "",
        "| env | envs | runtime | workers | steps/s | µs per env step | tree CPU | vs best peer |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += demo.markdown_rows(demo_groups)
    lines += [
        "",
        "### The main job beside one busy-looping neighbour process",
        "",
        "The same groups again, measured while `python -c \"while True: pass\"` (`benches/neighbour.py`)",
        "keeps one of the machine's cores busy, as another user's job would; ringenv keeps its default",
        "layout, chosen for the machine's cores (docs/INLINE.md says why it matches rather than beats",
        "the in-process loop there).",
        "",
        "| env | envs | runtime | workers | steps/s | µs per env step | tree CPU | vs best peer |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += demo.markdown_rows(demo_groups_busy)
    lines.append("")
    lines += examples_section(examples, machine_line)
    write(args.output, lines)
    for script in SECTION_SCRIPTS:
        print(f"== benches/{script}", file=sys.stderr)
        subprocess.run([sys.executable, str(ROOT / "benches" / script), "--output", args.output], check=True,
                       cwd=ROOT)
    return 0


def header(machine_line: str) -> list:
    """The file's title and the machine every table was measured on."""
    return [
        "# Benchmark results",
        "",
        "Regenerated by `scripts/bench.sh` (this file is its output; edit `benches/run_all.py` and",
        "the scripts it runs, not this file). The sections written by their own scripts (each names its",
        "script) name the machine and time of their run; every",
        "other table was measured in one run, peers included, on:",
        "",
        f"> {machine_line}; {datetime.date.today().isoformat()}.",
        "",
    ]


def write(output: str, lines: list) -> None:
    """Writes ``lines`` to ``output``, keeping the sections the file holds that a script owns."""
    import results_sections

    path = Path(output)
    old = path.read_text() if path.exists() else ""
    path.write_text(results_sections.keep(old, "\n".join(lines)))
    print(f"wrote {output}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
