"""A vector env that owns worker processes refuses copy.copy, copy.deepcopy and pickle with a
TypeError naming it, and stays usable: a copy would share its pool and close it when collected."""

from __future__ import annotations

import copy
import gc
import pickle

import gymnasium as gym
import numpy as np
import pytest

import ringenv

COPIES = {"copy.copy": copy.copy, "copy.deepcopy": copy.deepcopy, "pickle.dumps": pickle.dumps}


def _cartpole():
    return gym.make("CartPole-v1")


@pytest.mark.parametrize("how", COPIES)
def test_async_vector_env_refuses_copies_and_keeps_working(how):
    envs = ringenv.AsyncVectorEnv([_cartpole] * 2, num_workers=1)
    try:
        envs.reset(seed=0)
        with pytest.raises(TypeError, match="AsyncVectorEnv cannot be copied or pickled"):
            COPIES[how](envs)
        gc.collect()
        _, reward, *_ = envs.step(np.zeros(2, np.int64))
        assert reward.tolist() == [1.0, 1.0]
    finally:
        envs.close()


def test_a_wrapper_around_it_is_refused_too():
    envs = ringenv.AsyncVectorEnv([_cartpole] * 2, num_workers=1)
    wrapped = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    try:
        with pytest.raises(TypeError, match="AsyncVectorEnv cannot be copied"):
            copy.deepcopy(wrapped)
        wrapped.reset(seed=0)
        wrapped.step(np.zeros(2, np.int64))
    finally:
        wrapped.close()


@pytest.mark.parametrize("how", COPIES)
def test_sb3_subproc_vec_env_refuses_copies(how):
    from ringenv.sb3 import SubprocVecEnv  # the test extra installs Stable-Baselines3

    venv = SubprocVecEnv([_cartpole] * 2, num_workers=1)
    try:
        with pytest.raises(TypeError, match="SubprocVecEnv cannot be copied or pickled"):
            COPIES[how](venv)
        gc.collect()
        venv.reset()
        venv.step(np.zeros(2, np.int64))
    finally:
        venv.close()
