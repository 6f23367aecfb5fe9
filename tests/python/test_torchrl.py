"""ringenv.torchrl.ParallelEnv against TorchRL itself: its specs pass check_env_specs and equal
those of a SerialEnv of GymEnvs; rollouts (crossing episode ends), partial resets and set_seed
give what that SerialEnv gives, bit for bit; TorchRL's collectors run with it; close stops every
worker process; bad arguments raise clear errors before anything starts."""

from __future__ import annotations

import functools
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from tensordict import TensorDict
from torchrl.envs import GymEnv, GymWrapper, SerialEnv, TransformedEnv
from torchrl.envs.transforms import StepCounter
from torchrl.envs.utils import check_env_specs

try:  # torchrl >= 0.11 names
    from torchrl.collectors import Collector as SyncDataCollector
    from torchrl.collectors import MultiAsyncCollector as MultiaSyncDataCollector
    from torchrl.collectors import MultiSyncCollector as MultiSyncDataCollector
except ImportError:  # older torchrl
    from torchrl.collectors import (MultiaSyncDataCollector, MultiSyncDataCollector,  # type: ignore[no-redef]
                                    SyncDataCollector)

from helper_envs import SpaceEnv
from ringenv.torchrl import ParallelEnv
from vec_asserts import assert_identical, wait_pids_gone

N = 3
CARTPOLE = functools.partial(gym.make, "CartPole-v1")


@pytest.fixture
def envs():
    """``envs(env)`` registers a TorchRL env (ours or TorchRL's) to be closed at teardown."""
    made = []

    def register(env):
        made.append(env)
        return env

    yield register
    for env in reversed(made):
        env.close(raise_if_closed=False)


def _serial(envs, make_env, n=N):
    ref = envs(SerialEnv(n, make_env))
    ref.start()
    return ref


def assert_td_identical(actual, expected, what="tensordict"):
    """The same leaf keys, and each leaf of the same dtype, shape and bytes."""
    keys = set(expected.keys(True, True))
    assert set(actual.keys(True, True)) == keys, f"{what}: keys {set(actual.keys(True, True))} != {keys}"
    assert actual.batch_size == expected.batch_size, f"{what}: batch_size {actual.batch_size} != {expected.batch_size}"
    for key in keys:
        assert_identical(actual.get(key).cpu().numpy(), expected.get(key).cpu().numpy(), f"{what}[{key}]")


def assert_specs_equal(ours, ref):
    for name in ("full_observation_spec", "full_reward_spec", "full_done_spec"):
        assert ours.output_spec[name] == ref.output_spec[name], name
    for name in ("full_action_spec", "full_state_spec"):
        assert ours.input_spec[name] == ref.input_spec[name], name


class Replay:
    """A policy writing a fixed sequence of actions, one per call."""

    def __init__(self, actions):
        self.actions, self.t = actions, 0

    def __call__(self, td):
        td.set("action", self.actions[self.t].clone())
        self.t += 1
        return td


def _actions(spec, steps, seed=0):
    torch.manual_seed(seed)
    return torch.stack([spec.rand() for _ in range(steps)])


# -- specs ----------------------------------------------------------------------------------------


def test_specs_pass_check_env_specs_and_equal_a_serial_env_of_gym_envs(envs):
    env = envs(ParallelEnv(N, CARTPOLE, device="cpu", num_processes=2))
    ref = _serial(envs, functools.partial(GymEnv, "CartPole-v1"))
    assert env.batch_size == torch.Size([N]) and env.device == torch.device("cpu")
    assert env.num_processes == 2
    check_env_specs(env)
    assert_specs_equal(env, ref)
    td = env.reset()
    assert td["observation"].shape == (N, 4) and td["observation"].dtype == torch.float32
    assert td["done"].shape == (N, 1) and td["done"].dtype == torch.bool and not td["done"].any()
    # a gymnasium factory keeps torch out of the workers
    assert env._vec._apply(lambda e: "torch" in sys.modules) == [False] * N


# -- bit-identical to TorchRL's own SerialEnv -----------------------------------------------------


@pytest.mark.parametrize("env_id, steps", [
    ("CartPole-v1", 300),  # ~15 terminations per env
    ("Pendulum-v1", 230),  # a Box action; truncated at step 200
])
def test_rollout_is_bit_identical_to_serial_env_across_episode_ends(envs, env_id, steps):
    env = envs(ParallelEnv(N, functools.partial(gym.make, env_id), num_processes=2))
    ref = _serial(envs, functools.partial(GymEnv, env_id))
    assert_specs_equal(env, ref)
    assert env.set_seed(11) == ref.set_seed(11)
    actions = _actions(env.action_spec, steps)
    ours = env.rollout(steps, Replay(actions), break_when_any_done=False)
    theirs = ref.rollout(steps, Replay(actions), break_when_any_done=False)
    assert_td_identical(ours, theirs, env_id)
    ends = theirs["next", "truncated" if env_id == "Pendulum-v1" else "terminated"]
    assert ends.sum() >= N, "the rollout must cross episode ends"


