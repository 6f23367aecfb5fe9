"""TorchRL's ``RayCollector`` with ``ringenv.torchrl.ParallelEnv`` as its env: Ray places one
collector per node, and each collector steps its envs in a local ringenv pool (worker processes
over shared memory) instead of TorchRL's own ``ParallelEnv``.

    python examples/ray_torchrl_collector.py                 # a local Ray cluster
    RAY_ADDRESS=auto python examples/ray_torchrl_collector.py  # an existing cluster

Needs ``pip install ringenv[ray,torch]``.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import ray
from torchrl.collectors.distributed import RayCollector

import ringenv.torchrl


def make_env(num_envs: int = 4) -> ringenv.torchrl.ParallelEnv:
    """One collector's env: ``num_envs`` gymnasium CartPoles in a ringenv pool of 1 process (give
    each collector its node's cores with ``num_processes``)."""
    return ringenv.torchrl.ParallelEnv(num_envs, functools.partial(gym.make, "CartPole-v1"), num_processes=1)


def main(num_collectors: int = 2, frames_per_batch: int = 64, total_frames: int = 256) -> int:
    if not ray.is_initialized():
        ray.init(num_cpus=num_collectors, include_dashboard=False, log_to_driver=False)
    collector = RayCollector(
        [make_env] * num_collectors,  # one factory per collector (a remote actor each)
        policy=None,  # random actions from the env's action spec
        frames_per_batch=frames_per_batch,
        total_frames=total_frames,
        num_collectors=num_collectors,
        remote_configs={"num_cpus": 1},
        sync=False,
    )
    frames = 0
    try:
        for batch in collector:
            frames += batch.numel()
            print(f"batch {tuple(batch.batch_size)}: {frames} frames, "
                  f"mean reward {batch['next', 'reward'].float().mean().item():.2f}")
    finally:
        collector.shutdown()
    return frames


if __name__ == "__main__":
    main()
