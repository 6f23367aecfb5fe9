"""A TorchRL user's collection loop, run on ``torchrl.envs.ParallelEnv`` and then on
``ringenv.torchrl.ParallelEnv``, printing env steps per second side by side.

The setting (the one DESIGN.md starts from): ``--num-workers`` sub-envs (default 8) of a CPU
gymnasium env (CartPole-v1; ``--env-cost-us`` adds a busy-wait of that many microseconds to each
step, to stand for an env with real work), a small MLP policy (a TorchRL ``ProbabilisticActor``
sampling a one-hot action) on ``cuda`` if torch sees a GPU, else on the CPU, and a TorchRL
collector (``Collector``, formerly ``SyncDataCollector``) with ``--frames-per-batch`` and
``--total-frames``. Both envs get the policy's device, so batches reach the policy where it runs.

TorchRL's sub-envs are ``GymWrapper``s of the gymnasium env (what its users write); ringenv's are
the gymnasium env itself (a ``GymEnv`` / ``GymWrapper`` factory works too, but makes every worker
import torch). Each run is timed from its first batch (collector and workers started, warmed up)
to its last: ``steps/s`` counts the frames of the batches after the first.

``--json PATH`` also writes the figures to a JSON file: an object with ``env_id``,
``env_cost_us`` (µs), ``device`` (the policy's and both envs'), ``num_workers``,
``frames_per_batch``, ``total_frames``, ``cores``, ``load_average`` (1 minute, at the end),
``versions``, ``runs`` (one object per runtime run: ``name``, ``processes`` (worker processes),
``startup_s`` (seconds to the first batch), ``frames`` (timed frames), ``elapsed_s`` (their
seconds), ``steps_per_s``) and ``ratio`` (ringenv's steps/s over TorchRL's; null unless both
ran). benches/run_all.py renders it into benches/RESULTS.md.

    .venv/bin/python examples/torchrl_collector.py --env-cost-us 0
    .venv/bin/python examples/torchrl_collector.py --env-cost-us 2000 --total-frames 8000
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import time
import warnings
from pathlib import Path

import gymnasium as gym
import tensordict
import torch
import torchrl
from tensordict.nn import TensorDictModule
from torchrl.envs import GymWrapper
from torchrl.envs import ParallelEnv as TorchRLParallelEnv
from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor

try:  # torchrl >= 0.11
    from torchrl.collectors import Collector as SyncDataCollector
except ImportError:  # older torchrl
    from torchrl.collectors import SyncDataCollector  # type: ignore[no-redef]

import ringenv
from ringenv.torchrl import ParallelEnv as RingenvParallelEnv


class BusyWait(gym.Wrapper):
    """Adds ``cost_us`` microseconds of busy CPU work to every step (a spin on
    ``time.perf_counter_ns``, so the time is spent on a core, as a real env's would be)."""

    def __init__(self, env: gym.Env, cost_us: float):
        super().__init__(env)
        self.cost_ns = int(cost_us * 1000)

    def step(self, action):
        if self.cost_ns:
            deadline = time.perf_counter_ns() + self.cost_ns
            while time.perf_counter_ns() < deadline:
                pass
        return self.env.step(action)


def make_gym_env(env_id: str, cost_us: float) -> gym.Env:
    return BusyWait(gym.make(env_id), cost_us)


def make_torchrl_env(env_id: str, cost_us: float, device: str) -> GymWrapper:
    return GymWrapper(make_gym_env(env_id, cost_us), device=device)


def make_policy(device: str) -> ProbabilisticActor:
    """A 2x64 MLP from CartPole's 4 observations to the logits of its 2 actions."""
    net = MLP(in_features=4, out_features=2, num_cells=[64, 64], activation_class=torch.nn.Tanh)
    module = TensorDictModule(net, in_keys=["observation"], out_keys=["logits"])
    actor = ProbabilisticActor(module, in_keys=["logits"], out_keys=["action"], distribution_class=OneHotCategorical)
    return actor.to(device)


def run(name: str, make_env, args, device: str) -> dict:
    """Collects ``args.total_frames`` frames; returns the worker processes, the start-up seconds,
    the timed frames, their seconds and steps/s."""
    torch.manual_seed(0)
    started = time.perf_counter()
    env = make_env()
    env.set_seed(0)
    # TorchRL's ParallelEnv: a process per sub-env (and its attribute look-ups go to the sub-envs);
    # ringenv's: num_processes, each stepping a group of sub-envs.
    processes = env.num_processes if isinstance(env, RingenvParallelEnv) else env.num_workers
    collector = SyncDataCollector(env, make_policy(device), frames_per_batch=args.frames_per_batch,
                                  total_frames=args.total_frames)
    frames, first = 0, None
    for batch in collector:
        if first is None:
            first = time.perf_counter()  # warm: workers up, first batch through the policy
            startup = first - started
            continue
        frames += batch.numel()
    assert first is not None  # total_frames >= 2 * frames_per_batch: at least two batches
    elapsed = time.perf_counter() - first
    collector.shutdown()
    if not env.is_closed:
        env.close()
    return {"name": name, "processes": processes, "startup_s": startup, "frames": frames, "elapsed_s": elapsed,
            "steps_per_s": frames / elapsed}


def main() -> None:
    # TorchRL 0.14's collector warns that a future version will add an InitTracker for this policy;
    # the same for both runs, and not what is measured.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torchrl\.")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--env-id", default="CartPole-v1")
    parser.add_argument("--num-workers", type=int, default=8, help="sub-envs (TorchRL's num_workers)")
    parser.add_argument("--num-processes", type=int, default=None,
                        help="ringenv worker processes (default: the number of cores, at most --num-workers)")
    parser.add_argument("--env-cost-us", type=float, default=0.0, help="busy-wait added to each env step, in µs")
    parser.add_argument("--frames-per-batch", type=int, default=800)
    parser.add_argument("--total-frames", type=int, default=16_000)
    parser.add_argument("--only", choices=["torchrl", "ringenv"], default=None, help="run one of the two")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.num_workers < 1:
        parser.error(f"argument --num-workers: must be at least 1, got {args.num_workers}")
    if args.env_cost_us < 0:
        parser.error(f"argument --env-cost-us: must be non-negative, got {args.env_cost_us:g}")
    if args.frames_per_batch < 1:
        parser.error(f"argument --frames-per-batch: must be at least 1, got {args.frames_per_batch}")
    if args.total_frames < 2 * args.frames_per_batch:
        parser.error("--total-frames must be at least twice --frames-per-batch (the first batch is a warm-up)")
    if args.json and not Path(args.json).resolve().parent.is_dir():
        parser.error(f"argument --json: the folder of {args.json!r} does not exist")

    device = "cuda" if torch.cuda.is_available() else "cpu"
    make_gym = functools.partial(make_gym_env, args.env_id, args.env_cost_us)
    runs = []
    if args.only in (None, "torchrl"):
        make = functools.partial(TorchRLParallelEnv, args.num_workers,
                                 functools.partial(make_torchrl_env, args.env_id, args.env_cost_us, "cpu"),
                                 device=device)
        runs.append(run("torchrl.envs.ParallelEnv", make, args, device))
    if args.only in (None, "ringenv"):
        make = functools.partial(RingenvParallelEnv, args.num_workers, make_gym, device=device,
                                 num_processes=args.num_processes)
        runs.append(run("ringenv.torchrl.ParallelEnv", make, args, device))

    load = os.getloadavg()[0]
    print(f"{args.env_id} + {args.env_cost_us:g} µs/step busy-wait, {args.num_workers} workers, policy on {device}, "
          f"frames_per_batch {args.frames_per_batch}, total_frames {args.total_frames}; "
          f"{os.cpu_count()} cores, load average {load:.1f} at the end")
    print(f"{'runtime':<30}{'start-up s':>12}{'steps/s':>12}{'µs/step':>10}")
    for r in runs:
        print(f"{r['name']:<30}{r['startup_s']:>12.2f}{r['steps_per_s']:>12,.0f}{1e6 / r['steps_per_s']:>10.1f}")
    ratio = runs[1]["steps_per_s"] / runs[0]["steps_per_s"] if len(runs) == 2 else None
    if ratio is not None:
        print(f"ringenv / torchrl: {ratio:.2f}x")
    if args.json:
        report = {"env_id": args.env_id, "env_cost_us": args.env_cost_us, "device": device,
                  "num_workers": args.num_workers, "frames_per_batch": args.frames_per_batch,
                  "total_frames": args.total_frames, "cores": os.cpu_count(), "load_average": load,
                  "versions": {"python": platform.python_version(), "ringenv": ringenv.__version__,
                               "torch": torch.__version__, "torchrl": torchrl.__version__,
                               "tensordict": tensordict.__version__, "gymnasium": gym.__version__},
                  "runs": runs, "ratio": ratio}
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
