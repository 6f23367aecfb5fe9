"""ringenv.sb3.SubprocVecEnv against Stable-Baselines3's own vector envs: the same results as
``DummyVecEnv`` bit for bit (observations, rewards, dones, every info key, reset infos, seeds and
options), per-index calls that touch only the chosen envs, closing, and SB3's algorithms and
``VecEnv`` wrappers on top.

SB3 2.9 has no checker for a ``VecEnv`` (``env_checker.check_env`` takes one ``gym.Env``); its
``VecCheckNan`` wrapper and ``check_for_correct_spaces`` are run here instead.
"""

from __future__ import annotations

import doctest
import functools
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError
from gymnasium.wrappers import TimeLimit
from helper_envs import CallEnv, FaultEnv, InfoEnv, SpaceEnv, StepError
from stable_baselines3 import PPO
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.utils import check_for_correct_spaces
from stable_baselines3.common.vec_env import DummyVecEnv, VecCheckNan, VecMonitor, VecNormalize
from vec_asserts import assert_identical, assert_tree_identical, child_pids, wait_new_children_gone

import ringenv.sb3
from ringenv.sb3 import SubprocVecEnv

N = 4


def test_module_docstring_example_runs():
    result = doctest.testmod(ringenv.sb3, verbose=False)
    assert result.attempted >= 5 and result.failed == 0


# Factories are partials of importable callables, not functions of this module: a worker would
# import this module to unpickle them, and with it stable_baselines3 and torch (seconds each).
_cartpole = functools.partial(gym.make, "CartPole-v1", max_episode_steps=15)  # ends both ways
_dict_env = functools.partial(
    SpaceEnv,
    spaces.Dict({"pos": spaces.Box(-1, 1, (2,), np.float32), "cell": spaces.Discrete(5),
                 "bits": spaces.MultiBinary(3)}),
    spaces.Box(-1, 1, (2,), np.float32))
_tuple_env = functools.partial(
    SpaceEnv, spaces.Tuple((spaces.Box(0, 9, (3,), np.int16), spaces.Discrete(4))), spaces.MultiDiscrete([3, 2]))
# The space of SB3's own tests/test_vec_envs.py::test_vecenv_tuple_spaces, for observations and actions.
_SB3_TUPLE = spaces.Tuple((spaces.Discrete(2), spaces.MultiDiscrete([2, 3]), spaces.MultiBinary(3),
                           spaces.Box(low=np.zeros(2), high=np.ones(2))))
_tuple_everything = functools.partial(SpaceEnv, _SB3_TUPLE, _SB3_TUPLE)


def _pair(closing, factory):
    """Ours and SB3's DummyVecEnv on N envs of ``factory`` (called with the env index if it is
    ``CallEnv``, whose envs then differ)."""
    fns = [functools.partial(factory, i) if factory is CallEnv else factory for i in range(N)]
    return closing(SubprocVecEnv(fns, num_workers=2)), closing(DummyVecEnv(fns))


def _assert_steps_identical(ours, ref, actions, what):
    obs, rewards, dones, infos = ours.step(actions)
    ref_obs, ref_rewards, ref_dones, ref_infos = ref.step(actions)
    assert_tree_identical(obs, ref_obs, f"{what} obs")
    assert_identical(rewards, ref_rewards, f"{what} rewards")
    assert_identical(dones, ref_dones, f"{what} dones")
    assert isinstance(infos, list) and len(infos) == len(ref_infos)
    for i, (info, ref_info) in enumerate(zip(infos, ref_infos)):
        assert_tree_identical(info, ref_info, f"{what} infos[{i}]")
    for i, (info, ref_info) in enumerate(zip(ours.reset_infos, ref.reset_infos)):
        assert_tree_identical(info, ref_info, f"{what} reset_infos[{i}]")
    return ref_dones, ref_infos


@pytest.mark.parametrize("factory", [_cartpole, InfoEnv, _dict_env, _tuple_env],
                         ids=["cartpole", "infos", "dict_obs", "tuple_obs"])
