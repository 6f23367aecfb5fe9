"""Where observations go (ringenv._layout.observation_layout): a Dict space of which some values
have a fixed layout and others not (MiniGrid's and BabyAI's: an image, a direction, a custom
MissionSpace) is split: the values with a layout go into the segment, the others travel pickled
as one dict per env, and the batch puts them back together in the space's key order, equal to
what Gymnasium's SyncVectorEnv returns, through a worker process and through this process's share
(asynchronous batches of a split Dict: tests/python/test_async_batches.py)."""

from __future__ import annotations

import collections
import copy
import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv
from helper_envs import ColourSpace, SpaceEnv
from vec_asserts import assert_tree_identical

import ringenv
from ringenv import _layout

N = 4

#: MiniGrid's observation in form: its keys in an order that is not sorted, a custom value.
MINIGRID_LIKE = spaces.Dict(collections.OrderedDict([
    ("image", spaces.Box(0, 255, (3, 3, 3), np.uint8)),
    ("mission", ColourSpace()),
    ("direction", spaces.Discrete(4)),
]))

#: A custom value nested in a Dict value (that value travels pickled whole) beside a Text leaf.
NESTED = spaces.Dict(collections.OrderedDict([
    ("z_word", spaces.Text(4, charset="abc")),
    ("inner", spaces.Dict({"colour": ColourSpace(), "n": spaces.Discrete(3)})),
    ("a_grid", spaces.Box(-3, 3, (2, 2), np.int16)),
    ("colour", ColourSpace()),
]))


def test_a_dict_with_custom_values_is_split_in_its_key_order():
    layout = _layout.observation_layout(MINIGRID_LIKE, N, 1)
    assert layout is not None
    assert list(layout.space.spaces) == ["image", "direction"]
    assert list(layout.pickled.spaces) == ["mission"]
    assert layout.leaves == _layout.plan(layout.space, N)
    assert layout.leaves == [("uint8", [27]), ("int64", [1])]


def test_a_nested_custom_value_makes_its_whole_top_level_value_pickled():
    layout = _layout.observation_layout(NESTED, N, 1)
    assert layout is not None
    assert list(layout.space.spaces) == ["z_word", "a_grid"]
    assert list(layout.pickled.spaces) == ["inner", "colour"]


@pytest.mark.parametrize("space", [
    spaces.Box(0.0, 1.0, (3,), np.float32),
    spaces.Dict({"a": spaces.Discrete(3), "b": spaces.Text(2)}),
], ids=["box", "dict-of-layouts"])
def test_a_space_with_a_layout_is_not_split(space):
    layout = _layout.observation_layout(space, N, 1)
    assert layout is not None and layout.pickled is None and layout.space is space
    assert layout.leaves == _layout.plan(space, N)


@pytest.mark.parametrize("space", [
    ColourSpace(),
    spaces.Dict({"a": ColourSpace(), "b": spaces.Sequence(spaces.Discrete(2))}),
    spaces.Tuple((spaces.Discrete(3), ColourSpace())),  # only a Dict is split
], ids=["custom", "dict-of-custom", "tuple"])
def test_a_space_with_nothing_to_lay_out_travels_pickled_whole(space):
    assert _layout.observation_layout(space, N, 1) is None


@pytest.mark.parametrize("space", [MINIGRID_LIKE, NESTED], ids=["minigrid-like", "nested"])
@pytest.mark.parametrize("kwargs", [{}, {"inline": False}, {"num_workers": 0}, {"copy": False},
                                    {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}],
                         ids=["default", "workers-only", "in-process", "no-copy", "same-step"])
def test_split_observations_equal_sync_vector_envs(closing, space, kwargs):
    fns = [functools.partial(SpaceEnv, space) for _ in range(N)]
    ours = closing(ringenv.AsyncVectorEnv(fns, **kwargs))
    ref = closing(SyncVectorEnv(fns, **{k: v for k, v in kwargs.items() if k in ("copy", "autoreset_mode")}))
    assert ours.observation_space == ref.observation_space
    assert ours._slots.obs_read is not None  # the values with a layout are read from the segment
    got, want = ours.reset(seed=5), ref.reset(seed=5)
    assert_tree_identical(got[0], want[0], what="reset")
    rng = np.random.default_rng(0)
    for t in range(30):
        actions = rng.integers(0, 3, N)
        got, want = ours.step(actions), ref.step(actions)
        assert list(got[0]) == list(space.spaces)  # the space's key order, as Gymnasium batches it
        for k in range(4):
            assert_tree_identical(got[k], want[k], what=f"step {t}, result {k}")


#: Spaces past the segment's limits (``MAX_LEAVES`` leaves with the action's, ``MAX_NDIM``
#: dimensions of a leaf's row): before, the vector env refused them ("invalid pool layout").
MANY_LEAVES = spaces.Dict(collections.OrderedDict(
    (f"k{i:02d}", spaces.Box(-1.0, 1.0, (2,), np.float32) if i % 2 else spaces.Discrete(3)) for i in range(40)))
