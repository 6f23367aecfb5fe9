"""ringenv.make_vec: the built-in Rust env (CartPole-v1), a Rust env with typed arguments from a
worker binary (the example crate's BlocksWorld-v0), and the Gymnasium fallback for other ids."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

import ringenv
from vec_asserts import assert_resets_identical, assert_identical, assert_infos_equal, assert_step_identical


def _make(closing, id, num_envs, num_workers=2, **kwargs):
    return closing(ringenv.make_vec(id, num_envs, vector_kwargs={"num_workers": num_workers}, **kwargs))


def _shared(id, num_envs, **kwargs):
    """A vector env shared by the module's tests (each resets it with a seed before it steps)."""
    envs = ringenv.make_vec(id, num_envs, vector_kwargs={"num_workers": 2}, **kwargs)
    yield envs
    envs.close(timeout=10.0)


@pytest.fixture(scope="module")
def cartpoles():
    """4 Rust CartPoles in 2 workers."""
    yield from _shared("CartPole-v1", 4)


@pytest.fixture(scope="module")
def python_cartpoles():
    """4 Gymnasium CartPoles (``prefer_builtin=False``) in 2 workers."""
    yield from _shared("CartPole-v1", 4, prefer_builtin=False)


@pytest.fixture(scope="module")
def blocks_worlds(symbolic_worker):
    """3 BlocksWorlds of 3 blocks from examples/symbolic's worker binary, in 2 workers."""
    yield from _shared("BlocksWorld-v0", 3, worker=symbolic_worker, num_blocks=3)


def test_builtin_ids():
    assert ringenv.builtin_env_ids() == ["CartPole-v1"]


# -- CartPole-v1 ----------------------------------------------------------------------------------


def test_cartpole_spaces_match_gymnasium(cartpoles):
    n, envs = 4, cartpoles
    ref = gym.make("CartPole-v1")
    try:
        assert envs.single_observation_space == ref.observation_space
        assert envs.single_action_space == ref.action_space
    finally:
        ref.close()
    assert envs.observation_space == gym.vector.utils.batch_space(ref.observation_space, n)
    assert envs.action_space == gym.spaces.MultiDiscrete([2] * n)


def test_cartpole_reset_is_seeded(cartpoles):
    n, envs = 4, cartpoles
    obs, infos = envs.reset(seed=123)
    assert obs.dtype == np.float32 and obs.shape == (n, 4)
    assert isinstance(infos, dict)
    assert np.all(np.abs(obs) <= 0.05)  # CartPole starts uniformly in [-0.05, 0.05]
    assert len({row.tobytes() for row in obs}) == n  # env i is seeded with 123 + i

    envs.step(np.ones(n, dtype=np.int64))
    again, _ = envs.reset(seed=123)
    assert_identical(again, obs, "reset with the same seed")
    other, _ = envs.reset(seed=124)
    assert not np.array_equal(other, obs)
    # seed + i: env i of seed 124 is env i + 1 of seed 123.
    assert_identical(other[:-1], obs[1:], "shifted seeds")


