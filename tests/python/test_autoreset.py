"""The three autoreset modes of Gymnasium 1.4 (https://farama.org/Vector-Autoreset-Mode):
NEXT_STEP (the step after an episode ends resets the env), SAME_STEP (the step that ends it also
resets it; the infos carry ``final_obs`` and ``final_info``) and DISABLED (the caller resets the
envs that ended with ``reset(options={"reset_mask": mask})``). ringenv returns exactly what
gymnasium.vector.SyncVectorEnv returns in each."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from gymnasium.spaces import Box, Dict, Discrete
from gymnasium.vector import AutoresetMode

import ringenv
from helper_envs import InfoEnv, SpaceEnv
from vec_asserts import assert_identical
from vec_compare import (
    assert_spaces_match,
    assert_vec_reset_identical,
    assert_step_identical,
    make_ours,
    make_ref,
    run_lockstep,
)

N = 4
STEPS = 320
MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]
MODE_IDS = ["next-step", "same-step", "disabled"]
SHM = pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "pickled"])


def _pair(closing, mode, shared_memory=True, env_fn=InfoEnv, n=N):
    ours = closing(make_ours([env_fn] * n, shared_memory=shared_memory, autoreset_mode=mode))
    ref = closing(make_ref([env_fn] * n, autoreset_mode=mode))
    return ours, ref


# -- metadata -------------------------------------------------------------------------------------


@pytest.mark.parametrize("as_string", [False, True], ids=["enum", "string"])
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_metadata_autoreset_mode(closing, mode, as_string):
    given = mode.value if as_string else mode  # "NextStep", "SameStep", "Disabled"
    ours, ref = _pair(closing, given)
    assert ours.metadata["autoreset_mode"] is mode
    assert ours.metadata == ref.metadata
    assert ours.autoreset_mode is mode
    assert InfoEnv.metadata == {"render_modes": []}  # the env's class-level metadata is untouched


# -- each mode over many episodes -----------------------------------------------------------------


@SHM
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_autoreset_matches_sync_over_many_episodes(closing, mode, shared_memory):
    ours, ref = _pair(closing, mode, shared_memory)
    assert_spaces_match(ours, ref)
    ends = run_lockstep(ours, ref, seed=21, steps=STEPS, autoreset_mode=mode)
    assert ends >= 100  # episodes last 3 to 8 steps


@SHM
def test_next_step_resets_on_the_step_after_the_end(closing, shared_memory):
    ours, ref = _pair(closing, AutoresetMode.NEXT_STEP, shared_memory)
    assert_vec_reset_identical(ours.reset(seed=3), ref.reset(seed=3))
    rng = np.random.default_rng(3)
    previous_done = np.zeros(N, dtype=bool)
    autoresets = 0
    for t in range(60):
        actions = rng.integers(0, 3, size=N)
        obs, rewards, terminations, truncations, infos = out = ours.step(actions)
        assert_step_identical(out, ref.step(actions), f"step {t}")
        for i in np.flatnonzero(previous_done):
            # The env was reset, not stepped: the reset observation [0, length, u], reward 0,
            # not done, and the reset infos.
            assert obs[i][0] == 0.0 and rewards[i] == 0.0
            assert not terminations[i] and not truncations[i]
            assert infos["_length"][i] and infos["length"][i] == obs[i][1]
            autoresets += 1
        assert "final_obs" not in infos and "final_info" not in infos
        previous_done = terminations | truncations
    assert autoresets > 10


@SHM
def test_same_step_infos_carry_final_obs_and_final_info(closing, shared_memory):
    ours, ref = _pair(closing, AutoresetMode.SAME_STEP, shared_memory)
    assert_vec_reset_identical(ours.reset(seed=4), ref.reset(seed=4))
    rng = np.random.default_rng(4)
    t_of = np.zeros(N, dtype=int)  # the step count of each env's episode
    ended = 0
    for t in range(60):
        actions = rng.integers(0, 3, size=N)
        obs, rewards, terminations, truncations, infos = out = ours.step(actions)
        assert_step_identical(out, ref.step(actions), f"step {t}")
        t_of += 1
        done = terminations | truncations
        if not done.any():
            assert "final_obs" not in infos and "final_info" not in infos
            continue
        assert_identical(infos["_final_obs"], done, "_final_obs")
        assert_identical(infos["_final_info"], done, "_final_info")
        assert infos["final_obs"].dtype == object and infos["final_obs"].shape == (N,)
        for i in range(N):
            if done[i]:
                final = infos["final_obs"][i]
                # The last observation of the episode; the returned one starts the next episode.
                assert isinstance(final, np.ndarray) and final.dtype == np.float64
                assert final[0] == t_of[i] and final[1] == actions[i]
                assert obs[i][0] == 0.0 and infos["_length"][i]
                assert infos["final_info"]["_outcome"][i]
                assert infos["final_info"]["outcome"][i] == ("terminated" if terminations[i] else "truncated")
                assert rewards[i] == 0.25 * actions[i] + t_of[i]
                t_of[i] = 0
                ended += 1
            else:
                assert infos["final_obs"][i] is None
    assert ended > 10


@SHM
def test_same_step_final_obs_of_dict_observations(closing, shared_memory):
    space = Dict({"pos": Box(-1.0, 1.0, (2,), np.float32), "id": Discrete(4, start=1)})
    env_fn = functools.partial(SpaceEnv, space)
    ours, ref = _pair(closing, AutoresetMode.SAME_STEP, shared_memory, env_fn=env_fn)
    run_lockstep(ours, ref, seed=8, steps=40, autoreset_mode=AutoresetMode.SAME_STEP)
    # Every env ends within 6 steps of a reset (max_length 6): look at each final observation.
    assert_vec_reset_identical(ours.reset(seed=8), ref.reset(seed=8))
    ended = 0
    for t in range(6):
        out = ours.step(np.zeros(N, dtype=np.int64))
        assert_step_identical(out, ref.step(np.zeros(N, dtype=np.int64)), f"step {t}")
        infos = out[4]
        for i in np.flatnonzero(out[2] | out[3]):
            final = infos["final_obs"][i]
            assert isinstance(final, dict) and list(final) == ["id", "pos"]
            assert space.contains(final)
            ended += 1
    assert ended >= N


@SHM
def test_disabled_masked_reset_resets_only_the_masked_envs(closing, shared_memory):
    ours, ref = _pair(closing, AutoresetMode.DISABLED, shared_memory)
    assert_vec_reset_identical(ours.reset(seed=5), ref.reset(seed=5))
    rng = np.random.default_rng(5)
    masked_resets = 0
    for t in range(60):
        actions = rng.integers(0, 3, size=N)
        out = ours.step(actions)
        assert_step_identical(out, ref.step(actions), f"step {t}")
        obs, done = out[0], out[2] | out[3]
        assert "final_obs" not in out[4]
        if not done.any():
            continue
        reset_obs, reset_infos = reset_out = ours.reset(options={"reset_mask": done.copy()})
        assert_vec_reset_identical(reset_out, ref.reset(options={"reset_mask": done.copy()}), f"reset {t}")
        for i in range(N):
            if done[i]:
                assert reset_obs[i][0] == 0.0 and reset_infos["_length"][i]
            else:  # untouched: the observation of the last step, no infos
                assert_identical(reset_obs[i], obs[i], f"unmasked env {i}")
                assert not reset_infos["_length"][i]
        masked_resets += 1
    assert masked_resets > 5


@SHM
def test_disabled_masked_reset_with_seeds_and_options(closing, shared_memory):
    ours, ref = _pair(closing, AutoresetMode.DISABLED, shared_memory)
    assert_vec_reset_identical(ours.reset(seed=6), ref.reset(seed=6))
    for t in range(3):
        actions = np.array([0, 1, 2, 1])
        assert_step_identical(ours.step(actions), ref.step(actions), f"step {t}")
    mask = np.array([True, False, True, False])
    ours_options = {"reset_mask": mask.copy(), "value": 9}
    ref_options = {"reset_mask": mask.copy(), "value": 9}
    out = ours.reset(seed=[100, 101, 102, 103], options=ours_options)
    assert_vec_reset_identical(out, ref.reset(seed=[100, 101, 102, 103], options=ref_options))
    infos = out[1]
    assert_identical(infos["_options"], mask)
    # The envs got the options without the mask.
    assert set(infos["options"]) == {"value", "_value"}
    # As Gymnasium's vector envs do, the mask is popped out of the caller's options (the vector
    # RecordEpisodeStatistics wrapper depends on it: it resets its statistics when it still finds
    # "reset_mask" in the options after the reset).
    assert ours_options == ref_options == {"value": 9}
    # The masked envs were reset with seeds 100 and 102; stepping on stays identical.
    for t in range(10):
        actions = np.array([2, 2, 1, 0])
        out = ours.step(actions)
        assert_step_identical(out, ref.step(actions), f"step {t} after the masked reset")
        done = out[2] | out[3]
        if done.any():
            assert_vec_reset_identical(ours.reset(options={"reset_mask": done.copy()}),
                                       ref.reset(options={"reset_mask": done.copy()}))


@pytest.mark.parametrize("mask, error", [
    ([True, False, True, False], TypeError),                 # not an ndarray
    (np.array([True, False, True]), ValueError),             # wrong shape
    (np.array([1, 0, 1, 0]), TypeError),                     # not bool
    (np.zeros(N, dtype=bool), ValueError),                   # nothing to reset
], ids=["list", "shape", "dtype", "all-false"])
def test_bad_reset_mask_raises_as_sync(closing, mask, error):
    ours, ref = _pair(closing, AutoresetMode.DISABLED)
    ours.reset(seed=0)
    ref.reset(seed=0)
    with pytest.raises(error):
        ref.reset(options={"reset_mask": mask})
    with pytest.raises(error):
        ours.reset(options={"reset_mask": mask})
    # Nothing is pending: the vector env still steps, as Sync does.
    actions = np.array([1, 1, 1, 1])
    assert_step_identical(ours.step(actions), ref.step(actions))


@SHM
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=MODE_IDS[:2])
def test_full_reset_mid_run_clears_pending_autoresets(closing, mode, shared_memory):
    ours, ref = _pair(closing, mode, shared_memory)
    assert_vec_reset_identical(ours.reset(seed=7), ref.reset(seed=7))
    actions = np.array([1, 2, 0, 1])
    for round_ in range(4):
        # Step until some env has just ended, then reset everything: the next step must be a
        # plain step for every env (no autoreset left over from the ended episode).
        for t in range(20):
            out = ours.step(actions)
            assert_step_identical(out, ref.step(actions), f"round {round_} step {t}")
            if (out[2] | out[3]).any():
                break
        assert_vec_reset_identical(ours.reset(seed=round_), ref.reset(seed=round_), f"reset {round_}")
        out = ours.step(actions)
        assert_step_identical(out, ref.step(actions), f"round {round_} first step")
        assert_identical(out[0][:, 0], np.ones(N), "every env made its first step")


class _FinalInfoResetEnv(InfoEnv):
    """An env whose reset info has its own ``final_info`` (and a key of its own), ending an
    episode every other step with the step's info ``{"from_step": t}``."""

    def reset(self, *, seed=None, options=None):
        obs, _ = super().reset(seed=seed, options=options)
        self._t = 0
        return obs, {"final_info": {"from_reset": 1}, "reset_key": 7}

    def step(self, action):
        obs, reward, _, _, _ = super().step(action)
        self._t += 1
        return obs, reward, self._t % 2 == 0, False, {"from_step": self._t}