def test_dict_observations_and_multidiscrete_actions_are_bit_identical(envs):
    obs_space = spaces.Dict({"state": spaces.Box(-1, 1, (2,), np.float32), "d": spaces.Discrete(5),
                             "mb": spaces.MultiBinary(3)})
    make = functools.partial(SpaceEnv, obs_space, spaces.MultiDiscrete([3, 4]))
    env = envs(ParallelEnv(N, make, num_processes=1))
    ref = _serial(envs, lambda: GymWrapper(make()))
    check_env_specs(env)
    assert_specs_equal(env, ref)
    assert set(env.observation_spec.keys()) == {"observation", "d", "mb"}  # "state" renamed as GymWrapper does
    assert env.set_seed(5) == ref.set_seed(5)
    actions = _actions(env.action_spec, 30)
    assert_td_identical(env.rollout(30, Replay(actions), break_when_any_done=False),
                        ref.rollout(30, Replay(actions), break_when_any_done=False))


def test_a_gym_env_factory_is_unwrapped_in_the_worker_and_keeps_its_specs(envs):
    make = functools.partial(GymEnv, "CartPole-v1", categorical_action_encoding=True)
    env = envs(ParallelEnv(2, make, num_processes=1))
    ref = _serial(envs, make, n=2)
    assert_specs_equal(env, ref)
    assert env.action_spec.shape == (2,)  # Categorical, as that GymEnv declares
    # the worker steps the gymnasium env the GymEnv wrapped (it imported torchrl to build it)
    assert env._vec._apply(lambda e: type(e).__name__) == ["TimeLimit"] * 2
    assert env.set_seed(2) == ref.set_seed(2)
    actions = _actions(env.action_spec, 40)
    assert_td_identical(env.rollout(40, Replay(actions), break_when_any_done=False),
                        ref.rollout(40, Replay(actions), break_when_any_done=False))


# -- reset, step_and_maybe_reset, set_seed --------------------------------------------------------


def test_reset_mask_resets_only_the_marked_envs(envs):
    env = envs(ParallelEnv(N, CARTPOLE, num_processes=2))
    ref = _serial(envs, functools.partial(GymEnv, "CartPole-v1"))
    env.set_seed(3), ref.set_seed(3)
    actions = _actions(env.action_spec, 12)
    td, td_ref = env.reset(), ref.reset()
    for t in range(5):
        _, td = env.step_and_maybe_reset(td.set("action", actions[t]))
        _, td_ref = ref.step_and_maybe_reset(td_ref.set("action", actions[t]))
    before = td["observation"].clone()
    mask = torch.tensor([[True], [False], [True]])
    td = env.reset(td.clone().set("_reset", mask))
    td_ref = ref.reset(td_ref.clone().set("_reset", mask))
    assert_td_identical(td, td_ref, "partial reset")
    assert torch.equal(td["observation"][1], before[1]), "env 1 was not marked and must keep its observation"
    assert not torch.equal(td["observation"][0], before[0]) and not torch.equal(td["observation"][2], before[2])
    # nothing marked: nothing resets
    td = env.reset(td.clone().set("_reset", torch.zeros(N, 1, dtype=torch.bool)))
    td_ref = ref.reset(td_ref.clone().set("_reset", torch.zeros(N, 1, dtype=torch.bool)))
    assert_td_identical(td, td_ref, "empty reset")
    # and env 1 goes on with its episode: the next steps still match
    for t in range(5, 12):
        out, td = env.step_and_maybe_reset(td.set("action", actions[t]))
        out_ref, td_ref = ref.step_and_maybe_reset(td_ref.set("action", actions[t]))
        assert_td_identical(out, out_ref, f"step {t}")
        assert_td_identical(td, td_ref, f"next root {t}")


def test_set_seed_returns_torchrl_next_seed_and_reproduces_rollouts(envs):
    env = envs(ParallelEnv(N, CARTPOLE, num_processes=1))
    ref = _serial(envs, functools.partial(GymEnv, "CartPole-v1"))
    assert env.set_seed(123) == ref.set_seed(123)
    assert env.set_seed(123, static_seed=True) == ref.set_seed(123, static_seed=True) == 123
    actions = _actions(env.action_spec, 50)
    runs = []
    for seed in (7, 7, 8):
        env.set_seed(seed)
        runs.append(env.rollout(50, Replay(actions), break_when_any_done=False))
    assert_td_identical(runs[1], runs[0], "same seed")
    assert not torch.equal(runs[2]["observation"], runs[0]["observation"]), "another seed, other episodes"
    # reset(seed=...) goes to every sub-env, as in TorchRL's batched envs
    assert_td_identical(env.reset(seed=4), ref.reset(seed=4), "reset(seed=4)")