def test_cartpole_next_step_autoreset_and_time_limit(cartpoles):
    """Envs 0-1 take random actions (short episodes, terminated); envs 2-3 balance the pole
    (episodes truncated at exactly 500 steps). The step after an episode's end is the autoreset:
    reward 0, not terminated nor truncated, and a fresh start state."""
    n, steps, envs = 4, 1100, cartpoles
    rng = np.random.default_rng(0)
    obs, _ = envs.reset(seed=5)
    lengths = np.zeros(n, dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    episodes = {k: [] for k in range(n)}
    autoresets = 0
    for _ in range(steps):
        balance = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
        actions = np.where(np.arange(n) < 2, rng.integers(0, 2, size=n), balance)
        obs, rewards, terminated, truncated, _ = envs.step(actions)
        assert rewards.dtype == np.float64 and terminated.dtype == truncated.dtype == np.bool_
        for k in range(n):
            if done[k]:  # this step was the autoreset of env k
                autoresets += 1
                assert rewards[k] == 0.0
                assert not terminated[k] and not truncated[k]
                assert np.all(np.abs(obs[k]) <= 0.05), obs[k]
                lengths[k] = 0
            else:
                assert rewards[k] == 1.0
                lengths[k] += 1
                assert lengths[k] <= 500
                if terminated[k] or truncated[k]:
                    episodes[k].append((int(lengths[k]), bool(terminated[k]), bool(truncated[k])))
        done = terminated | truncated
    assert autoresets > 0
    for k in (0, 1):
        assert len(episodes[k]) > 5
        assert all(term and not trunc and length < 500 for length, term, trunc in episodes[k])
    for k in (2, 3):
        assert episodes[k] == [(500, False, True), (500, False, True)]


def test_cartpole_bad_kwargs_raise_value_error():
    with pytest.raises(ValueError, match="foo"):
        ringenv.make_vec("CartPole-v1", 2, foo=1)


# -- BlocksWorld-v0, from examples/symbolic's worker binary ----------------------------------------


def test_blocksworld_spaces_and_observations(blocks_worlds):
    n, blocks, envs = 3, 3, blocks_worlds
    obs_len = 2 * blocks * (blocks + 1) + blocks
    assert obs_len == 27
    assert envs.single_observation_space.shape == (obs_len,)
    assert envs.single_observation_space.dtype == np.uint8
    assert envs.single_action_space == gym.spaces.Discrete(blocks * (blocks + 1))
    assert envs.action_space == gym.spaces.MultiDiscrete([12] * n)

    obs, _ = envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for t in range(200):
        assert obs.dtype == np.uint8 and obs.shape == (n, obs_len)
        assert np.isin(obs, (0, 1)).all()
        for row in obs:
            assert envs.single_observation_space.contains(row)
        assert obs in envs.observation_space
        obs, rewards, terminated, truncated, _ = envs.step(rng.integers(0, 12, size=n))
        assert rewards.dtype == np.float64 and rewards.shape == (n,)
        assert terminated.dtype == np.bool_ and truncated.dtype == np.bool_


def test_blocksworld_reset_is_seeded(blocks_worlds):
    envs = blocks_worlds
    a, _ = envs.reset(seed=9)
    b, _ = envs.reset(seed=9)
    assert_identical(a, b)


@pytest.mark.parametrize("kwargs,named", [({"num_blocks": 1}, "num_blocks"), ({"num_blocks": 9}, "num_blocks"),
                                          ({"num_blocks": "3"}, "num_blocks"), ({"colour": 2}, "colour")],
                         ids=["num_blocks=1", "num_blocks=9", "num_blocks-str", "unknown-kwarg"])
def test_blocksworld_bad_kwargs_raise_value_error(kwargs, named, symbolic_worker):
    with pytest.raises(ValueError, match=named):
        ringenv.make_vec("BlocksWorld-v0", 2, worker=symbolic_worker, **kwargs)


def test_wrappers_with_builtin_env_raise_value_error():
    with pytest.raises(ValueError):
        ringenv.make_vec("CartPole-v1", 2, wrappers=[gym.wrappers.RecordEpisodeStatistics])


@pytest.mark.parametrize("option, value", [("shared_memory", True), ("autoreset_mode", "next_step"),
                                           ("observation_mode", "same"), ("max_concurrency", 1), ("context", None),
                                           ("daemon", True), ("worker", None)])
def test_builtin_env_refuses_the_options_of_python_envs_naming_them(option, value):
    # Even at their defaults: a Rust env's workers have their own layout and autoreset.
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{option}'.*CartPole-v1 is a Rust env"):
        ringenv.make_vec("CartPole-v1", 2, vector_kwargs={option: value})


def test_builtin_env_checks_action_values_by_default(cartpoles):
    envs = cartpoles
    envs.reset(seed=0)
    with pytest.raises(ValueError, match=r"action 2 of env 1 is outside Discrete\(2\)"):
        envs.step(np.array([0, 2, 0, 0]))
    envs.step(np.array([0, 1, 0, 1]))  # nothing was sent: the env goes on


# -- Gymnasium ids ---------------------------------------------------------------------------------


def _compare_with_sync(ours, id, n, seed, steps):
    ref = gym.vector.SyncVectorEnv([functools.partial(gym.make, id)] * n)
    try:
        assert ours.single_observation_space == ref.single_observation_space
        assert ours.single_action_space == ref.single_action_space
        assert_resets_identical(ours, ref, seed)
        rng = np.random.default_rng(seed)
        ends = 0
        for t in range(steps):
            actions = rng.integers(0, ref.single_action_space.n, size=n)
            out, ref_out = ours.step(actions), ref.step(actions)
            assert_step_identical(out, ref_out, f"step {t}")
            ends += int(np.sum(out[2] | out[3]))
        return ends
    finally:
        ref.close()


def test_non_builtin_gymnasium_id_matches_sync_vector_env(closing):
    envs = _make(closing, "Acrobot-v1", 4)
    assert envs.spec is not None and envs.spec.id == "Acrobot-v1"
    _compare_with_sync(envs, "Acrobot-v1", 4, seed=0, steps=100)


@pytest.mark.parametrize("seed", [0, 42])
def test_cartpole_prefer_builtin_false_matches_sync_vector_env(python_cartpoles, seed):
    envs = python_cartpoles
    assert envs.spec is not None and envs.spec.id == "CartPole-v1"  # a Gymnasium env, not the Rust one
    ends = _compare_with_sync(envs, "CartPole-v1", 4, seed=seed, steps=300)
    assert ends > 0


def test_unknown_id_raises_gymnasium_error():
    with pytest.raises(gym.error.Error):
        ringenv.make_vec("NoSuchEnv-v0", 2)
