"""Observations copied into the segment by the host's leaf walk (bindings/src/obs_copy.rs): a NumPy
array of the row's dtype and shape in C order is copied as it is, anything else goes through
ringenv._obs_writer's writers. Every form of value, through a worker process and through this
process's own share, gives the bytes and errors Gymnasium's write_to_shared_memory gives."""

from __future__ import annotations

import collections
import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

import ringenv
from ringenv import _obs_writer
from test_obs_writer import SPACE
from vec_asserts import assert_tree_identical

NUM_ENVS = 3

#: test_obs_writer's Dict: every flat leaf kind, a nested Dict, a Tuple with a Text leaf.
DICT_SPACE = SPACE

BOX_SPACE = spaces.Box(-10.0, 10.0, (4,), np.float32)


def _dict_obs(form: str, env_id: int, t: int):
    """An observation of DICT_SPACE in one of many forms; values depend on env and step only."""
    base = env_id * 100 + t
    image = (np.arange(60, dtype=np.int64).reshape(5, 4, 3) + base) % 256
    pos = np.array([base * 0.25, -base * 0.5]) % 1
    grid = (np.arange(9).reshape(3, 3) - base) % 200 - 100
    exact = {
        "image": image.astype(np.uint8),
        "pos": pos.astype(np.float32),
        "count": np.array(base % 5, np.int64),
        "md": np.array([base % 3, base % 4], np.int64),
        "mb": np.array([base % 2, 1, 0], np.int8),
        "nested": {"grid": grid.astype(np.int16)},
        "t": (np.array(base % 11, np.int64), "ab"[: base % 3]),
    }
    if form == "exact":
        return exact
    if form == "casts":  # other dtypes, Python scalars, lists: written as np.asarray(value, dtype) casts
        return {**exact, "image": image, "pos": pos, "count": base % 5, "md": [base % 3, base % 4],
                "mb": np.array([bool(base % 2), True, False]), "t": (base % 11, "a")}
    if form == "strided":  # right dtype and shape, not C order
        return {**exact, "image": np.asfortranarray(exact["image"]),
                "pos": np.repeat(exact["pos"], 2)[::2], "nested": {"grid": exact["nested"]["grid"].T.copy().T}}
    if form == "byteswapped":  # an equal value of the other byte order
        return {**exact, "nested": {"grid": exact["nested"]["grid"].astype(">i2")}, "pos": pos.astype(">f4")}
    if form == "subclass":
        return {**exact, "pos": exact["pos"].view(np.ma.MaskedArray)}
    if form == "containers":  # an OrderedDict, a list for the Tuple, an extra key
        return collections.OrderedDict({**exact, "t": [exact["t"][0], "b"], "extra": 1})
    if form == "reshaped":  # the right size in another shape: Gymnasium flattens it
        return {**exact, "pos": exact["pos"].reshape(1, 2), "nested": {"grid": exact["nested"]["grid"].reshape(-1)}}
    if form == "generic":  # NumPy scalars (not arrays) for the scalar leaves
        return {**exact, "count": np.int64(base % 5), "t": (np.int32(base % 11), "c")}
    raise AssertionError(form)


def _box_obs(form: str, env_id: int, t: int):
    value = np.array([env_id, t, -t * 0.5, 1.25]) % 10
    return {"exact": value.astype(np.float32), "casts": value, "list": value.tolist(),
            "strided": np.repeat(value.astype(np.float32), 2)[::2],
            "byteswapped": value.astype(">f4")}[form]


class FormEnv(gym.Env):
    """Steps return ``make(form, env_id, t)``; one array reused in place when ``form`` is
    ``"exact"`` and the space is a Box (an env that keeps its observation buffer)."""

    action_space = spaces.Discrete(2)

    def __init__(self, space, make, form, env_id):
        self.observation_space = space
        self.make, self.form, self.env_id, self.t = make, form, env_id, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.make(self.form, self.env_id, self.t), {}

    def step(self, action):
        self.t += 1
        return self.make(self.form, self.env_id, self.t), 0.0, False, False, {}