def test_steps_are_identical_to_dummy_vec_env(closing, factory):
    ours, ref = _pair(closing, factory)
    assert ours.observation_space == ref.observation_space and ours.action_space == ref.action_space
    ref.action_space.seed(1)
    assert ours.seed(7) == ref.seed(7) == [7, 8, 9, 10]
    assert_tree_identical(ours.reset(), ref.reset(), "reset obs")
    for i in range(N):
        assert_tree_identical(ours.reset_infos[i], ref.reset_infos[i], f"reset_infos[{i}]")
    terminated = truncated = 0
    for t in range(300):
        actions = np.stack([ref.action_space.sample() for _ in range(N)])
        dones, infos = _assert_steps_identical(ours, ref, actions, f"step {t}")
        for done, info in zip(dones, infos):
            terminated += done and not info["TimeLimit.truncated"]
            truncated += info["TimeLimit.truncated"]
            assert ("terminal_observation" in info) == done
    assert terminated > 10 and truncated > 10, "the run should cross many episode ends of both kinds"


def test_seeds_of_2_64_or_more_seed_as_dummy_vec_env_seeds(closing):
    """``seed(s)`` gives env ``i`` the seed ``s + i`` of any size, as SB3 does: its episodes are
    DummyVecEnv's across 2**64."""
    ours, ref = _pair(closing, InfoEnv)
    ref.action_space.seed(2)
    assert ours.seed(2**64 - 2) == ref.seed(2**64 - 2) == [2**64 - 2, 2**64 - 1, 2**64, 2**64 + 1]
    assert_tree_identical(ours.reset(), ref.reset(), "reset obs")
    assert ours.get_attr("np_random_seed") == ref.get_attr("np_random_seed") == [2**64 - 2 + i for i in range(N)]
    for t in range(20):
        actions = np.stack([ref.action_space.sample() for _ in range(N)])
        _assert_steps_identical(ours, ref, actions, f"step {t}")


def test_tuple_observations_and_a_list_of_tuple_actions_as_sb3s_own_suite_steps_them(closing):
    """SB3's test_vecenv_tuple_spaces: a Tuple space for observations and actions, the actions a
    list of ``num_envs`` tuples of arrays of different shapes (no NumPy array can hold them).
    Observations come back as a tuple of ``(num_envs, ...)`` arrays; everything equals
    DummyVecEnv."""
    ours, ref = _pair(closing, _tuple_everything)
    ref.action_space.seed(3)
    ours.seed(5), ref.seed(5)
    obs = ours.reset()
    assert isinstance(obs, tuple) and len(obs) == 4
    assert_tree_identical(obs, ref.reset(), "reset obs")
    ends = 0
    for t in range(30):
        actions = [ref.action_space.sample() for _ in range(N)]
        dones, infos = _assert_steps_identical(ours, ref, actions, f"step {t}")
        ends += int(dones.sum())
    assert ends > 5
    obs, *_ = ours.step([ref.action_space.sample() for _ in range(N)])
    for values, space in zip(obs, _SB3_TUPLE.spaces):
        assert values.shape[0] == N and all(space.contains(v) for v in values)


def test_start_method_must_be_one_multiprocessing_knows(closing):
    """As SB3's test_subproc_start_method: an unknown start method raises multiprocessing's own
    ValueError, before any worker starts; known ones (and None) are accepted."""
    import multiprocessing

    before = child_pids()
    with pytest.raises(ValueError, match="cannot find context for 'illegal_method'"):
        SubprocVecEnv([CallEnv], start_method="illegal_method")
    assert not wait_new_children_gone(before, timeout=5.0)
    for method in [None, *multiprocessing.get_all_start_methods()]:
        ours = closing(SubprocVecEnv([CallEnv, CallEnv], start_method=method, num_workers=1))
        assert ours.reset().shape[0] == 2