@pytest.mark.parametrize("layout", [{}, {"num_workers": 0}, {"num_workers": 2}], ids=["default", "in-process", "two-workers"])
def test_same_step_infos_are_sync_vector_envs_in_key_order_and_merge_a_reset_infos_final_info(closing, layout):
    """SAME_STEP infos as SyncVectorEnv builds them: ``final_obs``, then ``final_info``, then the
    reset's keys (Gymnasium's AsyncVectorEnv has the two the other way round), and a reset info's
    own ``final_info`` merged into the step's, not replacing it."""
    ours = closing(ringenv.AsyncVectorEnv([_FinalInfoResetEnv] * N, autoreset_mode=AutoresetMode.SAME_STEP, **layout))
    ref = closing(make_ref([_FinalInfoResetEnv] * N, autoreset_mode=AutoresetMode.SAME_STEP))
    assert_vec_reset_identical(ours.reset(seed=1), ref.reset(seed=1))
    for t in range(6):
        actions = np.ones(N, dtype=np.int64)
        out = ours.step(actions)
        assert_step_identical(out, ref.step(actions), f"step {t}")
        if t % 2 == 1:  # every env ended this step
            infos = out[4]
            assert list(infos)[:4] == ["final_obs", "_final_obs", "final_info", "_final_info"]
            assert infos["final_info"]["from_step"].tolist() == [2] * N
            assert infos["final_info"]["from_reset"].tolist() == [1] * N
