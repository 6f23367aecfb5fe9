"""PPO on CartPole-v1 with Stable-Baselines3, its 8 envs stepped by ringenv.sb3.SubprocVecEnv.

The only ringenv line is the import of ``SubprocVecEnv``; the rest is plain SB3. The
hyperparameters are the RL Baselines3 Zoo's tuned ones for CartPole-v1 (DLR-RM/rl-baselines3-zoo,
hyperparams/ppo.yml: n_envs 8, n_timesteps 1e5, n_steps 32, batch_size 256, gae_lambda 0.8,
gamma 0.98, n_epochs 20, ent_coef 0.0, learning_rate lin_0.001, clip_range lin_0.2; the zoo's
``lin_x`` is ``progress_remaining * x``, which SB3's ``LinearSchedule(x, 0.0, 1.0)`` computes).

After training, the deterministic policy is evaluated over 20 episodes with SB3's
``evaluate_policy``; the script exits 1 if the mean return is below 475 (CartPole-v1's reward
threshold; the maximum is 500). ``--json PATH`` also writes the figures to a JSON file (an object:
``seed``, ``timesteps`` (asked for), ``env_steps`` (made: whole rollouts of 8 x 32), ``num_envs``,
``eval_episodes``, ``mean_return``, ``std_return``, ``reward_threshold``, ``solved`` (bool),
``train_s`` and ``wall_s`` (seconds), ``steps_per_s`` (env steps per second of training, policy
updates included), ``torch_threads`` and ``versions``), whether or not the policy solved the task;
benches/run_all.py renders it into benches/RESULTS.md.

    python examples/sb3_ppo_cartpole.py [--timesteps 100000] [--seed 0] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Tuple, cast

import gymnasium as gym
import stable_baselines3
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import VecMonitor

import ringenv
from ringenv.sb3 import SubprocVecEnv  # instead of: from stable_baselines3.common.vec_env import SubprocVecEnv

REWARD_THRESHOLD = 475.0  # gym.spec("CartPole-v1").reward_threshold
NUM_ENVS = 8  # the zoo's n_envs


def make_env() -> gym.Env:
    return gym.make("CartPole-v1")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timesteps", type=int, default=100_000, help="env steps of training (default: 1e5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the envs, the policy and PPO (default: 0)")
    parser.add_argument("--eval-episodes", type=int, default=20, help="episodes of the final evaluation")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.timesteps < 1:
        parser.error(f"argument --timesteps: must be at least 1, got {args.timesteps}")
    if args.eval_episodes < 1:
        parser.error(f"argument --eval-episodes: must be at least 1, got {args.eval_episodes}")
    if args.json and not Path(args.json).resolve().parent.is_dir():
        parser.error(f"argument --json: the folder of {args.json!r} does not exist")

    torch.set_num_threads(1)  # a small MLP on the CPU: more threads only contend with the workers
    venv = VecMonitor(SubprocVecEnv([make_env for _ in range(NUM_ENVS)]))
    eval_venv = VecMonitor(SubprocVecEnv([make_env for _ in range(4)]))
    try:
        model = PPO("MlpPolicy", venv, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                    ent_coef=0.0, learning_rate=LinearSchedule(1e-3, 0.0, 1.0),
                    clip_range=LinearSchedule(0.2, 0.0, 1.0), seed=args.seed, device="cpu")
        start = time.perf_counter()
        model.learn(total_timesteps=args.timesteps)
        train_s = time.perf_counter() - start
        eval_venv.seed(args.seed + 1000)
        # Two numbers (NumPy scalars) unless return_episode_rewards=True.
        mean_return, std_return = cast(Tuple[float, float], evaluate_policy(
            model, eval_venv, n_eval_episodes=args.eval_episodes, deterministic=True))
        wall_s = time.perf_counter() - start
    finally:
        venv.close()
        eval_venv.close()

    steps = model.num_timesteps
    print(f"PPO CartPole-v1, seed {args.seed}: {steps} env steps in {train_s:.1f} s of training "
          f"({steps / train_s:,.0f} env steps/s, policy updates included)")
    print(f"evaluation over {args.eval_episodes} episodes: mean return {mean_return:.1f} +/- {std_return:.1f}")
    print(f"wall time (training + evaluation): {wall_s:.1f} s")
    if args.json:
        report = {"seed": args.seed, "timesteps": args.timesteps, "env_steps": steps, "num_envs": NUM_ENVS,
                  "eval_episodes": args.eval_episodes, "mean_return": float(mean_return),
                  "std_return": float(std_return), "reward_threshold": REWARD_THRESHOLD,
                  "solved": bool(mean_return >= REWARD_THRESHOLD), "train_s": train_s, "wall_s": wall_s,
                  "steps_per_s": steps / train_s, "torch_threads": torch.get_num_threads(),
                  "versions": {"python": platform.python_version(), "ringenv": ringenv.__version__,
                               "stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__,
                               "gymnasium": gym.__version__}}
        Path(args.json).write_text(json.dumps(report, indent=1))
    if mean_return < REWARD_THRESHOLD:
        print(f"FAILED: mean return {mean_return:.1f} is below {REWARD_THRESHOLD}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
