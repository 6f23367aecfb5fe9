"""RLlib's PPO with its env runners stepping ringenv pools: each env runner (a Ray actor) builds
its vector env with ``gymnasium.make_vec(..., vectorization_mode="vector_entry_point")``, which for
an id registered by ringenv (here the built-in ``ringenv/CartPole-v1``, a Rust env) is a local
:class:`ringenv.AsyncVectorEnv` with its own worker processes.

    pip install "ringenv[ray]" "ray[rllib]"   # RLlib pins its own Gymnasium version
    python examples/ray_rllib_ppo.py
    python examples/ray_rllib_ppo.py --smoke  # one tiny iteration (scripts/test.sh runs this)

The env runner imports ringenv before it makes the env (``env_to_module_connector`` is not needed:
the id's ``ringenv:`` prefix makes Gymnasium import the ``ringenv`` module, which registers it).
"""

from __future__ import annotations

import ray
from ray.rllib.algorithms.ppo import PPOConfig

ENV = "ringenv:ringenv/CartPole-v1"  # "module:id": Gymnasium imports ringenv, which registers the id


def main(iterations: int = 2, num_env_runners: int = 2, envs_per_runner: int = 8, fragment: int = 64,
         num_epochs: int = 2) -> float:
    """Trains PPO for ``iterations`` and returns the last mean episode return."""
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    config = (
        PPOConfig()
        .environment(ENV)
        .env_runners(
            num_env_runners=num_env_runners,
            num_envs_per_env_runner=envs_per_runner,
            gym_env_vectorize_mode="vector_entry_point",  # ringenv's vector env, not gymnasium's
            rollout_fragment_length=fragment,
        )
        .training(train_batch_size_per_learner=num_env_runners * envs_per_runner * fragment,
                  minibatch_size=min(128, num_env_runners * envs_per_runner * fragment), num_epochs=num_epochs)
    )
    algo = config.build_algo()
    try:
        if num_env_runners:  # each remote env runner's vector env is ringenv's pool
            kinds = algo.env_runner_group.foreach_env_runner(
                lambda runner: f"{type(runner.env.unwrapped).__module__}.{type(runner.env.unwrapped).__name__}",
                local_env_runner=False)
            assert set(kinds) == {"ringenv.vector.AsyncVectorEnv"}, f"the env runners built {kinds}, not ringenv's pool"
        result = {}
        for i in range(iterations):
            result = algo.train()
            ret = result["env_runners"]["episode_return_mean"]
            print(f"iteration {i}: mean episode return {ret:.1f}")
        return float(result["env_runners"]["episode_return_mean"])
    finally:
        algo.stop()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="one tiny iteration (1 env runner of 4 envs, 32 steps each), checked to have "
                             "stepped ringenv's vector env; for CI")
    args = parser.parse_args()
    if not args.smoke:
        main()
    else:
        # address="local": a new local Ray even where a killed run left its cluster file behind.
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            ret = main(iterations=1, num_env_runners=1, envs_per_runner=4, fragment=32, num_epochs=1)
        finally:
            ray.shutdown()
        assert ret == ret and ret > 0, f"no episode finished, or a NaN return: {ret}"  # CartPole pays 1 per step
        print(f"smoke: ok (mean episode return {ret:.1f})")