def test_seed_is_used_once_and_options_reach_the_envs(closing):
    ours, ref = _pair(closing, InfoEnv)
    for vec in (ours, ref):
        vec.seed(3)
        vec.set_options({"value": 5})
    per_env = [{"value": 10 + i} for i in range(N)]
    # Seeded with options for all, then unseeded (the envs' RNGs go on) with options per env,
    # then with neither: seeds and options are used by one reset only.
    for k, (options, expected) in enumerate([(None, [5] * N), (per_env, [10, 11, 12, 13]), (None, None)]):
        if options is not None:
            ours.set_options(options)
            ref.set_options(options)
        obs, ref_obs = ours.reset(), ref.reset()
        assert_tree_identical(obs, ref_obs, f"reset {k} obs")
        assert_tree_identical(ours.reset_infos, ref.reset_infos, f"reset {k} infos")
        assert [info.get("option_value") for info in ours.reset_infos] == (expected or [None] * N)
        assert ours._seeds == [None] * N and ours._options == [{}] * N
        _assert_steps_identical(ours, ref, np.ones(N, dtype=np.int64), f"reset {k}, step")


def test_reset_collects_a_pending_step(closing):
    ours, ref = _pair(closing, InfoEnv)
    ours.seed(0)
    ref.seed(0)
    ours.reset()
    ref.reset()
    ours.step_async(np.zeros(N, dtype=np.int64))
    ours.seed(1)
    ref.seed(1)
    assert_tree_identical(ours.reset(), ref.reset(), "obs")


def test_calls_touch_only_the_given_indices(closing):
    ours, ref = _pair(closing, CallEnv)
    for vec in (ours, ref):
        vec.set_attr("scale", 3.0, indices=[1, 3])
        vec.set_attr("label", "last", indices=-1)
        vec.reset()
    assert ours.get_attr("scale") == ref.get_attr("scale") == [1.0, 3.0, 1.0, 3.0]
    assert ours.get_attr("label", indices=[3, 0]) == ["last", "env0"]
    _, rewards, _, _ = ours.step(np.ones(N, dtype=np.int64))
    assert rewards.tolist() == ref.step(np.ones(N, dtype=np.int64))[1].tolist() == [1.0, 3.0, 1.0, 3.0]
    # An env listed twice runs the method twice, in turn, as SB3 does.
    for vec in (ours, ref):
        assert vec.env_method("step", 1, indices=[2, 2]) is not None
    assert ours.get_attr("t") == ref.get_attr("t") == [1, 1, 3, 1]
    results = ours.env_method("describe", "p:", indices=np.array([2, 0]), suffix="!")
    ref_results = ref.env_method("describe", "p:", indices=np.array([2, 0]), suffix="!")
    assert results == ref_results == ["p:env2:3!", "p:env0:1!"]
    stats = ours.env_method("stats", indices=1)
    assert len(stats) == 1 and stats[0]["index"] == 1
    assert_identical(stats[0]["history"], np.arange(2, dtype=np.int16))
    assert ours.env_method("describe", "x", indices=[]) == []
    assert ours.has_attr("scale") and not ours.has_attr("no_such_attribute")
    with pytest.raises(AttributeError):
        ours.get_attr("no_such_attribute", indices=[0])
    with pytest.raises(StepError, match=r"bad \(env 2\)"):
        ours.env_method("fail_call", "bad", indices=[0, 2])


@pytest.mark.parametrize("indices, error, match", [
    (4, IndexError, r"indices\[0\] = 4 is outside \[-4, 4\)"),
    ([0, -5], IndexError, r"indices\[1\] = -5"),
    ([0, 1.0], TypeError, r"indices\[1\] must be an int, got float"),
    ([True], TypeError, r"indices\[0\] must be an int, got bool"),
    ("0", TypeError, r"indices\[0\] must be an int, got str"),
    (2.0, TypeError, "indices must be None, an int or an iterable of ints, got float"),
])
def test_bad_indices_are_refused_before_anything_is_sent(closing, indices, error, match):
    ours = closing(SubprocVecEnv([CallEnv for _ in range(N)], num_workers=2))
    with pytest.raises(error, match=match):
        ours.set_attr("scale", 9.0, indices=indices)
    assert ours.get_attr("scale") == [1.0] * N  # nothing was set, not even on the valid ones


