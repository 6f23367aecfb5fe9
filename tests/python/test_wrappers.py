"""Gymnasium's vector wrappers (gymnasium.wrappers.vector) on top of ringenv give exactly what
they give on top of gymnasium.vector.SyncVectorEnv."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import vector as vw

from helper_envs import SpaceEnv
from vec_asserts import assert_identical
from vec_compare import assert_vec_reset_identical, assert_step_identical, make_ours, make_ref

N = 4
STEPS = 300
SHM = pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "pickled"])
CARTPOLE = functools.partial(gym.make, "CartPole-v1")
PENDULUM = functools.partial(gym.make, "Pendulum-v1")


def _pair(closing, env_fn, wrap, shared_memory=True, mode=AutoresetMode.NEXT_STEP, n=N):
    ours = closing(make_ours([env_fn] * n, shared_memory=shared_memory, autoreset_mode=mode))
    ref = closing(make_ref([env_fn] * n, autoreset_mode=mode))
    return wrap(ours), wrap(ref)


def _without_episode_time(step_out):
    """The step output with the wall-clock episode times (``infos["episode"]["t"]``, which differ
    from run to run) checked for shape and sign, then zeroed."""
    infos = dict(step_out[4])
    if "episode" in infos:
        episode = dict(infos["episode"])
        t = episode["t"]
        assert t.shape == (N,) and (t >= 0).all()
        assert (t[~infos["_episode"]] == 0).all()
        episode["t"] = np.zeros_like(t)
        infos["episode"] = episode
    return (*step_out[:4], infos)


@SHM
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED],
                         ids=["next-step", "same-step", "disabled"])
def test_record_episode_statistics(closing, mode, shared_memory):
    ours, ref = _pair(closing, CARTPOLE, vw.RecordEpisodeStatistics, shared_memory, mode)
    assert_vec_reset_identical(ours.reset(seed=1), ref.reset(seed=1))
    rng = np.random.default_rng(1)
    episodes = 0
    for t in range(STEPS):
        actions = rng.integers(0, 2, size=N)
        out = _without_episode_time(ours.step(actions))
        assert_step_identical(out, _without_episode_time(ref.step(actions)), f"step {t}")
        done = out[2] | out[3]
        if done.any():
            episodes += int(done.sum())
            assert_identical(out[4]["_episode"], done)
            if mode == AutoresetMode.DISABLED:
                # Separate dicts: the vector env pops "reset_mask" out of the options, and the
                # wrapper looks for it after the reset.
                assert_vec_reset_identical(ours.reset(options={"reset_mask": done.copy()}),
                                           ref.reset(options={"reset_mask": done.copy()}), f"reset {t}")
    assert episodes > 20
    assert ours.episode_count == ref.episode_count == episodes
    assert list(ours.return_queue) == list(ref.return_queue)
    assert list(ours.length_queue) == list(ref.length_queue)


@SHM
def test_normalize_observation(closing, shared_memory):
    ours, ref = _pair(closing, PENDULUM, vw.NormalizeObservation, shared_memory)
    assert_vec_reset_identical(ours.reset(seed=2), ref.reset(seed=2))
    rng = np.random.default_rng(2)
    truncations = 0
    for t in range(STEPS):
        actions = rng.uniform(-2.0, 2.0, size=(N, 1)).astype(np.float32)
        out = ours.step(actions)
        assert_step_identical(out, ref.step(actions), f"step {t}")
        done = out[2] | out[3]
        truncations += int(done.sum())
    assert truncations == N  # Pendulum truncates at step 200
    assert_identical(ours.obs_rms.mean, ref.obs_rms.mean, "obs_rms.mean")
    assert_identical(ours.obs_rms.var, ref.obs_rms.var, "obs_rms.var")
    assert ours.obs_rms.count == ref.obs_rms.count


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED], ids=["same-step", "disabled"])
def test_normalize_observation_refuses_other_modes_as_on_sync(closing, mode):
    # NormalizeObservation reads metadata["autoreset_mode"] and takes NEXT_STEP only.
    ours = closing(make_ours([PENDULUM] * 2, autoreset_mode=mode))
    ref = closing(make_ref([PENDULUM] * 2, autoreset_mode=mode))
    with pytest.raises(ValueError):
        vw.NormalizeObservation(ref)
    with pytest.raises(ValueError):
        vw.NormalizeObservation(ours)


@SHM
def test_clip_action(closing, shared_memory):
    ours, ref = _pair(closing, PENDULUM, vw.ClipAction, shared_memory)
    assert_vec_reset_identical(ours.reset(seed=3), ref.reset(seed=3))
    rng = np.random.default_rng(3)
    for t in range(STEPS):
        actions = rng.uniform(-5.0, 5.0, size=(N, 1)).astype(np.float32)  # out of [-2, 2] often
        assert_step_identical(ours.step(actions), ref.step(actions), f"step {t}")


@SHM
def test_flatten_observation_and_normalize_reward_on_dict_observations(closing, shared_memory):
    space = Dict({"pos": Box(-1.0, 1.0, (2,), np.float32), "kind": Discrete(3), "bits": MultiBinary(2)})
    env_fn = functools.partial(SpaceEnv, space, Box(-1.0, 1.0, (2,), np.float32), 8)

    def wrap(envs):
        return vw.NormalizeReward(vw.FlattenObservation(envs), gamma=0.9)

    ours, ref = _pair(closing, env_fn, wrap, shared_memory)
    assert ours.single_observation_space == ref.single_observation_space
    assert ours.observation_space == ref.observation_space
    assert_vec_reset_identical(ours.reset(seed=4), ref.reset(seed=4))
    ref.action_space.seed(4)
    for t in range(STEPS):
        actions = ref.action_space.sample()
        out = ours.step(actions)
        assert_step_identical(out, ref.step(actions), f"step {t}")
        assert out[0].shape == (N, 2 + 3 + 2)


@SHM
def test_stack_of_wrappers(closing, shared_memory):
    def wrap(envs):
        envs = vw.NormalizeObservation(envs)
        envs = vw.ClipAction(envs)
        envs = vw.NormalizeReward(envs)
        envs = vw.TransformReward(envs, lambda r: 0.5 * r)
        return vw.RecordEpisodeStatistics(envs)

    ours, ref = _pair(closing, PENDULUM, wrap, shared_memory)
    assert_vec_reset_identical(ours.reset(seed=5), ref.reset(seed=5))
    rng = np.random.default_rng(5)
    for t in range(STEPS):
        actions = rng.uniform(-3.0, 3.0, size=(N, 1)).astype(np.float32)
        out = _without_episode_time(ours.step(actions))
        assert_step_identical(out, _without_episode_time(ref.step(actions)), f"step {t}")
    assert list(ours.return_queue) == list(ref.return_queue) and len(ours.return_queue) == N