TUPLE_OF_40 = spaces.Tuple([spaces.Discrete(3)] * 40)
NINE_DIMS = spaces.Box(-1.0, 1.0, (1, 2, 1, 1, 1, 1, 1, 1, 2), np.float32)


def test_a_dict_of_more_leaves_than_the_segment_holds_is_split_where_they_stop_fitting():
    layout = _layout.observation_layout(MANY_LEAVES, N, 1)
    assert list(layout.space.spaces) == [f"k{i:02d}" for i in range(31)]  # 31 + the action's leaf
    assert list(layout.pickled.spaces) == [f"k{i:02d}" for i in range(31, 40)]
    assert len(_layout.observation_layout(MANY_LEAVES, N, 0).space.spaces) == 32
    assert _layout.observation_layout(TUPLE_OF_40, N, 1) is None  # only a Dict is split
    assert _layout.plan(NINE_DIMS, N) == [("float32", [4])]  # laid out as its element count


@pytest.mark.parametrize("space, action_space", [
    (MANY_LEAVES, None), (TUPLE_OF_40, None), (NINE_DIMS, None),
    (spaces.Discrete(3), NINE_DIMS),  # an action leaf of nine dimensions
], ids=["dict-of-40", "tuple-of-40", "box-of-9-dims", "action-of-9-dims"])
@pytest.mark.parametrize("kwargs", [{}, {"inline": False}, {"copy": False}], ids=["default", "workers-only", "no-copy"])
def test_spaces_past_the_segments_limits_step_as_in_sync_vector_env(closing, space, action_space, kwargs):
    fns = [functools.partial(SpaceEnv, space, action_space) for _ in range(N)]
    ours = closing(ringenv.AsyncVectorEnv(fns, **kwargs))
    ref = closing(SyncVectorEnv(fns, **{k: v for k, v in kwargs.items() if k == "copy"}))
    got, want = ours.reset(seed=2), ref.reset(seed=2)
    assert_tree_identical(got[0], want[0], what="reset")
    ref.action_space.seed(1)
    for t in range(12):
        actions = ref.action_space.sample()
        got, want = ours.step(actions), ref.step(actions)
        for k in range(5):
            assert_tree_identical(got[k], want[k], what=f"step {t}, result {k}")


#: MINIGRID_LIKE with an image whose batch is lent rather than copied (ringenv._leases: 64 KiB or more).
BIG_IMAGE = spaces.Dict(collections.OrderedDict([
    ("image", spaces.Box(0, 255, (96, 96, 3), np.uint8)), ("mission", ColourSpace()), ("direction", spaces.Discrete(4)),
]))


@pytest.mark.parametrize("space,lent", [(MINIGRID_LIKE, False), (BIG_IMAGE, True)], ids=["copied", "lent"])
def test_held_batches_stay_as_they_were_returned(closing, space, lent):
    # copy=True (the default): no later step changes a batch the caller holds, in either part.
    fns = [functools.partial(SpaceEnv, space) for _ in range(N)]
    ours = closing(ringenv.AsyncVectorEnv(fns))
    assert (ours._slots.leases is not None) == lent
    held = [ours.reset(seed=1)[0]]
    snapshots = [copy.deepcopy(held[0])]
    for t in range(12):
        obs = ours.step(np.full(N, t % 3))[0]
        held.append(obs)
        snapshots.append(copy.deepcopy(obs))
    for t, (obs, snap) in enumerate(zip(held, snapshots)):
        assert_tree_identical(obs, snap, what=f"batch {t}")


class _NoMission(gym.Env):
    """MINIGRID_LIKE's env whose step observation lacks the ``mission`` key."""

    observation_space = MINIGRID_LIKE
    action_space = spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        return {"image": np.zeros((3, 3, 3), np.uint8), "mission": "red", "direction": 0}, {}

    def step(self, action):
        return {"image": np.zeros((3, 3, 3), np.uint8), "direction": 1}, 0.0, False, False, {}


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_missing_pickled_key_raises_keyerror_as_sync_vector_env_does(closing, num_workers):
    ref = closing(SyncVectorEnv([_NoMission] * 2))
    ref.reset()
    with pytest.raises(KeyError):
        ref.step(np.zeros(2, np.int64))
    ours = closing(ringenv.AsyncVectorEnv([_NoMission] * 2, num_workers=num_workers, inline=True))
    ours.reset()
    with pytest.raises(KeyError, match="mission"):
        ours.step(np.zeros(2, np.int64))


