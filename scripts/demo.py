"""ringenv's main job: step real environments through ringenv and through Gymnasium's own
vector envs on this machine, and print steps per second side by side.

Run through scripts/demo.sh (which sets everything up). Each measurement resets with seed 0,
warms up, then steps with random actions for --seconds seconds; a "step" is one env step, so a
vector step of 16 envs counts 16.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import gymnasium as gym
import numpy as np

import ringenv


def measure(make, seconds: float, num_envs: int, n_actions: int):
    envs = make()
    try:
        envs.reset(seed=0)
        rng = np.random.default_rng(0)
        actions = [rng.integers(0, n_actions, num_envs) for _ in range(256)]
        for a in actions[:32]:  # warm-up
            envs.step(a)
        steps, start = 0, time.perf_counter()
        while True:
            for a in actions:
                envs.step(a)
            steps += len(actions)
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return steps * num_envs / elapsed
    finally:
        envs.close()


def measure_rows(seconds: float, n: int):
    """Measures every row of the table; returns dicts with env, runtime, workers, steps_per_s.
    Gymnasium's AsyncVectorEnv comes first: it is the baseline of the ratios."""
    workers = min(n, os.cpu_count() or 1)
    python_cartpole = [lambda: gym.make("CartPole-v1") for _ in range(n)]
    rows = [
        ("CartPole-v1 (Python)", "gymnasium AsyncVectorEnv", n,
         lambda: gym.vector.AsyncVectorEnv(python_cartpole), 2),
        ("CartPole-v1 (Python)", "gymnasium SyncVectorEnv", 0,
         lambda: gym.vector.SyncVectorEnv(python_cartpole), 2),
        ("CartPole-v1 (Python)", "ringenv.AsyncVectorEnv", workers,
         lambda: ringenv.AsyncVectorEnv(python_cartpole, num_workers=workers), 2),
        ("CartPole-v1 (Rust)", "ringenv make_vec", workers,
         lambda: ringenv.make_vec("CartPole-v1", n, vector_kwargs={"num_workers": workers}), 2),
        ("BlocksWorld-v0 (Rust)", "ringenv make_vec", workers,
         lambda: ringenv.make_vec("BlocksWorld-v0", n, vector_kwargs={"num_workers": workers}), 20),
    ]
    for env, runtime, w, make, n_actions in rows:
        yield {"env": env, "runtime": runtime, "workers": w, "steps_per_s": measure(make, seconds, n, n_actions)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement (default 3)")
    parser.add_argument("--num-envs", type=int, default=16, help="envs per vector env (default 16)")
    args = parser.parse_args()
    n, cores = args.num_envs, os.cpu_count() or 1
    print(f"ringenv {ringenv.__version__} demo on {platform.machine()}, {cores} cores, Python "
          f"{platform.python_version()}, gymnasium {gym.__version__}; {n} envs, {args.seconds:g} s each\n")
    header = f"{'env':<23}{'runtime':<28}{'workers':>8}{'steps/s':>13}{'µs/step':>10}{'vs gym Async':>14}"
    print(header)
    print("-" * len(header))
    baseline = None  # gymnasium's AsyncVectorEnv, measured first
    for row in measure_rows(args.seconds, n):
        sps = row["steps_per_s"]
        if row["runtime"] == "gymnasium AsyncVectorEnv":
            baseline = sps
        ratio = f"{sps / baseline:.2f}x" if baseline else "-"
        w_text = str(row["workers"]) if row["workers"] else "in-proc"
        print(f"{row['env']:<23}{row['runtime']:<28}{w_text:>8}{sps:>13,.0f}{1e6 / sps:>10.2f}{ratio:>14}", flush=True)
    print("\nringenv.AsyncVectorEnv's ratio is measured against gymnasium's AsyncVectorEnv in the same run;"
          " the Rust rows step ringenv's built-in envs (no Python in the step loop).")


if __name__ == "__main__":
    main()