def test_set_seed_takes_seeds_of_2_64_or_more_as_torchrl_does(envs):
    """A seed of 2**64 or more (the first sub-env's; TorchRL's seed_generator gives the others
    seeds below 2**32) seeds as in TorchRL's SerialEnv of GymEnvs, and so does reset(seed=...)."""
    env = envs(ParallelEnv(N, CARTPOLE, num_processes=1))
    ref = _serial(envs, functools.partial(GymEnv, "CartPole-v1"))
    assert env.set_seed(2**70) == ref.set_seed(2**70)
    actions = _actions(env.action_spec, 30)
    assert_td_identical(env.rollout(30, Replay(actions), break_when_any_done=False),
                        ref.rollout(30, Replay(actions), break_when_any_done=False), "set_seed(2**70)")
    assert_td_identical(env.reset(seed=2**64), ref.reset(seed=2**64), "reset(seed=2**64)")


# -- collectors -----------------------------------------------------------------------------------


def test_sync_data_collector_yields_batches_of_the_expected_shape(envs):
    env = envs(ParallelEnv(2, CARTPOLE, num_processes=1))
    collector = SyncDataCollector(TransformedEnv(env, StepCounter()), None, frames_per_batch=16, total_frames=64)
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 4
    for batch in batches:
        assert batch.batch_size == (2, 8)
        assert batch["next", "observation"].shape == (2, 8, 4)
        assert batch["action"].shape == (2, 8, 2)
    steps = torch.cat([b["step_count"] for b in batches], 1).squeeze(-1)
    assert int(steps.max()) >= 8, "collection goes on across batches"


@pytest.mark.parametrize("multi_collector", [MultiSyncDataCollector, MultiaSyncDataCollector])
def test_multi_process_collectors_run_one_env_per_collector_process(multi_collector):
    # MultiaSyncDataCollector is the documented overlap of policy and envs (docs/TORCHRL.md).
    make = functools.partial(ParallelEnv, 2, CARTPOLE, num_processes=1)
    collector = multi_collector([make, make], None, frames_per_batch=16, total_frames=32)
    try:
        batches = list(collector)
    finally:
        collector.shutdown()
    assert len(batches) == 2
    for batch in batches:
        assert batch.numel() == 16
        assert batch["next", "observation"].shape == (*batch.batch_size, 4)
        assert not batch["next", "observation"].isnan().any()


# -- device ---------------------------------------------------------------------------------------


def test_a_cuda_device_torch_does_not_see_is_refused():
    if torch.cuda.is_available():
        pytest.skip("torch sees a CUDA device: the refusal is checked where it sees none")
    with pytest.raises(ValueError, match="torch sees no CUDA device"):
        ParallelEnv(2, CARTPOLE, device="cuda")


def _fixed_rollout(env, steps):
    """A rollout of ``env`` seeded with 7 under actions that depend on the step count only."""
    env.set_seed(7)
    count = iter(range(steps))

    def policy(td):
        t = next(count)
        return td.set("action", env.action_spec.encode(torch.tensor([t % 2, 1 - t % 2])).to(td.device))

    return env.rollout(steps, policy=policy, break_when_any_done=False)


def test_fixed_rollouts_are_reproducible(envs):
    # The comparison the CUDA test makes, checked on the CPU everywhere.
    a, b = (_fixed_rollout(envs(ParallelEnv(2, CARTPOLE, num_processes=1)), 60) for _ in range(2))
    assert (a == b).all() and bool(a["next", "done"].any()), "the rollout must cross an episode end"


def test_cuda_device_returns_tensors_on_the_gpu(envs):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: device='cuda' is checked where torch sees a GPU")
    env = envs(ParallelEnv(2, CARTPOLE, device="cuda", num_processes=1))
    assert env._vec._slots.device is not None, "a CUDA device uses the vector env's pinned staging"
    data = env.rollout(5, break_when_any_done=False)
    assert data["next", "observation"].device.type == "cuda"
    check_env_specs(env)
    # The same rollout as on the CPU, bit for bit, under a fixed action sequence.
    cpu = envs(ParallelEnv(2, CARTPOLE, num_processes=1))
    first, second = (_fixed_rollout(e, 60).cpu() for e in (env, cpu))
    assert (first == second).all()


