"""A third-party env with Dict observations: MiniGrid's "MiniGrid-Empty-5x5-v0" (an ``image``
Box of uint8, a ``direction`` Discrete, and a ``mission`` string in minigrid's MissionSpace, a
custom Space subclass). 16 envs, 1,000 steps of random actions, identical to SyncVectorEnv."""

from __future__ import annotations

import functools

import gymnasium as gym
import minigrid  # noqa: F401  registers the MiniGrid envs (a test dependency: never skipped)
import numpy as np
import pytest
from gymnasium.spaces import Box, Dict, Discrete

from vec_compare import (
    assert_spaces_match,
    assert_tree_identical,
    assert_vec_reset_identical,
    assert_step_identical,
    make_ours,
    make_ref,
)

ENV_ID = "MiniGrid-Empty-5x5-v0"
N = 16
STEPS = 1000


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "pickled"])
def test_minigrid_empty_matches_sync(closing, shared_memory):
    assert ENV_ID in gym.registry
    env_fn = functools.partial(gym.make, ENV_ID)
    ours = closing(make_ours([env_fn] * N, shared_memory=shared_memory))
    ref = closing(make_ref([env_fn] * N))
    assert_spaces_match(ours, ref)
    single = ours.single_observation_space
    assert isinstance(single, Dict) and list(single) == ["direction", "image", "mission"]
    assert isinstance(single["image"], Box) and single["image"].dtype == np.uint8
    assert isinstance(single["direction"], Discrete)

    obs, infos = out = ours.reset(seed=123)
    assert_vec_reset_identical(out, ref.reset(seed=123))
    assert obs["image"].shape == (N, 7, 7, 3) and obs["image"].dtype == np.uint8
    assert obs["direction"].shape == (N,)
    assert type(obs["mission"]) is tuple and obs["mission"] == ("get to the green goal square",) * N
    assert ours.observation_space.contains(obs)

    rng = np.random.default_rng(123)
    ends = successes = 0
    for t in range(STEPS):
        actions = rng.integers(0, 7, size=N)
        out = ours.step(actions)
        assert_step_identical(out, ref.step(actions), f"step {t}")
        ends += int(np.sum(out[2] | out[3]))
        successes += int(np.sum(out[2]))
    # 100-step time limit: every env's episodes ended (truncated, or reached the goal) several times.
    assert ends >= N * 5
    assert successes > 0

    # Same seed again: the same first observation.
    assert_tree_identical(ours.reset(seed=123)[0], obs, "second reset obs")


def test_make_vec_takes_gymnasiums_module_id_form(closing):
    # "minigrid:Id" as gymnasium.make_vec takes it: each worker imports minigrid (which registers
    # the id) through gymnasium.make; the results equal Gymnasium's own vector env.
    import ringenv

    ours = closing(ringenv.make_vec(f"minigrid:{ENV_ID}", 4, vector_kwargs={"inline": False}))
    ref = closing(gym.make_vec(f"minigrid:{ENV_ID}", 4, vectorization_mode="sync"))
    assert ours.spec.id == ref.spec.id == ENV_ID
    assert_vec_reset_identical(ours.reset(seed=4), ref.reset(seed=4))
    rng = np.random.default_rng(4)
    for t in range(50):
        actions = rng.integers(0, 7, size=4)
        assert_step_identical(ours.step(actions), ref.step(actions), f"step {t}")
    with pytest.raises(ModuleNotFoundError, match="no_such_env_package"):
        ringenv.make_vec("no_such_env_package:Env-v0", 2)