@pytest.mark.parametrize("empty", [spaces.Dict({}), spaces.Tuple(())], ids=["dict", "tuple"])
@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_dict_whose_only_laid_values_are_empty_travels_pickled_whole(closing, empty, num_workers):
    space = spaces.Dict(collections.OrderedDict([("e", empty), ("c", ColourSpace())]))
    assert _layout.observation_layout(space, N, 1) is None  # no bytes to lay out
    fns = [functools.partial(SpaceEnv, space) for _ in range(N)]
    ours = closing(ringenv.AsyncVectorEnv(fns, num_workers=num_workers, inline=True))
    ref = closing(SyncVectorEnv(fns))
    assert_tree_identical(ours.reset(seed=2)[0], ref.reset(seed=2)[0])
    for t in range(6):
        assert_tree_identical(ours.step(np.zeros(N, np.int64))[0], ref.step(np.zeros(N, np.int64))[0],
                              what=f"step {t}")


class _GrowingLog(gym.Env):
    """A split Dict whose custom value is a list the env keeps appending to after returning it."""

    observation_space = spaces.Dict(collections.OrderedDict([
        ("image", spaces.Box(0, 255, (2, 2), np.uint8)), ("log", ColourSpace())]))
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.log = [0]
        return {"image": np.zeros((2, 2), np.uint8), "log": self.log}, {}

    def step(self, action):
        self.log.append(len(self.log))
        return {"image": np.full((2, 2), len(self.log), np.uint8), "log": self.log}, 0.0, False, False, {}


@pytest.mark.parametrize("inline", [True, False])
def test_held_recv_batches_keep_the_custom_values_they_were_returned_with(closing, inline):
    # copy=True: a recv batch holds copies of the env's own objects, which the env changes later.
    env = closing(ringenv.AsyncVectorEnv([_GrowingLog] * 4, num_workers=2 if not inline else None,
                                         inline=inline, batch_size=2, deterministic=True))
    env.async_reset(seed=0)
    held = []
    for _ in range(8):
        obs, *_, infos = env.recv()
        held.append((obs, copy.deepcopy(obs)))
        env.send(np.zeros(2, np.int64), infos["env_id"])
    for t, (obs, snapshot) in enumerate(held):
        assert_tree_identical(obs, snapshot, what=f"batch {t}")


class _LongDoubles(gym.Env):
    """Observations of a longdouble Box (whose ``sample`` Gymnasium cannot draw)."""

    observation_space = spaces.Box(-1.0, 1.0, (3,), np.longdouble)
    action_space = spaces.Discrete(2)

    def __init__(self, env_id):
        self.env_id, self.t = env_id, 0

    def _obs(self):
        return np.array([self.t, -self.env_id, 1], np.longdouble) / np.longdouble(3 + self.t)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 0.0, False, False, {}


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_longdouble_box_is_laid_out_as_bytes(closing, num_workers):
    # The segment's arrays hold numbers of at most 8 bytes; a longdouble Box's rows are bytes.
    space = spaces.Box(-1.0, 1.0, (3,), np.longdouble)
    assert _layout.observation_layout(space, N, 1).leaves == [("uint8", [3 * np.dtype(np.longdouble).itemsize])]
    fns = [functools.partial(_LongDoubles, i) for i in range(N)]
    ours = closing(ringenv.AsyncVectorEnv(fns, num_workers=num_workers, inline=True))
    ref = closing(SyncVectorEnv(fns))
    batches = [(ours.reset(seed=4)[0], ref.reset(seed=4)[0])]
    batches += [(ours.step(np.zeros(N, np.int64))[0], ref.step(np.zeros(N, np.int64))[0]) for _ in range(8)]
    for t, (got, want) in enumerate(batches):  # values and dtype (padding bytes are undefined)
        assert got.dtype == want.dtype and np.array_equal(got, want), t


class _Str(str):
    """A str subclass (may hold attributes: deepcopy copies it)."""


@pytest.mark.parametrize("batch", [
    ("red", "green", None, 3, 2.5, True, b"x"),
    {"mission": ("a", "b"), "colour": ("red", "red")},
    (["a"], ["b"]),
    {"log": ([1], [2])},
    (_Str("a"), "b"),
    {("k",): ("a",)},
    {"nested": {"m": ("a",)}},
], ids=["atoms", "dict-of-atoms", "lists", "dict-of-lists", "str-subclass", "tuple-key", "nested"])
def test_the_pickled_batch_copy_equals_deepcopy_and_shares_no_mutable_object(batch):
    from ringenv._slots import _deepcopy

    got, want = _deepcopy(batch), copy.deepcopy(batch)
    assert got == want and type(got) is type(want)
    if isinstance(batch, dict):
        assert got is not batch  # a new dict, as deepcopy gives: the caller may change it
    mutable = [v for v in (batch.values() if isinstance(batch, dict) else [batch]) for v in
               (v if isinstance(v, tuple) else [v]) if isinstance(v, (list, dict, _Str))]
    copied = [v for v in (got.values() if isinstance(got, dict) else [got]) for v in
              (v if isinstance(v, tuple) else [v]) if isinstance(v, (list, dict, _Str))]
    assert all(a is not b for a, b in zip(mutable, copied))
