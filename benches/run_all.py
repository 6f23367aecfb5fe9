"""Regenerates benches/RESULTS.md: every table, from measurements taken in one run on this machine.

Runs the criterion ring round trip (``benches/ring_roundtrip.rs``), the main job's table
(``scripts/demo.py``'s groups, quiet and beside a busy neighbour),
``benches/python_envs.py``, ``benches/envpool_cartpole.py`` and the examples
(``examples/sb3_ppo_cartpole.py``, ``examples/torchrl_collector.py`` at two env costs); the file
opens with the speed targets' verdicts. Then each script of :data:`SECTION_SCRIPTS` replaces its
own section (``benches/results_sections.py``).

Run it through scripts/bench.sh, which installs the ``bench`` extra first. ``--only-examples
--output /tmp/x.md --ppo-timesteps 2048 --collector-frames-per-batch 200 --collector-total-frames
800`` tries the examples' section in a minute. On 16 cores with an NVIDIA GPU:
``scripts/bench.sh --max-workers 16 --device cuda``.
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
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "benches"))

#: The scripts that each write their own section of the file, run after its tables, in order.
SECTION_SCRIPTS = ["grid.py", "ray_scaling.py", "wakeup_policy.py", "idle_cpu.py", "startup.py", "info_kinds.py"]


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


def run_bench_script(name: str, *args: str) -> dict:
    """Runs ``benches/<name>`` with ``--json`` (its output to stderr) and returns its report."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.json"
        subprocess.run([sys.executable, str(ROOT / "benches" / name), *args, "--json", str(path)], check=True,
                       cwd=ROOT, stdout=sys.stderr)
        return json.loads(path.read_text())


VERDICT = {True: "met", False: "**NOT met**", None: "not measured here"}

# The PPO example must reach CartPole-v1's solved return (gym.spec("CartPole-v1").reward_threshold).
SOLVED_RETURN = 475.0
# The collector example's two settings: (µs of busy-wait per env step, default total frames).
COLLECTOR_SETTINGS = ((0.0, 16_000), (2000.0, 8_000))


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


def run_examples(ppo_timesteps: int, frames_per_batch: int, total_frames: Optional[int]) -> dict:
    """The examples: the PPO run and the collector at each of :data:`COLLECTOR_SETTINGS`."""
    print(f"== examples/sb3_ppo_cartpole.py, {ppo_timesteps} timesteps", file=sys.stderr)
    ppo = run_example("sb3_ppo_cartpole.py", "--timesteps", str(ppo_timesteps), check=False)
    collector = []
    for cost_us, default_frames in COLLECTOR_SETTINGS:
        frames = total_frames or default_frames
        print(f"== examples/torchrl_collector.py, {cost_us:g} µs per step, {frames} frames", file=sys.stderr)
        collector.append(run_example("torchrl_collector.py", "--env-cost-us", f"{cost_us:g}",
                                     "--frames-per-batch", str(frames_per_batch), "--total-frames", str(frames)))
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


def targets_section(python_envs: dict, envpool_cartpole: dict, machine_line: str) -> list:
    """The speed targets with the two bench scripts' verdicts."""
    versions = {**python_envs["versions"], **envpool_cartpole["versions"]}
    lines = [
        "## Speed targets",
        "",
        "Each verdict is computed from this run's figures (`evaluate_targets` in `benches/python_envs.py`",
        "and `benches/envpool_cartpole.py`); the tables below hold every row. The ceiling is the",
        "machine's cores times a plain single-env loop's steps/s, measured in the same run.",
        f"Peers: Gymnasium {versions['gymnasium']} (AsyncVectorEnv, SyncVectorEnv), EnvPool {versions['envpool']}; "
        f"CPU times by psutil {versions['psutil']}. Machine: {machine_line}.",
        "",
        "| target | measured | verdict |",
        "|---|---|---|",
    ]
    for t in python_envs["targets"] + envpool_cartpole["targets"]:
        lines.append(f"| {t['target']} | {t['measured']} | {VERDICT[t['met']]} |")
    return lines + [""]


