"""Comparisons of vector env outputs of any space (nested dicts and tuples, strings, graph
instances, object arrays of final observations), and the factories of the two vector envs the
equivalence tests run side by side: ringenv's (the one under test) and Gymnasium's
``SyncVectorEnv`` (the reference)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

import ringenv
from vec_asserts import assert_identical, assert_infos_equal, assert_step_identical, assert_tree_identical

# Worker processes of every ringenv vector env built by these tests (the suite runs on 2 cores).
NUM_WORKERS = 2

# The Async-only arguments, which SyncVectorEnv does not take.
_ASYNC_ONLY = ("shared_memory", "context", "daemon", "worker")


def make_ours(env_fns: Sequence[Callable[[], gym.Env]], **kwargs: Any):
    """The vector env under test: ``ringenv.AsyncVectorEnv(env_fns, **kwargs)`` on
    ``NUM_WORKERS`` workers (fewer when there are fewer envs)."""
    env_fns = list(env_fns)
    return ringenv.AsyncVectorEnv(env_fns, num_workers=min(NUM_WORKERS, len(env_fns)), **kwargs)


def make_ref(env_fns: Sequence[Callable[[], gym.Env]], **kwargs: Any):
    """The reference: ``gymnasium.vector.SyncVectorEnv(env_fns, **kwargs)``, the Async-only
    arguments (``shared_memory``, ...) dropped."""
    for name in _ASYNC_ONLY:
        kwargs.pop(name, None)
    return gym.vector.SyncVectorEnv(list(env_fns), **kwargs)


def assert_vec_reset_identical(actual, expected, what: str = "reset") -> None:
    """Two ``(obs, infos)`` tuples are identical (observations of any space)."""
    assert isinstance(actual, tuple) and len(actual) == len(expected) == 2
    assert_tree_identical(actual[0], expected[0], f"{what} obs")
    assert_infos_equal(actual[1], expected[1], f"{what} infos")


def assert_spaces_match(ours, ref) -> None:
    """The vector envs have the same number of envs and equal spaces, single and batched."""
    assert ours.num_envs == ref.num_envs
    assert ours.single_observation_space == ref.single_observation_space, (
        f"{ours.single_observation_space} != {ref.single_observation_space}")
    assert ours.observation_space == ref.observation_space, f"{ours.observation_space} != {ref.observation_space}"
    assert ours.single_action_space == ref.single_action_space, (
        f"{ours.single_action_space} != {ref.single_action_space}")
    assert ours.action_space == ref.action_space, f"{ours.action_space} != {ref.action_space}"


def run_lockstep(ours, ref, *, seed: int, steps: int,
                 autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
                 check_contained: bool = True) -> int:
    """Resets both vector envs with ``seed``, then steps them ``steps`` times with the same
    actions (samples of the reference's action space, seeded with ``seed``), checking that every
    output is identical and, with ``check_contained``, that observations lie in ``ours``'s
    observation space. With ``AutoresetMode.DISABLED``, the envs that ended are reset after each
    step with ``options={"reset_mask": ...}``. Returns the number of episodes that ended."""
    out = ours.reset(seed=seed)
    assert_vec_reset_identical(out, ref.reset(seed=seed), "reset")
    if check_contained:
        assert ours.observation_space.contains(out[0]), f"reset obs not in {ours.observation_space}: {out[0]!r}"
    ref.action_space.seed(seed)
    ends = 0
    for t in range(steps):
        actions = ref.action_space.sample()
        out = ours.step(actions)
        assert_step_identical(out, ref.step(actions), f"step {t}")
        if check_contained:
            assert ours.observation_space.contains(out[0]), f"step {t} obs not in {ours.observation_space}: {out[0]!r}"
        done = out[2] | out[3]
        ends += int(done.sum())
        if autoreset_mode == AutoresetMode.DISABLED and done.any():
            # Each call gets a dict of its own: Gymnasium pops "reset_mask" out of the options.
            reset_out = ours.reset(options={"reset_mask": done.copy()})
            assert_vec_reset_identical(reset_out, ref.reset(options={"reset_mask": done.copy()}),
                                       f"masked reset after step {t}")
            if check_contained:
                assert ours.observation_space.contains(reset_out[0])
    return ends