def _expected(space, make, form, t):
    """The batch Gymnasium's shared memory holds after writing every env's observation at step t."""
    memory = create_shared_memory(space, n=NUM_ENVS)
    for env_id in range(NUM_ENVS):
        write_to_shared_memory(space, env_id, make(form, env_id, t), memory)
    return read_from_shared_memory(space, memory, n=NUM_ENVS)


def _fns(space, make, form):
    return [functools.partial(FormEnv, space, make, form, i) for i in range(NUM_ENVS)]


HOSTS = {"worker": dict(num_workers=1, inline=False), "this process": dict(num_workers=0)}


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("space,make,form", [
    *[pytest.param(DICT_SPACE, _dict_obs, f, id=f"Dict-{f}") for f in
      ("exact", "casts", "strided", "byteswapped", "subclass", "containers", "reshaped", "generic")],
    *[pytest.param(BOX_SPACE, _box_obs, f, id=f"Box-{f}") for f in ("exact", "casts", "list", "strided", "byteswapped")],
])
def test_every_form_gives_gymnasiums_bytes(host, space, make, form):
    envs = ringenv.AsyncVectorEnv(_fns(space, make, form), **HOSTS[host])
    try:
        obs, _ = envs.reset(seed=0)
        assert_tree_identical(obs, _expected(space, make, form, 0))
        for t in range(1, 4):
            obs, *_ = envs.step(np.zeros(NUM_ENVS, np.int64))
            assert_tree_identical(obs, _expected(space, make, form, t))
    finally:
        envs.close()


def _bad_obs(kind, env_id, t):
    obs = _dict_obs("exact", env_id, t)
    if env_id == 1 and t == 1:
        if kind == "missing key":
            del obs["pos"]
        elif kind == "wrong size":
            obs["pos"] = np.zeros(5, np.float32)
        elif kind == "short tuple":
            obs["t"] = (obs["t"][0],)
    return obs


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("kind", ["missing key", "wrong size", "short tuple"])
def test_bad_observations_raise_gymnasiums_error(host, kind):
    memory = create_shared_memory(DICT_SPACE, n=NUM_ENVS)
    with pytest.raises(Exception) as reference:
        write_to_shared_memory(DICT_SPACE, 1, _bad_obs(kind, 1, 1), memory)
    envs = ringenv.AsyncVectorEnv(_fns(DICT_SPACE, _bad_obs, kind), **HOSTS[host])
    try:
        envs.reset(seed=0)
        with pytest.raises(type(reference.value)):
            envs.step(np.zeros(NUM_ENVS, np.int64))
    finally:
        envs.close()


def test_arrays_of_the_rows_dtype_and_shape_skip_the_python_writers(monkeypatch):
    """Built in this process (``num_workers=0``) with the leaf writers counted: observations whose
    flat leaves are all C-ordered arrays of their rows' dtype and shape, or Python ints for the
    int64 leaves of shape (), call none of them; the same observation with a list in one leaf calls
    that leaf's writer."""
    calls = []
    leaf_writer = _obs_writer._leaf_writer

    def counted(space, index, memory, path=""):
        write = leaf_writer(space, index, memory, path)

        def counting(value):
            calls.append(space)
            write(value)

        return counting

    monkeypatch.setattr(_obs_writer, "_leaf_writer", counted)

    def one_list(form, env_id, t):
        obs = _dict_obs("exact", env_id, t)
        if form == "python int":  # Discrete leaves as Python ints: stored without a writer too
            return {**obs, "count": int(obs["count"]), "t": (int(obs["t"][0]), obs["t"][1])}
        if form == "numpy scalar":  # and as NumPy scalars of their dtype (MiniGrid's direction)
            return {**obs, "count": np.int64(obs["count"]), "t": (np.int64(obs["t"][0]), obs["t"][1])}
        return {**obs, "md": obs["md"].tolist()} if form == "list" else obs

    for form, expected_calls in (("exact", 0), ("python int", 0), ("numpy scalar", 0),
                                 ("list", 4 * NUM_ENVS)):  # reset + 3 steps
        calls.clear()
        envs = ringenv.AsyncVectorEnv(_fns(DICT_SPACE, one_list, form), num_workers=0)
        try:
            envs.reset(seed=0)
            for _ in range(3):
                envs.step(np.zeros(NUM_ENVS, np.int64))
        finally:
            envs.close()
        assert len(calls) == expected_calls, form
        assert all(s == DICT_SPACE["md"] for s in calls), form