def python_envs_section(report: dict) -> list:
    """The tables of benches/python_envs.py, one per env cost."""
    n, cores = report["num_envs"], report["cores"]
    lines = [
        f"## Python envs through ringenv and Gymnasium (`benches/python_envs.py`), {report['seconds']:g} s per row",
        "",
        f"{n} envs of a Python env with a `(4,)` float32 observation and `Discrete(2)` actions: the null env",
        "returns a preallocated observation; the busy env busy-waits its cost on `time.perf_counter` (CPU",
        "work, which a `time.sleep` is not). The single-env loop (`env.step` in one process, measured",
        f"before and after each cost's rows, the faster kept) gives the ceiling ({cores} cores x its steps/s)",
        "and the env's own cost (steps x its time per step). *Tree CPU / env cost* is the CPU time (user +",
        "system) of this process and every worker during the timed window over that own cost (1.00: no",
        "CPU beyond the env's); *tree cores* is that CPU time per second of wall time. ringenv rows run",
        "with `copy=False, check_actions=False`; *async B* is `async_reset` then `recv`/`send` batches of",
        "B envs. Gymnasium's AsyncVectorEnv runs one process per env (`shared_memory=True, copy=False`).",
        "With more processes than cores a busy-wait env that is preempted still sees its clock run, so it",
        "does less work per step than the single loop: those rows can read above the ceiling and below",
        "1.00 CPU. The targets' verdicts therefore use only rows with no more workers than cores.",
        "",
    ]
    for cost in report["costs"]:
        name = "null env" if cost["cost_us"] == 0 else f"~{cost['cost_us']:g} µs per step"
        lines += [
            f"### {name}: single-env loop {cost['single_steps_per_s']:,.0f} steps/s "
            f"({1e6 / cost['single_steps_per_s']:.2f} µs per step), ceiling {cost['ceiling_steps_per_s']:,.0f}",
            "",
            f"Single-env loop before the rows {cost['single_steps_per_s_before']:,.0f} steps/s, after "
            f"{cost['single_steps_per_s_after']:,.0f}.",
            "",
            "| runtime | workers | mode | device | steps/s | x ceiling | tree CPU / env cost | tree cores | "
            "vs Gymnasium Async |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        base = next((r["steps_per_s"] for r in cost["rows"]
                     if r["runtime"] == "gymnasium AsyncVectorEnv" and "steps_per_s" in r), None)
        for r in cost["rows"]:
            workers = "in-process" if r["workers"] is None else r["workers"]
            mode = "step" if r["mode"] == "step" else f"async {r['batch_size']}"
            runtime = r["runtime"] + (" (peer)" if r["runtime"].startswith("gymnasium") else "")
            if "steps_per_s" not in r:
                lines.append(f"| {runtime} | {workers} | {mode} | {r['device']} | {r['status']} | - | - | - | - |")
                continue
            vs = f"{r['steps_per_s'] / base:.2f}x" if base else "-"
            lines.append(f"| {runtime} | {workers} | {mode} | {r['device']} | {r['steps_per_s']:,.0f} | "
                         f"{r['ceiling_ratio']:.3f} | {r['cpu_ratio']:.3f} | {r['tree_cores']:.2f} | {vs} |")
        lines.append("")
    return lines


