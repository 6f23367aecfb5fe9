"""RLlib's PPO with its env runners stepping ringenv pools: each env runner (a Ray actor) builds
its vector env with ``gymnasium.make_vec(..., vectorization_mode="vector_entry_point")``, which for
an id registered by ringenv (here the built-in ``ringenv/CartPole-v1``, a Rust env) is a local
:class:`ringenv.AsyncVectorEnv` with its own worker processes.

    pip install "ringenv[ray]" "ray[rllib]"   # RLlib pins its own Gymnasium version
    python examples/ray_rllib_ppo.py

The env runner imports ringenv before it makes the env (``env_to_module_connector`` is not needed:
the id's ``ringenv:`` prefix makes Gymnasium import the ``ringenv`` module, which registers it).
"""

from __future__ import annotations

import ray
from ray.rllib.algorithms.ppo import PPOConfig

ENV = "ringenv:ringenv/CartPole-v1"  # "module:id": Gymnasium imports ringenv, which registers the id


def main(iterations: int = 2, num_env_runners: int = 2, envs_per_runner: int = 8) -> float:
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    config = (
        PPOConfig()
        .environment(ENV)
        .env_runners(
            num_env_runners=num_env_runners,
            num_envs_per_env_runner=envs_per_runner,
            gym_env_vectorize_mode="vector_entry_point",  # ringenv's vector env, not gymnasium's
            rollout_fragment_length=64,
        )
        .training(train_batch_size_per_learner=num_env_runners * envs_per_runner * 64, minibatch_size=128,
                  num_epochs=2)
    )
    algo = config.build_algo()
    try:
        result = {}
        for i in range(iterations):
            result = algo.train()
            ret = result["env_runners"]["episode_return_mean"]
            print(f"iteration {i}: mean episode return {ret:.1f}")
        return float(result["env_runners"]["episode_return_mean"])
    finally:
        algo.stop()


if __name__ == "__main__":
    main()
