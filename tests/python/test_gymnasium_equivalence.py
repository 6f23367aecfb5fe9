"""ringenv.AsyncVectorEnv returns exactly what gymnasium.vector.SyncVectorEnv returns (values,
dtypes, shapes, infos), including across next-step autoresets, for every seed SyncVectorEnv
takes."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError

import ringenv
from helper_envs import InfoEnv
from vec_asserts import assert_resets_identical, assert_identical, assert_infos_equal, assert_step_identical


def _pair(closing, env_fn, num_envs, num_workers):
    """A ringenv vector env and a Gymnasium SyncVectorEnv of ``num_envs`` copies of ``env_fn``."""
    ours = closing(ringenv.AsyncVectorEnv([env_fn] * num_envs, num_workers=num_workers))
    ref = closing(gym.vector.SyncVectorEnv([env_fn] * num_envs))
    return ours, ref


def _check_spaces(ours, ref):
    assert ours.num_envs == ref.num_envs
    assert ours.single_observation_space == ref.single_observation_space
    assert ours.single_action_space == ref.single_action_space
    assert ours.observation_space == ref.observation_space
    assert ours.action_space == ref.action_space


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_cartpole_matches_sync_vector_env(closing, seed):
    n, steps = 8, 500
    ours, ref = _pair(closing, functools.partial(gym.make, "CartPole-v1"), n, num_workers=2)
    _check_spaces(ours, ref)

    obs, infos = ours.reset(seed=seed)
    ref_obs, ref_infos = ref.reset(seed=seed)
    assert_identical(obs, ref_obs, "reset obs")
    assert obs.shape == (n, 4) and obs.dtype == np.float32
    assert_infos_equal(infos, ref_infos, "reset infos")

    rng = np.random.default_rng(seed)
    ends = 0
    for t in range(steps):
        actions = rng.integers(0, 2, size=n)
        out, ref_out = ours.step(actions), ref.step(actions)
        assert_step_identical(out, ref_out, f"step {t}")
        assert out[1].dtype == np.float64 and out[2].dtype == np.bool_ and out[3].dtype == np.bool_
        ends += int(np.sum(out[2] | out[3]))
    assert ends > 0  # random CartPole episodes are short: autoresets were exercised

    # A second reset with the same seed reproduces the first one.
    obs2, _ = ours.reset(seed=seed)
    ref_obs2, _ = ref.reset(seed=seed)
    assert_identical(obs2, ref_obs2, "second reset obs")
    assert_identical(obs2, ref_obs, "second reset obs vs first")


def test_pendulum_box_actions_match_sync_vector_env(closing):
    n, steps, seed = 4, 250, 7
    ours, ref = _pair(closing, functools.partial(gym.make, "Pendulum-v1"), n, num_workers=2)
    _check_spaces(ours, ref)

    assert_resets_identical(ours, ref, seed)

    rng = np.random.default_rng(seed)
    truncations = 0
    for t in range(steps):
        actions = rng.uniform(-2.0, 2.0, size=(n, 1)).astype(np.float32)
        out, ref_out = ours.step(actions), ref.step(actions)
        assert_step_identical(out, ref_out, f"step {t}")
        truncations += int(np.sum(out[3]))
    # Pendulum truncates every env at step 200; steps 201.. run after the autoreset.
    assert truncations == n


def test_infos_match_sync_vector_env(closing):
    n, steps, seed = 5, 60, 11
    ours, ref = _pair(closing, InfoEnv, n, num_workers=2)
    _check_spaces(ours, ref)

    obs, infos = ours.reset(seed=seed)
    ref_obs, ref_infos = ref.reset(seed=seed)
    assert_identical(obs, ref_obs, "reset obs")
    assert obs.dtype == np.float64
    assert_infos_equal(infos, ref_infos, "reset infos")
    assert_identical(infos["length"], ref_infos["length"])
    assert infos["_length"].all()

    rng = np.random.default_rng(seed)
    seen = set()
    for t in range(steps):
        actions = rng.integers(0, 3, size=n)
        out, ref_out = ours.step(actions), ref.step(actions)
        assert_step_identical(out, ref_out, f"step {t}")
        seen.update(k for k in out[4] if not k.startswith("_"))
        for key in ("step", "flag", "half", "outcome"):
            if key in out[4]:
                # Partial infos: the mask says which envs reported the key on this step.
                assert out[4][f"_{key}"].dtype == np.bool_
                assert out[4][f"_{key}"].shape == (n,)
    # Every kind of info (int, bool, float, str, and the reset infos of autoresets) appeared.
    assert seen >= {"step", "flag", "half", "outcome", "length"}


def test_reset_options_reach_the_envs(closing):
    n = 4
    ours, ref = _pair(closing, InfoEnv, n, num_workers=2)
    options = {"value": 7, "name": "opt"}

    _, infos = ours.reset(seed=3, options=options)
    _, ref_infos = ref.reset(seed=3, options=options)
    assert_infos_equal(infos, ref_infos, "reset infos with options")
    assert_identical(infos["option_value"], np.full(n, 7))
    assert infos["_option_value"].all()
    assert infos["options"]["value"].tolist() == [7] * n
    assert infos["options"]["name"].tolist() == ["opt"] * n

    # Without options, the envs get options=None (no echo).
    _, infos = ours.reset(seed=3)
    assert "options" not in infos and "option_value" not in infos


# -- seeds of 2**64 or more ------------------------------------------------------------------------

#: Where a Python env lives: worker processes only, a worker process and this process's inline
#: share, this process alone.
_LAYOUTS = {"workers": {"num_workers": 1, "inline": False}, "inline-share": {"num_workers": 1, "inline": True},
            "in-process": {"num_workers": 0}}
#: Seeds SyncVectorEnv takes that do not fit 8 bytes: ``seed + i`` crossing 2**64 (env 0's and
#: env 1's below it, in shared memory, the others above), and a list mixing 128-bit seeds (as
#: ``secrets.randbits(128)`` or ``np.random.SeedSequence().entropy`` give) with small ones.
_BIG_SEEDS = [2**64 - 2, [2**128 - 1, 7, 2**64, 0x1D5F0C2A9E6B48F3A07C3E91B2D4F605]]


@pytest.mark.parametrize("env_fn", [InfoEnv, functools.partial(gym.make, "CartPole-v1")], ids=["infos", "cartpole"])
@pytest.mark.parametrize("layout", list(_LAYOUTS.values()), ids=list(_LAYOUTS))
def test_seeds_of_2_64_or_more_reach_the_envs_as_sync_vector_env_passes_them(closing, layout, env_fn):
    """Each env's ``reset`` gets the Python int SyncVectorEnv passes it (its ``np_random_seed``
    is that int), whichever side of 2**64 and wherever the env lives; the episodes are identical,
    and so is a partial reset (``reset_mask``) with such seeds."""
    n = 4
    ours = closing(ringenv.AsyncVectorEnv([env_fn] * n, **layout))
    ref = closing(gym.vector.SyncVectorEnv([env_fn] * n))
    rng = np.random.default_rng(0)
    for seed in _BIG_SEEDS:
        assert_resets_identical(ours, ref, seed, f"reset(seed={seed})")
        assert ours.np_random_seed == ref.np_random_seed
        assert ours.np_random_seed == (tuple(seed) if isinstance(seed, list) else tuple(seed + i for i in range(n)))
        for t in range(20):
            actions = rng.integers(0, 2, size=n)
            assert_step_identical(ours.step(actions), ref.step(actions), f"step {t} after reset(seed={seed})")
    # NumPy integers are taken as the Python ints they hold (SyncVectorEnv takes Python ints only)
    obs, _ = ours.reset(seed=np.uint64(2**64 - 1))
    assert_identical(obs, ref.reset(seed=2**64 - 1)[0], "reset(seed=np.uint64(2**64 - 1))")
    assert ours.np_random_seed == ref.np_random_seed == tuple(2**64 - 1 + i for i in range(n))
    # a partial reset: envs 0 and 2 get their seeds (one below 2**64, one above), 1 and 3 go on
    mask = np.array([True, False, True, False])
    seeds = [2**64 - 1, 5, 2**70, 2**70]
    out = ours.reset(seed=seeds, options={"reset_mask": mask.copy(), "value": 3})
    ref_out = ref.reset(seed=seeds, options={"reset_mask": mask.copy(), "value": 3})
    assert_identical(out[0], ref_out[0], "masked reset obs")
    assert_infos_equal(out[1], ref_out[1], "masked reset infos")
    assert ours.np_random_seed == ref.np_random_seed == (2**64 - 1, 2**64, 2**70, 2**64 + 2)
    for t in range(20):
        actions = rng.integers(0, 2, size=n)
        assert_step_identical(ours.step(actions), ref.step(actions), f"step {t} after the masked reset")


def test_async_reset_takes_seeds_of_2_64_or_more_and_repeats_only_the_same_ones(closing):
    """EnvPool's ``async_reset`` seeds as ``reset`` does; repeating it with the same seeds while
    it is in flight returns at once, and other seeds of 2**64 or more (none of which is in shared
    memory) are no repeat."""
    n = 4
    ours = closing(ringenv.AsyncVectorEnv([InfoEnv] * n, num_workers=2, batch_size=2))
    ref = closing(gym.vector.SyncVectorEnv([InfoEnv] * n))
    ref_obs, _ = ref.reset(seed=2**65)
    ours.async_reset(seed=2**65)
    ours.async_reset(seed=2**65)  # the same reset: it went out
    with pytest.raises(AlreadyPendingCallError):
        ours.async_reset(seed=2**66)
    got = {}
    for _ in range(2):
        obs, *_, infos = ours.recv(timeout=30)
        got.update({int(i): o for i, o in zip(infos["env_id"], obs)})
    assert_identical(np.stack([got[i] for i in range(n)]), ref_obs, "async_reset(seed=2**65)")
    assert ours.np_random_seed == ref.np_random_seed == tuple(2**65 + i for i in range(n))