def envpool_section(report: dict) -> list:
    """The table of benches/envpool_cartpole.py."""
    lines = [
        f"## CartPole-v1: ringenv's Rust env against EnvPool's C++ env (`benches/envpool_cartpole.py`), "
        f"{report['seconds']:g} s per row",
        "",
        f"EnvPool {report['versions']['envpool']} steps its envs on `num_threads` threads of the main process;",
        "ringenv on `num_workers` worker processes (`make_vec`, `copy=False, check_actions=False`). Random",
        "actions, episodes ending and resetting. *async B* is `async_reset` then `recv`/`send` batches of B",
        "envs (ringenv's batches are whole workers' blocks, so from 2 workers). *vs EnvPool* compares with",
        "EnvPool's row of the same envs, mode and threads = workers; tree cores is CPU time per wall second.",
        "",
        "| runtime | envs | threads / workers | mode | steps/s | µs per env step | tree cores | vs EnvPool |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        mode = "step" if r["mode"] == "step" else f"async {r['batch_size']}"
        runtime = r["runtime"] + (" (peer)" if r["runtime"] == "EnvPool" else "")
        if "steps_per_s" not in r:
            lines.append(f"| {runtime} | {r['num_envs']} | {r['workers']} | {mode} | {r['status']} | - | - | - |")
            continue
        vs = f"{r['ratio_to_envpool']:.2f}x" if "ratio_to_envpool" in r else "-"
        lines.append(f"| {runtime} | {r['num_envs']} | {r['workers']} | {mode} | {r['steps_per_s']:,.0f} | "
                     f"{1e6 / r['steps_per_s']:.3f} | {r['tree_cores']:.2f} | {vs} |")
    return lines + [""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per end-to-end measurement (default 5)")
    parser.add_argument("--criterion-seconds", type=float, default=10.0, help="criterion measurement time (default 10)")
    parser.add_argument("--output", default=str(ROOT / "benches" / "RESULTS.md"))
    parser.add_argument("--max-workers", type=int, default=4,
                        help="benches/python_envs.py's largest worker count (default 4; 16 on a 16-core machine)")
    parser.add_argument("--device", default=None,
                        help="also measure benches/python_envs.py's ringenv rows with this device (cuda)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--skip-examples", action="store_true", help="leave out the examples")
    which.add_argument("--only-examples", action="store_true",
                       help="run only the examples (the file then holds only their section)")
    parser.add_argument("--skip-sections", action="store_true",
                        help="leave out the scripts that write their own sections (" + ", ".join(SECTION_SCRIPTS) + ")")
    parser.add_argument("--ppo-timesteps", type=int, default=100_000,
                        help="timesteps of the PPO example (default 1e5, the zoo's; below that it is not expected "
                             "to solve CartPole)")
    parser.add_argument("--collector-frames-per-batch", type=int, default=800,
                        help="frames per batch of the collector example (default 800)")
    parser.add_argument("--collector-total-frames", type=int, default=None,
                        help="total frames of each collector run (default: "
                             + ", ".join(f"{f:,} at {c:g} µs per step" for c, f in COLLECTOR_SETTINGS) + ")")
    args = parser.parse_args()
    if args.ppo_timesteps < 1:
        parser.error(f"argument --ppo-timesteps: must be at least 1, got {args.ppo_timesteps}")
    if args.collector_frames_per_batch < 1:
        parser.error(f"argument --collector-frames-per-batch: must be at least 1, got "
                     f"{args.collector_frames_per_batch}")
    smallest = args.collector_total_frames or min(f for _, f in COLLECTOR_SETTINGS)
    if smallest < 2 * args.collector_frames_per_batch:
        parser.error(f"argument --collector-total-frames: must be at least twice --collector-frames-per-batch "
                     f"({args.collector_frames_per_batch}; the first batch is a warm-up), got {smallest}")
    if not Path(args.output).resolve().parent.is_dir():
        parser.error(f"argument --output: the folder of {args.output!r} does not exist")
    if not 1 <= args.max_workers <= 32:
        parser.error(f"argument --max-workers: must be from 1 to 32 (benches/python_envs.py steps 32 envs), got "
                     f"{args.max_workers}")
    python_envs_args = ["--seconds", str(args.seconds), "--max-workers", str(args.max_workers)]
    if args.device:
        python_envs_args += ["--device", args.device]
    import python_envs  # refuse a --device that cannot be used now, not after the other sections
    why = python_envs.check_device(args.device)
    if why:
        parser.error(f"argument --device {args.device}: {why}; run without --device (CPU only) or on a machine "
                     "with an NVIDIA GPU")

    if args.only_examples:
        only = run_examples(args.ppo_timesteps, args.collector_frames_per_batch, args.collector_total_frames)
        return write(args.output, header(machine()) + examples_section(only, machine()))

    print("== criterion: ring round trip", file=sys.stderr)
    ring = criterion(3.0, args.criterion_seconds)
    print("== main job table", file=sys.stderr)
    import demo
    from neighbour import busy_neighbour
    demo_groups = list(demo.measure_groups(args.seconds))
    print("== main job table, beside a busy neighbour", file=sys.stderr)
    with busy_neighbour():
        demo_groups_busy = list(demo.measure_groups(args.seconds))
    print("== benches/python_envs.py", file=sys.stderr)
    python_envs_report = run_bench_script("python_envs.py", *python_envs_args)
    print("== benches/envpool_cartpole.py", file=sys.stderr)
    envpool_report = run_bench_script("envpool_cartpole.py", "--seconds", str(args.seconds))
    examples: Optional[dict] = None if args.skip_examples else run_examples(
        args.ppo_timesteps, args.collector_frames_per_batch, args.collector_total_frames)

    machine_line = machine()
    lines = [
        *header(machine_line),
        *targets_section(python_envs_report, envpool_report, machine_line),
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
    lines += python_envs_section(python_envs_report)
    lines += envpool_section(envpool_report)
    if examples is not None:
        lines += examples_section(examples, machine_line)
    written = write(args.output, lines)
    if not args.skip_sections:
        for script in SECTION_SCRIPTS:
            print(f"== benches/{script}", file=sys.stderr)
            subprocess.run([sys.executable, str(ROOT / "benches" / script)], check=True, cwd=ROOT)
    return written


def header(machine_line: str) -> list:
    """The file's title and the machine every table was measured on."""
    return [
        "# Benchmark results",
        "",
        "Regenerated by `scripts/bench.sh` (this file is its output; edit `benches/run_all.py` and",
        "the scripts it runs, not this file). The sections written by their own scripts (the grid, Ray,",
        "the wake-up policy, idle CPU, start-up, infos) each name the machine and time of their run; every",
        "other table was measured in one run, peers included, on:",
        "",
        f"> {machine_line}; {datetime.date.today().isoformat()}.",
        "",
    ]


def write(output: str, lines: list) -> int:
    """Writes ``lines`` to ``output``, keeping the sections the file holds that a script owns."""
    import results_sections

    path = Path(output)
    old = path.read_text() if path.exists() else ""
    path.write_text(results_sections.keep(old, "\n".join(lines)))
    print(f"wrote {output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
