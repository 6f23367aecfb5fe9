"""Every observation and action space Gymnasium's AsyncVectorEnv takes: ringenv returns exactly
what gymnasium.vector.SyncVectorEnv returns (values, dtypes, shapes, container types, infos), with
shared memory or without, and its spaces equal Sync's. Spaces that cannot live in a fixed-size
slot (Sequence, Graph, custom Space subclasses) go through the pickled path."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from gymnasium.spaces import Box, Dict, Discrete, Graph, MultiBinary, MultiDiscrete, OneOf, Sequence, Text, Tuple
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_differing_spaces, batch_space

import ringenv
from helper_envs import ColourSpace, SpaceEnv
from ringenv.errors import WorkerStartupError
from vec_compare import (
    assert_spaces_match,
    assert_vec_reset_identical,
    assert_step_identical,
    make_ours,
    make_ref,
    run_lockstep,
)

N = 3  # two workers: one steps 2 envs, the other 1
STEPS = 25
SEED = 5

_INT32, _UINT32 = np.iinfo(np.int32), np.iinfo(np.uint32)

# Observation spaces, by id; each entry builds a fresh space.
OBS_SPACES = {
    # Box, every dtype Gymnasium allows
    "box-float16": lambda: Box(-2.0, 2.0, (3,), np.float16),
    "box-float32": lambda: Box(-1.0, 1.0, (2, 3), np.float32),
    "box-float32-scalar": lambda: Box(0.0, 1.0, (), np.float32),
    "box-float64-unbounded": lambda: Box(-np.inf, np.inf, (4,), np.float64),
    "box-int8": lambda: Box(-128, 127, (5,), np.int8),
    "box-int16": lambda: Box(-1000, 1000, (2, 2), np.int16),
    "box-int32": lambda: Box(_INT32.min, _INT32.max, (3,), np.int32),
    "box-int64": lambda: Box(-(2**40), 2**40, (3,), np.int64),
    "box-uint8-image": lambda: Box(0, 255, (4, 4, 3), np.uint8),
    "box-uint16": lambda: Box(0, 60000, (3,), np.uint16),
    "box-uint32": lambda: Box(0, _UINT32.max, (3,), np.uint32),
    "box-uint64": lambda: Box(0, 2**50, (3,), np.uint64),
    "box-bool": lambda: Box(0, 1, (6,), np.bool_),
    # Discrete, MultiDiscrete, MultiBinary
    "discrete-start": lambda: Discrete(5, start=-2),
    "discrete-int16-start": lambda: Discrete(6, start=10, dtype=np.int16),
    "multidiscrete": lambda: MultiDiscrete([3, 4, 5]),
    "multidiscrete-2d-start": lambda: MultiDiscrete([[2, 3], [4, 5]], start=[[-1, 0], [1, 2]]),
    "multidiscrete-int32": lambda: MultiDiscrete([7, 2], dtype=np.int32),
    "multibinary": lambda: MultiBinary(5),
    "multibinary-2d": lambda: MultiBinary([2, 3]),
    # Text
    "text": lambda: Text(max_length=8),
    "text-charset": lambda: Text(max_length=6, min_length=2, charset="abcxyz"),
    # Dict and Tuple, nested
    "dict": lambda: Dict({"pos": Box(-1.0, 1.0, (2,), np.float32), "id": Discrete(4)}),
    "tuple": lambda: Tuple((Discrete(3), Box(0.0, 1.0, (2,), np.float64))),
    "dict-of-tuple": lambda: Dict({
        "z_pair": Tuple((Box(-5, 5, (2,), np.int16), Discrete(2, start=1))),
        "a_inner": Dict({"bits": MultiBinary(3), "word": Text(5), "grid": Box(0, 255, (2, 2), np.uint8)}),
        "m_counts": MultiDiscrete([2, 3]),
    }, sort_keys=False),
    "tuple-of-dict": lambda: Tuple((Dict({"x": Box(-1.0, 1.0, (1,), np.float64)}), Text(3, charset="01"))),
    "oneof": lambda: OneOf((Discrete(3), Box(-1.0, 1.0, (2,), np.float32))),
    # The pickled path: dynamic shapes and a custom Space subclass
    "sequence": lambda: Sequence(Box(0.0, 1.0, (2,), np.float32)),
    "sequence-stacked": lambda: Sequence(Discrete(4), stack=True),
    "graph": lambda: Graph(node_space=Box(0.0, 1.0, (3,), np.float32), edge_space=Discrete(3)),
    "custom": lambda: ColourSpace(),
    "dict-with-custom": lambda: Dict({
        "image": Box(0, 255, (3, 3, 3), np.uint8), "direction": Discrete(4), "mission": ColourSpace(),
    }),
    # Split: the Box and Text values in the slot, the custom one and the Dict holding one pickled
    "dict-with-nested-custom": lambda: Dict({
        "z_grid": Box(-3, 3, (2, 2), np.int16), "inner": Dict({"colour": ColourSpace(), "n": Discrete(3)}),
        "a_word": Text(3, charset="ab"), "colour": ColourSpace(),
    }, sort_keys=False),
}

# Action spaces, by id (the observation space is a float32 Box).
ACT_SPACES = {
    "box-float32": lambda: Box(-1.0, 1.0, (2,), np.float32),
    "box-float64-2d": lambda: Box(-3.0, 3.0, (2, 2), np.float64),
    "box-int16": lambda: Box(-10, 10, (3,), np.int16),
    "discrete-start": lambda: Discrete(4, start=-1),
    "multidiscrete-start": lambda: MultiDiscrete([3, 2, 4], start=[1, -1, -5]),
    "multibinary": lambda: MultiBinary(3),
    "dict": lambda: Dict({"move": Box(-1.0, 1.0, (2,), np.float32), "fire": Discrete(2)}),
    "tuple": lambda: Tuple((Discrete(3), MultiBinary(2))),
    "text": lambda: Text(4, charset="abcd"),
}

# Spaces whose final observations (SAME_STEP) and masked resets (DISABLED) are checked too.
AUTORESET_SPACES = ["discrete-start", "text", "dict-of-tuple", "sequence", "dict-with-custom"]


def _pair(closing, env_fns, shared_memory=True, **kwargs):
    ours = closing(make_ours(env_fns, shared_memory=shared_memory, **kwargs))
    ref = closing(make_ref(env_fns, **kwargs))
    return ours, ref


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "pickled"])
@pytest.mark.parametrize("space_id", list(OBS_SPACES))
def test_observation_space_matches_sync(closing, space_id, shared_memory):
    env_fn = functools.partial(SpaceEnv, OBS_SPACES[space_id]())
    ours, ref = _pair(closing, [env_fn] * N, shared_memory)
    assert_spaces_match(ours, ref)
    ends = run_lockstep(ours, ref, seed=SEED, steps=STEPS)
    assert ends > 0  # episodes last at most 6 steps: next-step autoresets were exercised


#: Observations a worker process pickles (no fixed layout), and one it writes into the slot.
PICKLED_PATH_SPACES = ["sequence", "sequence-stacked", "graph", "custom", "dict-with-custom",
                       "dict-with-nested-custom", "text"]


@pytest.mark.parametrize("num_workers", [0, 1])
@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.value)
@pytest.mark.parametrize("space_id", PICKLED_PATH_SPACES)
def test_the_inline_share_hands_over_what_a_worker_would_pickle_with_syncs_results(closing, space_id, mode,
                                                                                    num_workers):
    # The share's observations of the pickled path and its infos reach the vector env as the
    # env's own objects (never pickled), through the same slots, masks and autoreset modes.
    env_fn = functools.partial(SpaceEnv, OBS_SPACES[space_id]())
    ours = closing(ringenv.AsyncVectorEnv([env_fn] * N, num_workers=num_workers, inline=True, autoreset_mode=mode))
    assert ours._pool.inline_worker == num_workers
    ref = closing(make_ref([env_fn] * N, autoreset_mode=mode))
    assert_spaces_match(ours, ref)
    assert run_lockstep(ours, ref, seed=SEED, steps=STEPS, autoreset_mode=mode) > 0


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "pickled"])
@pytest.mark.parametrize("space_id", list(ACT_SPACES))
def test_action_space_matches_sync(closing, space_id, shared_memory):
    env_fn = functools.partial(SpaceEnv, Box(-1.0, 1.0, (3,), np.float32), ACT_SPACES[space_id]())
    ours, ref = _pair(closing, [env_fn] * N, shared_memory)
    assert_spaces_match(ours, ref)
    assert_vec_reset_identical(ours.reset(seed=SEED), ref.reset(seed=SEED))
    ref.action_space.seed(SEED)
    for t in range(STEPS):
        actions = ref.action_space.sample()
        assert ours.action_space.contains(actions)
        out, ref_out = ours.step(actions), ref.step(actions)
        # The envs got actions in their action space, of the types Sync hands them (np.int64 for
        # Discrete, ndarray of the space's dtype for Box, dict, tuple, str) ...
        # (Envs that autoreset on this step took no action: their infos come from reset.)
        if "action_ok" in ref_out[4]:
            stepped = out[4]["_action_ok"]
            assert out[4]["action_ok"][stepped].all(), f"step {t}: action_ok {out[4]['action_ok']}"
            assert out[4]["action_type"].tolist() == ref_out[4]["action_type"].tolist(), f"step {t}"
        # ... and with their values intact (the rewards are weighted sums of the flattened action).
        assert_step_identical(out, ref_out, f"step {t}")


#: Views of a C-ordered batch of actions that hold the same values in other memory: what a step
#: must hand the envs unchanged (a batch in the leaf's own dtype crosses as its bytes, in C order).
ACTION_LAYOUTS = {
    "fortran": np.asfortranarray,
    "strided": lambda a: np.repeat(a, 2, axis=0)[::2],
    "read-only": lambda a: np.lib.stride_tricks.as_strided(a, writeable=False),
    "reversed": lambda a: a[::-1].copy()[::-1],
}


@pytest.mark.parametrize("layout", list(ACTION_LAYOUTS))
@pytest.mark.parametrize("space_id", ["box-float64-2d", "multidiscrete-start", "multibinary", "discrete-start"])
def test_actions_in_any_memory_layout_reach_the_envs_as_in_sync(closing, space_id, layout):
    env_fn = functools.partial(SpaceEnv, Box(-1.0, 1.0, (3,), np.float32), ACT_SPACES[space_id]())
    ours, ref = _pair(closing, [env_fn] * N)
    checked = closing(make_ours([env_fn] * N, check_actions=True))
    assert_vec_reset_identical(ours.reset(seed=SEED), ref.reset(seed=SEED))
    checked.reset(seed=SEED)
    ref.action_space.seed(SEED)
    for t in range(STEPS):
        actions = np.ascontiguousarray(ref.action_space.sample())
        viewed = ACTION_LAYOUTS[layout](actions)
        assert np.array_equal(viewed, actions) and viewed.dtype == actions.dtype
        assert layout == "read-only" or not viewed.flags.c_contiguous or actions.ndim == 1
        ref_out = ref.step(actions)
        assert_step_identical(ours.step(viewed), ref_out, f"step {t}")
        assert_step_identical(checked.step(viewed), ref_out, f"step {t}, checked")


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "pickled"])
@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED], ids=["same-step", "disabled"])
@pytest.mark.parametrize("space_id", AUTORESET_SPACES)
def test_observation_space_autoreset_modes_match_sync(closing, space_id, mode, shared_memory):
    env_fn = functools.partial(SpaceEnv, OBS_SPACES[space_id]())
    ours, ref = _pair(closing, [env_fn] * N, shared_memory, autoreset_mode=mode)
    assert_spaces_match(ours, ref)
    ends = run_lockstep(ours, ref, seed=SEED, steps=STEPS, autoreset_mode=mode)
    assert ends > 0


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "pickled"])
def test_observation_mode_different_box_bounds(closing, shared_memory):
    # Same shape and dtype, bounds that differ from env to env.
    env_fns = [functools.partial(SpaceEnv, Box(-(i + 1.0), i + 1.0, (3,), np.float32)) for i in range(N)]
    ours, ref = _pair(closing, env_fns, shared_memory, observation_mode="different")
    assert_spaces_match(ours, ref)
    assert ours.single_observation_space == Box(-1.0, 1.0, (3,), np.float32)  # env 0's
    expected = batch_differing_spaces([Box(-(i + 1.0), i + 1.0, (3,), np.float32) for i in range(N)])
    assert ours.observation_space == expected
    assert not ours.observation_space == batch_space(ours.single_observation_space, N)
    run_lockstep(ours, ref, seed=SEED, steps=STEPS)


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "pickled"])
def test_observation_mode_different_dict_bounds(closing, shared_memory):
    def space(i):
        return Dict({"x": Box(-(i + 1.0), i + 1.0, (2,), np.float64), "k": Discrete(3 + i)})

    env_fns = [functools.partial(SpaceEnv, space(i)) for i in range(N)]
    ours, ref = _pair(closing, env_fns, shared_memory, observation_mode="different")
    assert_spaces_match(ours, ref)
    assert ours.observation_space == batch_differing_spaces([space(i) for i in range(N)])
    run_lockstep(ours, ref, seed=SEED, steps=STEPS)


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "pickled"])
def test_observation_mode_given_spaces(closing, shared_memory):
    # Gymnasium 1.4 takes a custom observation space as the pair
    # (batched observation_space, single_observation_space); the sub-envs' spaces must share
    # their shape and dtype.
    single = Box(-10.0, 10.0, (3,), np.float32)
    batched = Box(-10.0, 10.0, (N, 3), np.float32)
    env_fn = functools.partial(SpaceEnv, Box(-1.0, 1.0, (3,), np.float32))
    ours, ref = _pair(closing, [env_fn] * N, shared_memory, observation_mode=(batched, single))
    assert_spaces_match(ours, ref)
    assert ours.single_observation_space == single
    assert ours.observation_space == batched
    run_lockstep(ours, ref, seed=SEED, steps=STEPS)


# -- sub-envs whose spaces differ ---------------------------------------------------------------


def _dict_space(k):
    return Dict({"x": Box(-1.0, 1.0, (2,), np.float32), "k": Discrete(k)})


def test_differing_dict_observation_spaces_raise_worker_startup_error():
    env_fns = [functools.partial(SpaceEnv, _dict_space(3 if i != 2 else 4)) for i in range(N)]
    with pytest.raises(WorkerStartupError, match=r"env 2\b") as info:
        make_ours(env_fns, startup_timeout=30.0)
    assert "observation space" in str(info.value)


def test_differing_action_spaces_raise_worker_startup_error():
    obs = Box(-1.0, 1.0, (3,), np.float32)
    env_fns = [functools.partial(SpaceEnv, obs, Discrete(3 if i != 1 else 4, start=-1)) for i in range(N)]
    with pytest.raises(WorkerStartupError, match=r"env 1\b") as info:
        make_ours(env_fns, startup_timeout=30.0)
    assert "action space" in str(info.value)


def test_observation_mode_different_with_differing_shapes_raises():
    env_fns = [functools.partial(SpaceEnv, Box(-1.0, 1.0, (3 if i != 1 else 4,), np.float32)) for i in range(N)]
    with pytest.raises((WorkerStartupError, ValueError)):
        make_ours(env_fns, observation_mode="different", startup_timeout=30.0)