# -- close ----------------------------------------------------------------------------------------


def test_close_stops_the_workers_and_later_use_raises():
    threads = torch.get_num_threads()
    env = ParallelEnv(N, CARTPOLE, num_processes=2)
    # as torchrl.envs.ParallelEnv, torch leaves a core to each worker process while they run
    assert torch.get_num_threads() == max(1, threads - 2)
    pids = env._vec._pool.worker_pids()
    assert len(pids) == 2
    td = env.reset()
    env.close()
    assert env.is_closed
    assert torch.get_num_threads() == threads
    assert wait_pids_gone(pids, timeout=2.0) == []
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()
    with pytest.raises(RuntimeError, match="closed"):
        env.step(td.set("action", env.action_spec.rand()))
    with pytest.raises(RuntimeError, match="closed"):
        env.set_seed(0)
    with pytest.raises(RuntimeError, match="closed"):
        env.close()
    env.close(raise_if_closed=False)


# -- bad arguments --------------------------------------------------------------------------------


class _NotAnEnv:
    pass


def _vector_env():
    return gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")


def _text_env():
    return SpaceEnv(spaces.Text(5))


@pytest.mark.parametrize("args, kwargs, error, match", [
    ((0, CARTPOLE), {}, ValueError, "num_workers must be at least 1"),
    ((2.0, CARTPOLE), {}, TypeError, "num_workers must be an int"),
    ((2, "CartPole-v1"), {}, TypeError, "create_env_fn must be a callable"),
    ((2, [CARTPOLE] * 3), {}, ValueError, "create_env_fn has 3 elements, expected num_workers"),
    ((2, CARTPOLE), {"create_env_kwargs": [{}]}, ValueError, "create_env_kwargs has 1 elements"),
    ((2, CARTPOLE), {"create_env_kwargs": "x"}, TypeError, "create_env_kwargs must be a dict"),
    ((2, CARTPOLE), {"num_processes": 3}, ValueError, "num_processes must be an integer from 1 to num_workers"),
    ((2, CARTPOLE), {"device": "nonsense"}, ValueError, "device must be None"),
    ((2, CARTPOLE), {"device": "xpu:0"}, ValueError, "the CPU or a CUDA device, not 'xpu'"),
    ((2, CARTPOLE), {"device": "meta"}, ValueError, "the CPU or a CUDA device, not 'meta'"),
    ((2, CARTPOLE), {"num_threads": 0}, ValueError, "num_threads must be a positive integer"),
    ((2, CARTPOLE), {"pin_memory": True}, ValueError, "pin_memory=True is not supported"),
    ((2, CARTPOLE), {"num_envs": 4}, TypeError, "unexpected keyword argument 'num_envs'"),
    ((2, _NotAnEnv), {}, TypeError, "returned a .*_NotAnEnv; create_env_fn must return a gymnasium.Env"),
    ((2, _vector_env), {}, TypeError, "returned a vector env"),
    ((2, lambda: TransformedEnv(GymEnv("CartPole-v1"), StepCounter())), {}, TypeError,
     "Transforms go around the ParallelEnv"),
    ((2, functools.partial(GymEnv, "CartPole-v1", frame_skip=2)), {}, ValueError, "frame_skip=2"),
    ((2, _text_env), {}, ValueError, "observation space Text.* is not supported"),
    ((2, functools.partial(SpaceEnv, spaces.Discrete(2), spaces.Tuple([spaces.Discrete(2)]))), {}, ValueError,
     "action space Tuple.* is not supported"),
])
def test_bad_arguments_raise_clear_errors_before_any_worker_starts(args, kwargs, error, match):
    from vec_asserts import child_pids
    before = child_pids()
    with pytest.raises(error, match=match):
        ParallelEnv(*args, **kwargs)
    assert child_pids() == before, "no worker process may start"


def test_partial_steps_and_reset_kwargs_are_refused(envs):
    env = envs(ParallelEnv(2, CARTPOLE, num_processes=1))
    td = env.reset()
    with pytest.raises(TypeError, match="takes only seed and options"):
        env.reset(foo=1)
    with pytest.raises(NotImplementedError, match="partial '_step'"):
        env.step(td.set("action", env.action_spec.rand()).set("_step", torch.tensor([True, False])))
    assert isinstance(env.reset(TensorDict({}, [2])), TensorDict)


def test_module_docstring_example_runs():
    import doctest

    import ringenv.torchrl

    result = doctest.testmod(ringenv.torchrl, verbose=False)
    assert result.attempted >= 4, "the module docstring lost its example"
    assert result.failed == 0