class _Conversions:
    """An array-like whose value is the number of times it has been converted."""

    def __init__(self):
        self.n = 0

    def __array__(self, dtype=None, copy=None):
        self.n += 1
        return np.array([self.n], dtype=dtype)


#: Keys Gymnasium's Dict allows besides str (ints, tuples), and a Tuple the walk does not take.
ODD_SPACE = spaces.Dict({1: spaces.Box(0, 100, (1,), np.float32), ("t", 2): spaces.Tuple((spaces.Discrete(3),))})


def _odd_obs(form, env_id, t):
    return {1: _Conversions() if form == "converted once" else np.full(1, t, np.float32),
            ("t", 2): [env_id % 3] if form == "converted once" else (env_id % 3,)}


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("form", ["keys", "converted once"])
def test_any_key_and_each_value_converted_once_as_gymnasium(host, form):
    """Dict keys that are not strings work; an observation whose walk stops at a node (a list for a
    Tuple) is written by the whole observation's writer alone, each value converted once."""
    envs = ringenv.AsyncVectorEnv(_fns(ODD_SPACE, _odd_obs, form), **HOSTS[host])
    try:
        obs, _ = envs.reset(seed=0)
        assert_tree_identical(obs, _expected(ODD_SPACE, _odd_obs, form, 0))
        obs, *_ = envs.step(np.zeros(NUM_ENVS, np.int64))
        assert_tree_identical(obs, _expected(ODD_SPACE, _odd_obs, form, 1))
    finally:
        envs.close()


SCALAR_SPACE = spaces.Dict({"n": spaces.Discrete(5), "x": spaces.Box(-1.0, 1.0, (), np.float64),
                            "b": spaces.Box(0, 1, (), np.bool_)})


def _scalar_obs(form, env_id, t):
    obs = {"n": (env_id + t) % 5, "x": t * 0.125 - 0.5, "b": t % 2 == 0}  # Python int, float, bool
    if form == "bool for the Discrete":
        obs["n"] = True
    elif form == "int beyond int64" and env_id == 1 and t == 1:
        obs["n"] = 2**63
    return obs


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("form", ["python scalars", "bool for the Discrete", "int beyond int64"])
def test_python_scalars_for_scalar_rows_as_gymnasium(host, form):
    memory = create_shared_memory(SCALAR_SPACE, n=NUM_ENVS)
    reference = None
    try:
        for t in range(3):
            for env_id in range(NUM_ENVS):
                write_to_shared_memory(SCALAR_SPACE, env_id, _scalar_obs(form, env_id, t), memory)
    except Exception as e:  # the type is compared
        reference = type(e)
    envs = ringenv.AsyncVectorEnv(_fns(SCALAR_SPACE, _scalar_obs, form), **HOSTS[host])
    try:
        assert_tree_identical(envs.reset(seed=0)[0], _expected(SCALAR_SPACE, _scalar_obs, form, 0))
        if reference is not None:
            with pytest.raises(reference):
                envs.step(np.zeros(NUM_ENVS, np.int64))
            return
        for t in (1, 2):
            obs, *_ = envs.step(np.zeros(NUM_ENVS, np.int64))
            assert_tree_identical(obs, _expected(SCALAR_SPACE, _scalar_obs, form, t))
    finally:
        envs.close()


#: Rows of shape () of many dtypes, for NumPy scalars (bindings/src/obs_copy.rs put_numpy_scalar).
NUMPY_SCALAR_SPACE = spaces.Dict({
    "n": spaces.Discrete(5), "f32": spaces.Box(-1.0, 1.0, (), np.float32), "f16": spaces.Box(-1.0, 1.0, (), np.float16),
    "f64": spaces.Box(-1.0, 1.0, (), np.float64), "u8": spaces.Box(0, 255, (), np.uint8),
    "i16": spaces.Box(-9, 9, (), np.int16), "b": spaces.Box(0, 1, (), np.bool_),
})