def test_bad_actions_are_refused_before_anything_is_sent(closing):
    ours, ref = _pair(closing, _cartpole)
    ours.close()
    ours = closing(SubprocVecEnv([_cartpole] * N, num_workers=2, check_actions=True))  # range checks: opt-in
    ours.seed(0)
    ref.seed(0)
    ours.reset()
    ref.reset()
    with pytest.raises(ValueError, match="actions: got 3 actions for 4 envs"):
        ours.step_async(np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match="actions: got 0 actions for 4 envs"):
        ours.step_async(np.int64(1))
    with pytest.raises(ValueError, match="outside Discrete"):
        ours.step_async(np.array([0, 1, 2, 0]))
    assert not ours.waiting
    _assert_steps_identical(ours, ref, np.array([0, 1, 1, 0]), "step after refused actions")
    ours.step_async(np.zeros(N, dtype=np.int64))
    with pytest.raises(AlreadyPendingCallError):
        ours.step_async(np.zeros(N, dtype=np.int64))


def test_env_is_wrapped_without_importing_sb3_into_other_workers(closing):
    def plain():
        return TimeLimit(CallEnv(), 100)

    def monitored():
        return Monitor(plain())

    fns = [plain, plain, monitored, monitored]  # worker 0: envs 0 and 1; worker 1: envs 2 and 3
    ours, ref = closing(SubprocVecEnv(fns, num_workers=2)), closing(DummyVecEnv(fns))
    assert ours.env_is_wrapped(Monitor) == ref.env_is_wrapped(Monitor) == [False, False, True, True]
    assert ours.env_is_wrapped(TimeLimit, indices=[3, 0]) == [True, True]
    assert ours.env_is_wrapped(VecMonitor) == [False] * N  # not a gym.Wrapper at all
    ours.get_attr("scale")
    ours.env_method("describe", "x")
    ours.set_attr("scale", 2.0)
    # Nothing above imported stable_baselines3 (and torch) where the envs do not use it.
    assert ours._vec._apply(lambda env: "stable_baselines3" in sys.modules) == [False, False, True, True]


def test_close_stops_the_workers_and_later_calls_raise():
    before = child_pids()
    ours = SubprocVecEnv([CallEnv for _ in range(N)], num_workers=2)
    ours.reset()
    ours.step_async(np.ones(N, dtype=np.int64))  # a pending step is collected by close
    ours.close()
    assert ours.closed and not ours.waiting
    assert not wait_new_children_gone(before, timeout=5.0), "worker processes left after close()"
    ours.close()  # closing twice is harmless
    for call in (ours.reset, lambda: ours.step(np.ones(N, dtype=np.int64)), lambda: ours.get_attr("t"),
                 lambda: ours.env_method("describe", "x"), lambda: ours.set_attr("t", 0),
                 lambda: ours.env_is_wrapped(Monitor), lambda: ours.has_attr("t")):
        with pytest.raises(ClosedEnvironmentError):
            call()


def test_a_restarted_worker_reports_its_envs_truncated(closing):
    fns = [functools.partial(FaultEnv, die_at=3 if i == 2 else None) for i in range(N)]
    ours = closing(SubprocVecEnv(fns, num_workers=2, on_worker_failure="restart"))
    ours.reset()
    for t in range(1, 5):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the restart's warning
            obs, rewards, dones, infos = ours.step(np.zeros(N, dtype=np.int64))
        restarted = [t == 3 and i >= 2 for i in range(N)]  # env 2 kills worker 1 (envs 2, 3) at step 3
        assert dones.tolist() == restarted
        assert [info["TimeLimit.truncated"] for info in infos] == restarted
        assert [info.get("worker_restarted", False) for info in infos] == restarted
        assert not any("terminal_observation" in info for info in infos)
    assert obs.ravel().tolist() == [4, 4, 1, 1]  # envs 2 and 3 were reset at step 3