class _MyInt64(np.int64):
    """A subclass of NumPy's int64 scalar type: not copied as it is, written as Gymnasium writes it."""


def _numpy_scalar_obs(form, env_id, t):
    v = (env_id * 3 + t) % 5
    if form == "same dtype":  # np.longlong is int64's equivalent under another type on Linux
        n = np.longlong(v) if env_id == 1 else np.int64(v)
        return {"n": n, "f32": np.float32(v / 8), "f16": np.float16(-v / 4), "f64": np.float64(v / 16),
                "u8": np.uint8(250 + v), "i16": np.int16(-v), "b": np.bool_(v % 2)}
    if form == "other dtypes":  # cast as np.asarray(value, dtype) casts (unsafe: -1 wraps into uint8)
        return {"n": np.int32(v), "f32": np.float64(v / 3), "f16": np.float32(v / 3), "f64": np.float32(v / 3),
                "u8": np.int16(-v), "i16": np.uint8(v), "b": np.int64(v % 2)}
    if form == "subclass":
        return {**_numpy_scalar_obs("same dtype", env_id, t), "n": _MyInt64(v)}
    raise AssertionError(form)


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("form", ["same dtype", "other dtypes", "subclass"])
def test_numpy_scalars_for_scalar_rows_as_gymnasium(host, form):
    envs = ringenv.AsyncVectorEnv(_fns(NUMPY_SCALAR_SPACE, _numpy_scalar_obs, form), **HOSTS[host])
    try:
        assert_tree_identical(envs.reset(seed=0)[0], _expected(NUMPY_SCALAR_SPACE, _numpy_scalar_obs, form, 0))
        for t in (1, 2, 3):
            obs, *_ = envs.step(np.zeros(NUM_ENVS, np.int64))
            assert_tree_identical(obs, _expected(NUMPY_SCALAR_SPACE, _numpy_scalar_obs, form, t))
    finally:
        envs.close()


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("space,value", [
    (spaces.Discrete(7, start=-2), lambda env_id, t: np.int64((env_id + t) % 7 - 2)),
    (spaces.Box(-1.0, 1.0, (), np.float32), lambda env_id, t: np.float32(t / 8 - env_id / 16)),
    (spaces.Discrete(7), lambda env_id, t: np.uint8((env_id + t) % 7)),  # another dtype: assigned as NumPy does
], ids=["discrete-int64", "box-float32", "discrete-uint8"])
def test_numpy_scalars_for_a_flat_scalar_space_as_gymnasium(host, space, value):
    envs = ringenv.AsyncVectorEnv(_fns(space, lambda form, env_id, t: value(env_id, t), None), **HOSTS[host])
    try:
        assert_tree_identical(envs.reset(seed=0)[0], _expected(space, lambda f, e, t: value(e, t), None, 0))
        for t in (1, 2, 3):
            obs, *_ = envs.step(np.zeros(NUM_ENVS, np.int64))
            assert_tree_identical(obs, _expected(space, lambda f, e, t: value(e, t), None, t))
    finally:
        envs.close()


@pytest.mark.parametrize("host", HOSTS)
def test_longdouble_scalars_keep_their_values(host):
    # longdouble has padding bytes (6 of 16 on x86-64) whose contents NumPy leaves undefined, so
    # the host leaves such scalars to the Python writer: values and dtype as Gymnasium's (the
    # padding is not compared: no two NumPy conversions promise the same there).
    space = spaces.Dict({"x": spaces.Box(-1.0, 1.0, (), np.longdouble), "n": spaces.Discrete(3)})

    def make(form, env_id, t):
        return {"x": np.longdouble((env_id + t) / 4), "n": np.int64(t % 3)}

    envs = ringenv.AsyncVectorEnv(_fns(space, make, None), **HOSTS[host])
    try:
        batches = [envs.reset(seed=0)[0]] + [envs.step(np.zeros(NUM_ENVS, np.int64))[0] for _ in range(3)]
        for t, obs in enumerate(batches):
            want = _expected(space, make, None, t)
            assert obs["x"].dtype == np.longdouble and np.array_equal(obs["x"], want["x"]), t
            assert_tree_identical(obs["n"], want["n"], what=f"step {t}")
    finally:
        envs.close()