def test_constructor_errors():
    with pytest.raises(ValueError, match="env_fns is empty"):
        SubprocVecEnv([])
    with pytest.raises(ValueError, match="cannot find context for 'threads'"):
        SubprocVecEnv([CallEnv], start_method="threads")
    with pytest.raises(TypeError, match="no autoreset_mode"):
        SubprocVecEnv([CallEnv], autoreset_mode="next_step")
    nested = spaces.Dict({"inner": spaces.Dict({"x": spaces.Discrete(2)})})
    before = child_pids()
    with pytest.raises(NotImplementedError, match="Nested observation spaces are not supported"):
        SubprocVecEnv([functools.partial(SpaceEnv, nested)])
    assert not wait_new_children_gone(before, timeout=5.0)


def test_start_method_is_accepted_and_worker_options_reach_ringenv(closing):
    ours = closing(SubprocVecEnv([CallEnv for _ in range(3)], start_method="forkserver", num_workers=3,
                                 worker_env={"RINGENV_TEST_MARK": "sb3"}))
    assert ours._vec._pool.num_workers == 3
    assert ours._vec._apply(lambda env: __import__("os").environ.get("RINGENV_TEST_MARK")) == ["sb3"] * 3


def test_get_images_renders_rgb_arrays(closing):
    fns = [functools.partial(gym.make, "CartPole-v1", render_mode="rgb_array") for _ in range(2)]
    ours, ref = closing(SubprocVecEnv(fns, num_workers=2)), closing(DummyVecEnv(fns))
    ours.seed(0)
    ref.seed(0)
    ours.reset()
    ref.reset()
    assert ours.render_mode == "rgb_array"
    images, ref_images = ours.get_images(), ref.get_images()
    assert len(images) == len(ref_images) == 2
    for i, (image, ref_image) in enumerate(zip(images, ref_images)):
        assert_identical(image, ref_image, f"image {i}")
    assert_identical(ours.render(mode="rgb_array"), ref.render(mode="rgb_array"), "tiled image")


def test_ppo_learns_the_same_as_on_dummy_vec_env(closing):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        params = []
        for vec in _pair(closing, _cartpole):
            model = PPO("MlpPolicy", vec, n_steps=32, batch_size=64, n_epochs=2, seed=0, device="cpu")
            model.learn(total_timesteps=256)
            assert model.num_timesteps == 256
            params.append({k: v.clone() for k, v in model.policy.state_dict().items()})
    finally:
        torch.set_num_threads(threads)
    ours, ref = params
    assert ours.keys() == ref.keys()
    for key in ref:
        assert torch.equal(ours[key], ref[key]), f"PPO parameter {key} differs after learning"


def test_sb3_vec_env_wrappers_work_on_top(closing):
    ours, ref = _pair(closing, _cartpole)
    check_for_correct_spaces(ours, ref.observation_space, ref.action_space)
    wrapped = [VecCheckNan(VecNormalize(VecMonitor(vec), gamma=0.9), raise_exception=True) for vec in (ours, ref)]
    for vec in wrapped:
        vec.seed(5)
    assert_identical(wrapped[0].reset(), wrapped[1].reset(), "normalized reset obs")
    rng = np.random.default_rng(0)
    episodes = 0
    for t in range(100):
        actions = rng.integers(0, 2, N)
        (obs, rewards, dones, infos), (r_obs, r_rewards, r_dones, r_infos) = (v.step(actions) for v in wrapped)
        assert_identical(obs, r_obs, f"step {t} normalized obs")
        assert_identical(rewards, r_rewards, f"step {t} normalized rewards")
        assert_identical(dones, r_dones, f"step {t} dones")
        for info, r_info in zip(infos, r_infos):
            assert ("terminal_observation" in info) == ("terminal_observation" in r_info)
            if "terminal_observation" in r_info:  # normalized by VecNormalize
                assert_identical(info["terminal_observation"], r_info["terminal_observation"], f"step {t}")
            if "episode" in r_info:
                episodes += 1
                assert (info["episode"]["r"], info["episode"]["l"]) == (r_info["episode"]["r"], r_info["episode"]["l"])
    assert episodes > 10
    assert wrapped[0].unwrapped is ours
