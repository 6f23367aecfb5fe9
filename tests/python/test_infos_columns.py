"""`ringenv._infos.add_infos` (and `add_batch_infos`, over a batch of envs) builds exactly the dict Gymnasium's env-by-env `_add_info` builds:
same keys in the same order, same dtypes, values and masks, for numeric columns (the fast path)
and everything else (nested dicts, arrays, objects, `final_obs`, mixed types: Gymnasium's own
function)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv
import gymnasium as gym

from ringenv._infos import add_batch_infos, add_infos

NUM_ENVS = 6


def _reference_env():
    return SyncVectorEnv([lambda: gym.make("CartPole-v1")] * NUM_ENVS)


class _SubArray(np.ndarray):
    """A subclass of ``numpy.ndarray``, as an info value."""


class _Level(int):
    """A subclass of ``int`` (as an ``IntEnum`` is), as an info value: Gymnasium keeps it in an
    ``object`` column, since its type is not exactly ``int``."""


def _value(rng: random.Random, depth: int = 0):
    kind = rng.choice(["int", "float", "bool", "np.float32", "np.int8", "np.bool_", "str", "array", "dict", "none",
                       "list", "tuple", "level"])
    if kind == "int":
        return rng.randint(-10**6, 10**6)
    if kind == "float":
        return rng.uniform(-1e3, 1e3)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "np.float32":
        return np.float32(rng.uniform(-5, 5))
    if kind == "np.int8":
        return np.int8(rng.randint(-100, 100))
    if kind == "np.bool_":
        return np.bool_(rng.random() < 0.5)
    if kind == "str":
        return rng.choice(["a", "bb", ""])
    if kind == "list":
        return rng.choice([[1, 2], [], ["x"]])
    if kind == "tuple":
        return rng.choice([(1, 2), (), (0.5, "x", None)])
    if kind == "level":
        return _Level(rng.randint(0, 3))
    if kind == "array":
        # Shapes that stack, broadcast ((1,) into (3,)) or neither; dtypes that match or cast; now
        # and then a subclass (Gymnasium's isinstance takes it as an array).
        shape = rng.choice([(3,), (3,), (1,), (2, 2), ()])
        array = np.array(np.arange(int(np.prod(shape))).reshape(shape) * rng.randint(1, 4),
                         dtype=rng.choice([np.int16, np.float64, np.uint8, object]))
        return array.view(_SubArray) if rng.random() < 0.1 else array
    if kind == "dict" and depth < 2:
        return {k: _value(rng, depth + 1) for k in rng.sample(["x", "y", "z"], rng.randint(1, 3))}
    return None


def _batch(rng: random.Random):
    keys = ["step", "score", "flag", "deep", "final_obs", "name", "cost"]
    # One type per key for most batches (the fast path), mixed types now and then.
    kinds = {k: _value(rng) for k in keys}
    batch = []
    for env_id in sorted(rng.sample(range(NUM_ENVS), rng.randint(0, NUM_ENVS))):
        info = {}
        for k in rng.sample(keys, rng.randint(0, len(keys))):
            same = rng.random() < 0.8
            v = kinds[k] if same else _value(rng)
            if same and isinstance(v, (int, float)) and not isinstance(v, bool):
                v = type(v)(v + env_id)  # same type, another value
            elif same and type(v) is np.ndarray:
                v = v + np.asarray(env_id % 2, v.dtype)  # same shape and dtype, other values
            info[k] = v
        batch.append((env_id, info))
    return batch


def _assert_same(ours, ref, path="infos"):
    assert list(ours) == list(ref), f"{path}: key order {list(ours)} != {list(ref)}"
    for key in ref:
        a, b = ours[key], ref[key]
        if isinstance(b, dict):
            _assert_same(a, b, f"{path}[{key!r}]")
            continue
        assert type(a) is type(b), f"{path}[{key!r}]: {type(a)} != {type(b)}"
        if not isinstance(b, np.ndarray):  # Gymnasium stores some mixes as they come
            assert a == b, f"{path}[{key!r}]: {a!r} != {b!r}"
            continue
        assert a.dtype == b.dtype and a.shape == b.shape, f"{path}[{key!r}]: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        if a.dtype == object:
            assert all(type(x) is type(y) and ((x is y) or (isinstance(x, np.ndarray) and np.array_equal(x, y)) or x == y)
                       for x, y in zip(a, b)), f"{path}[{key!r}]"
        else:
            assert a.tobytes() == b.tobytes(), f"{path}[{key!r}]: {a} != {b}"


def _gymnasiums(env, batch):
    """Gymnasium's infos of ``batch`` (``(env_id, info)`` pairs), built env by env with ``env``'s
    ``_add_info``, or the exception it raised when Gymnasium refuses the batch (e.g. a value that
    does not fit)."""
    ref: dict = {}
    try:
        for env_id, info in batch:
            ref = env._add_info(ref, info, env_id)
    except Exception as e:
        return e
    return ref


def _raises_as(ref: Exception, fn) -> None:
    """``fn()`` raises what Gymnasium raised, ``ref``: the same type and message."""
    with pytest.raises(type(ref)) as raised:
        fn()
    assert str(raised.value) == str(ref)


@pytest.mark.parametrize("seed", range(300))
def test_column_by_column_equals_gymnasiums_env_by_env(seed):
    rng = random.Random(seed)
    batch = _batch(rng)
    env = _reference_env()
    try:
        ref = _gymnasiums(env, batch)
        if isinstance(ref, Exception):
            # A batch Gymnasium refuses is refused with Gymnasium's error: the bad value it meets
            # first env by env, though the columns are built key by key.
            _raises_as(ref, lambda: add_infos({}, batch, NUM_ENVS, env._add_info))
            return
        _assert_same(add_infos({}, batch, NUM_ENVS, env._add_info), ref)
    finally:
        env.close()


def test_numeric_columns_take_the_first_values_type_and_mask_the_envs_that_have_it():
    env = _reference_env()
    try:
        infos = add_infos({}, [(1, {"n": 3, "x": 0.5}), (4, {"n": 7, "x": 1.5, "ok": True})], NUM_ENVS, env._add_info)
    finally:
        env.close()
    assert list(infos) == ["n", "_n", "x", "_x", "ok", "_ok"]
    assert infos["n"].dtype == np.int64 and infos["n"].tolist() == [0, 3, 0, 0, 7, 0]
    assert infos["_n"].tolist() == [False, True, False, False, True, False]
    assert infos["x"].dtype == np.float64 and infos["ok"].dtype == np.bool_
    assert infos["_ok"].tolist() == [False, False, False, False, True, False]


@pytest.mark.parametrize("seed", range(60))
def test_every_env_with_the_same_keys_in_any_order_equals_gymnasiums(seed):
    """The common case (every env returns the same keys, here each env in its own order, some
    envs now and then missing): the columns in the first env's key order, as Gymnasium's."""
    rng = random.Random(seed)
    keys = rng.sample(["step", "score", "flag", "deep", "final_obs", "name", "cost"], rng.randint(1, 7))
    kinds = {k: _value(rng) for k in keys}
    env_ids = range(NUM_ENVS) if seed % 3 else sorted(rng.sample(range(NUM_ENVS), rng.randint(1, NUM_ENVS)))
    batch = []
    for env_id in env_ids:
        order = rng.sample(keys, len(keys))
        info = {}
        for k in order:
            v = kinds[k] if rng.random() < 0.9 else _value(rng)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                v = type(v)(v + env_id)
            info[k] = v
        batch.append((env_id, info))
    env = _reference_env()
    try:
        ref = _gymnasiums(env, batch)
        if isinstance(ref, Exception):
            _raises_as(ref, lambda: add_infos({}, batch, NUM_ENVS, env._add_info))
            return
        _assert_same(add_infos({}, batch, NUM_ENVS, env._add_info), ref)
    finally:
        env.close()


def _rows(x, index):
    """The rows ``index`` of every array of a (possibly nested) info dict."""
    if isinstance(x, dict):
        return {k: _rows(v, index) for k, v in x.items()}
    return x[index] if isinstance(x, np.ndarray) and x.ndim >= 1 else x


@pytest.mark.parametrize("seed", range(120))
def test_a_batchs_infos_equal_gymnasiums_over_every_env_then_the_batchs_rows(seed):
    """A recv's infos, built at the batch's size, equal Gymnasium's `_add_info` over all
    `num_envs` followed by taking the batch's rows: one run of ids or several, envs of the batch
    without an info, every kind of value."""
    rng = random.Random(seed)
    if seed % 2:
        start = rng.randint(0, NUM_ENVS - 1)
        ids = np.arange(start, rng.randint(start + 1, NUM_ENVS), dtype=np.int32)
    else:
        ids = np.array(sorted(rng.sample(range(NUM_ENVS), rng.randint(1, NUM_ENVS))), dtype=np.int32)
    batch = [(e, info) for e, info in _batch(rng) if e in set(ids.tolist())]
    env = _reference_env()
    try:
        ref = _gymnasiums(env, batch)
        if isinstance(ref, Exception):
            _raises_as(ref, lambda: add_batch_infos(dict(batch), ids, NUM_ENVS, env._add_info))
            return
        try:
            ref = _rows(ref, ids)
        except IndexError:  # rows of what Gymnasium built that do not exist (a mix it mangles)
            with pytest.raises(Exception):
                add_batch_infos(dict(batch), ids, NUM_ENVS, env._add_info)
            return
        ours = add_batch_infos(dict(batch), ids, NUM_ENVS, env._add_info)
    finally:
        env.close()
    if not batch:
        assert ours == {}
        return
    _assert_same(ours, ref)
    for key, value in ours.items():
        if isinstance(value, np.ndarray):
            assert value.shape[0] == len(ids), f"{key}: {value.shape} for a batch of {len(ids)}"


def test_an_info_of_an_env_outside_the_batch_is_named():
    add_info = gym.vector.VectorEnv._add_info
    with pytest.raises(KeyError, match=r"env 5 returned an info but is not in the batch \[1, 2\]"):
        add_batch_infos({1: {"x": 1}, 5: {"x": 2}}, np.array([1, 2], dtype=np.int32), NUM_ENVS, add_info)
    with pytest.raises(KeyError, match="env 0 returned an info"):
        add_batch_infos({0: {"x": 1}}, np.array([1, 3], dtype=np.int32), NUM_ENVS, add_info)


def _same_keys_batch(rng: random.Random, env_ids):
    """Per-step infos as real envs return them: every env the same keys in the same order, each
    key's values one number type (Python's or NumPy's); now and then one env's value of another
    type, a key whose mask name is also a key, ``final_obs``, or an int too large for int64."""
    keys = rng.sample(["step", "score", "flag", "_score", "final_obs", "cost", "lives"], rng.randint(1, 5))
    makers = {k: rng.choice([int, float, bool, np.float32, np.int8, np.bool_, np.uint16]) for k in keys}
    batch = []
    for env_id in env_ids:
        info = {}
        for k in keys:
            v = makers[k](rng.randint(0, 100))
            if rng.random() < 0.03:
                v = _value(rng)  # another type for one env
            elif rng.random() < 0.01 and makers[k] is int:
                v = 2**70  # does not fit Gymnasium's int64 column
            info[k] = v
        batch.append((env_id, info))
    return batch


@pytest.mark.parametrize("seed", range(120))
def test_every_env_with_the_same_keys_in_the_same_order_equals_gymnasiums(seed):
    """The per-step case, every env with the same keys: over every env
    (`add_infos`) and over a batch (`add_batch_infos`), equal to Gymnasium's env-by-env
    `_add_info` (then the batch's rows), and refused where Gymnasium refuses."""
    rng = random.Random(seed)
    env = _reference_env()
    try:
        batch = _same_keys_batch(rng, range(NUM_ENVS))
        ref = _gymnasiums(env, batch)
        if isinstance(ref, Exception):
            _raises_as(ref, lambda: add_infos({}, batch, NUM_ENVS, env._add_info))
        else:
            _assert_same(add_infos({}, batch, NUM_ENVS, env._add_info), ref)
        start = rng.randint(0, NUM_ENVS - 1)
        ids = np.arange(start, rng.randint(start + 1, NUM_ENVS), dtype=np.int32)  # randint: both ends in
        batch = _same_keys_batch(rng, ids.tolist())
        ref = _gymnasiums(env, batch)
        if isinstance(ref, Exception):
            _raises_as(ref, lambda: add_batch_infos(dict(batch), ids, NUM_ENVS, env._add_info))
        else:
            _assert_same(add_batch_infos(dict(batch), ids, NUM_ENVS, env._add_info), _rows(ref, ids))
    finally:
        env.close()


def _refuse(*args):
    raise AssertionError("Gymnasium's env-by-env _add_info was called")


def test_arrays_of_one_shape_and_dtype_are_stacked_without_gymnasiums_path():
    """Taxi's infos (a float and an int8 action mask per env, the masks differing): the columns
    Gymnasium builds, without its env-by-env path, for every env, some envs and a recv's batch."""
    batch = [(i, {"prob": 1.0, "action_mask": np.array([1, i % 2, 0, 1, i % 3, 0], np.int8)}) for i in range(NUM_ENVS)]
    env = _reference_env()
    try:
        _assert_same(add_infos({}, batch, NUM_ENVS, _refuse), _gymnasiums(env, batch))
        some = [batch[1], batch[4]]
        _assert_same(add_infos({}, some, NUM_ENVS, _refuse), _gymnasiums(env, some))
        ids = np.array([2, 3, 5], dtype=np.int32)
        ours = add_batch_infos({i: batch[i][1] for i in ids.tolist()}, ids, NUM_ENVS, _refuse)
        _assert_same(ours, _rows(_gymnasiums(env, [batch[i] for i in ids.tolist()]), ids))
    finally:
        env.close()
    assert ours["action_mask"].shape == (3, 6) and ours["action_mask"][2].tolist() == [1, 1, 0, 1, 2, 0]


def test_lists_strings_and_none_fill_an_object_column_without_gymnasiums_path():
    """Values Gymnasium keeps in an ``object`` array (lists, strings, ``None``, tuples, an ``int``
    subclass): the column it builds, holding the envs' own objects, without its env-by-env path,
    for every env, some envs and a recv's batch."""
    batch = [(i, {"log": [i, 2], "msg": "ok" * i, "none": None, "xy": (i, -i), "level": _Level(i)})
             for i in range(NUM_ENVS)]
    env = _reference_env()
    try:
        ours = add_infos({}, batch, NUM_ENVS, _refuse)
        _assert_same(ours, _gymnasiums(env, batch))
        assert [v is batch[i][1]["log"] for i, v in enumerate(ours["log"])] == [True] * NUM_ENVS
        some = [batch[1], batch[4]]
        _assert_same(add_infos({}, some, NUM_ENVS, _refuse), _gymnasiums(env, some))
        ids = np.array([2, 3, 5], dtype=np.int32)
        part = add_batch_infos({i: batch[i][1] for i in ids.tolist()}, ids, NUM_ENVS, _refuse)
        _assert_same(part, _rows(_gymnasiums(env, [batch[i] for i in ids.tolist()]), ids))
    finally:
        env.close()
    assert ours["log"].dtype == object and ours["log"][3] == [3, 2] and part["xy"][0] == (2, -2)


#: Numbers of every kind the fast path takes, at the edges where a conversion overflows, truncates,
#: warns or raises.
_NUMBERS = [0, 1, 2**70, -2**70, True, 0.333, float("nan"), 1e300, np.complex64(1 + 2j), np.float32(0.5),
            np.int8(-3), np.uint64(2**64 - 1), np.uint8(255), np.float16(65504), np.int64(-2**63)]


def _outcome(build):
    """``(infos, exception type, warning categories)`` of ``build()``."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result, error = build(), None
        except Exception as e:  # the type is compared
            result, error = None, type(e)
    return result, error, sorted({w.category.__name__ for w in caught})


@pytest.mark.parametrize("first", _NUMBERS, ids=repr)
def test_numbers_of_mixed_types_convert_as_gymnasiums_assignment(first):
    """A column whose envs return numbers of different types (FrozenLake's prob: a float, then the
    int 1 after a reset) has the first value's type, each value converted as Gymnasium's item
    assignment converts it: the same values, the same error, the same warnings; without calling
    Gymnasium's env-by-env path where it succeeds (where it fails, that path raises its error)."""
    env = _reference_env()
    try:
        for other in _NUMBERS:
            batch = [(0, {"v": first}), (2, {"v": other}), (3, {"v": first})]
            ref, ref_error, ref_warnings = _outcome(lambda: _gymnasiums_or_raise(env, batch))
            calls: list = []

            def counted(infos, info, env_id):
                calls.append(env_id)
                return env._add_info(infos, info, env_id)

            ours, error, warnings = _outcome(lambda: add_infos({}, batch, NUM_ENVS, counted))
            assert (error, warnings) == (ref_error, ref_warnings), (first, other)
            if ref is not None:
                _assert_same(ours, ref)
                assert not calls, (first, other)
    finally:
        env.close()


def _gymnasiums_or_raise(env, batch):
    ref: dict = {}
    for env_id, info in batch:
        ref = env._add_info(ref, info, env_id)
    return ref


def test_timedelta_columns_fail_as_gymnasiums():
    """np.timedelta64 is a NumPy number type, but Gymnasium's column of it (np.zeros without a
    unit) refuses a value with one: the same TypeError, not a column Gymnasium cannot build."""
    batch = [(0, {"d": np.timedelta64(5, "s")}), (1, {"d": np.timedelta64(7, "s")})]
    env = _reference_env()
    try:
        with pytest.raises(TypeError):
            _gymnasiums_or_raise(env, batch)
        with pytest.raises(TypeError):
            add_infos({}, batch, NUM_ENVS, env._add_info)
    finally:
        env.close()


def test_zero_dimensional_object_arrays_are_kept_as_gymnasium_keeps_them():
    """0-d object arrays (each holding a list): Gymnasium's assignment keeps each 0-d array as its
    row's element (np.stack would unpack it into the list); so does the column built here."""
    def holding(value):
        a = np.empty((), dtype=object)
        a[()] = value
        return a
    batch = [(i, {"o": holding([i, i + 1])}) for i in range(NUM_ENVS)]
    env = _reference_env()
    try:
        ref = _gymnasiums(env, batch)
    finally:
        env.close()
    ours = add_infos({}, batch, NUM_ENVS, _refuse)
    assert [type(x) for x in ref["o"]] == [np.ndarray] * NUM_ENVS
    assert [type(x) for x in ours["o"]] == [np.ndarray] * NUM_ENVS
    assert [x[()] for x in ours["o"]] == [x[()] for x in ref["o"]] == [[i, i + 1] for i in range(NUM_ENVS)]


class _Float64Subclass(np.float64):
    """A subclass of a NumPy scalar type, as an info value (built by NumPy's conversion)."""


_EDGE_VALUES = {
    "int": [0, -1, 2**63 - 1, -2**63, 7, 3],
    "float": [-0.0, float("nan"), float("inf"), -float("inf"), 5e-324, 1.5],
    "bool": [True, False, True, True, False, False],
    "int8": [np.int8(v) for v in (-128, 127, 0, -1, 5, 6)],
    "uint8": [np.uint8(v) for v in (0, 255, 1, 2, 3, 4)],
    "int16": [np.int16(v) for v in (-2**15, 2**15 - 1, 0, 1, 2, 3)],
    "uint32": [np.uint32(v) for v in (0, 2**32 - 1, 1, 2, 3, 4)],
    "int64": [np.int64(v) for v in (-2**63, 2**63 - 1, 0, 1, 2, 3)],
    "uint64": [np.uint64(v) for v in (0, 2**64 - 1, 1, 2, 3, 4)],
    "float16": [np.float16(v) for v in (65504, -0.0, float("nan"), 1e-7, 1, 2)],
    "float32": [np.float32(v) for v in (3.4e38, -0.0, float("nan"), float("inf"), 1e-45, 2)],
    "float64": [np.float64(v) for v in (1.7e308, -0.0, float("nan"), -float("inf"), 5e-324, 2)],
    "complex64": [np.complex64(complex(v, -v)) for v in (0.5, -0.0, 1e30, 2, 3, 4)],
    "complex128": [np.complex128(complex(v, v)) for v in (0.5, -0.0, 1e300, float("nan"), 3, 4)],
    "longdouble": [np.longdouble(v) for v in (0.5, -0.0, 1e300, 2, 3, 4)],
    "clongdouble": [np.clongdouble(complex(v, 1)) for v in (0.5, -0.0, 1e300, 2, 3, 4)],
    "float64 subclass": [_Float64Subclass(v) for v in (0.5, -0.0, 2, 3, 4, 5)],
}


@pytest.mark.parametrize("kind", sorted(_EDGE_VALUES))
def test_every_env_with_numbers_of_one_type_gives_gymnasiums_columns_for_edge_values(kind):
    """The common per-step case (every env has the key, values of one exact type), built by the
    native pass where it can (Python numbers, NumPy's own number scalars) and by NumPy's
    conversion otherwise (longdouble, subclasses): Gymnasium's column, byte for byte, with its
    dtype and flags, and an all-True mask, for extreme values of every such type; a second key
    beside it keeps its own column."""
    values = _EDGE_VALUES[kind]
    assert len(values) == NUM_ENVS
    batch = [(i, {"v": v, "n": i}) for i, v in enumerate(values)]
    env = _reference_env()
    try:
        with np.errstate(all="ignore"):
            ref = _gymnasiums(env, batch)
    finally:
        env.close()
    assert not isinstance(ref, Exception), ref

    def assert_gymnasiums(ours):
        if kind in ("longdouble", "clongdouble"):  # NumPy leaves their padding bytes undefined
            assert list(ours) == list(ref) and ours["v"].dtype == ref["v"].dtype
            assert ours["v"].tolist() == ref["v"].tolist()
            _assert_same({k: ours[k] for k in ours if k != "v"}, {k: ref[k] for k in ref if k != "v"})
        else:
            _assert_same(ours, ref)

    ours = add_infos({}, batch, NUM_ENVS, _refuse)
    assert_gymnasiums(ours)
    for key in ours:
        assert ours[key].flags.owndata and ours[key].flags.writeable and ours[key].flags.c_contiguous, key
        assert ours[key].base is None, key
    assert ours["_v"].all() and ours["_n"].all() and ours["_v"] is not ours["_n"]
    ours["v"][0], ours["_v"][0] = ours["v"][1], False  # the caller's to change: the next batch's are new
    assert_gymnasiums(add_infos({}, batch, NUM_ENVS, _refuse))


def test_a_key_utf8_cannot_encode_gives_gymnasiums_columns():
    """A str key holding a lone surrogate (which UTF-8 cannot encode): the native pass leaves it to
    the Python path, which gives Gymnasium's columns (it raised UnicodeEncodeError)."""
    key = "a\ud800"
    batch = [(i, {key: i, "b": 0.5 * i}) for i in range(NUM_ENVS)]
    env = _reference_env()
    try:
        ref = _gymnasiums(env, batch)
    finally:
        env.close()
    assert not isinstance(ref, Exception) and list(ref) == [key, "_" + key, "b", "_b"]
    _assert_same(add_infos({}, batch, NUM_ENVS, _refuse), ref)


@pytest.mark.parametrize("dtype", [">i4", "<i4", np.dtype([("x", ">i2"), ("y", "<f4")])], ids=["big", "little", "struct"])
def test_arrays_keep_their_byte_order_as_gymnasiums_columns_do(dtype):
    """A column of arrays in non-native byte order keeps it: Gymnasium's column is
    ``np.zeros((n, *shape), dtype)`` of the env's dtype (``np.array`` of the arrays would make
    it native)."""
    batch = [(i, {"a": np.zeros(3, dtype=dtype)}) for i in range(NUM_ENVS)]
    env = _reference_env()
    try:
        for pairs in (batch, batch[1:4]):
            ref = _gymnasiums(env, pairs)
            ours = add_infos({}, pairs, NUM_ENVS, env._add_info)
            assert ours["a"].dtype == ref["a"].dtype == np.dtype(dtype)
            _assert_same(ours, ref)
        ids = np.arange(2, 5, dtype=np.int32)
        ours = add_batch_infos({i: batch[i][1] for i in ids.tolist()}, ids, NUM_ENVS, env._add_info)
        assert ours["a"].dtype == np.dtype(dtype)
    finally:
        env.close()


@pytest.mark.parametrize("keys", [(1, True), (1, 1.0), (0, False)], ids=repr)
def test_keys_equal_but_of_other_types_get_each_envs_own_mask(keys):
    """``1`` and ``True`` are one key of a dict, so one column, but Gymnasium names each env's
    mask from its own key: ``_1`` for one env, ``_True`` for the other."""
    a, b = keys
    env = _reference_env()
    try:
        for batch in ([(0, {a: 5}), (1, {b: 6})], [(i, {a if i % 2 else b: i}) for i in range(NUM_ENVS)]):
            ref = _gymnasiums(env, batch)
            assert f"_{a}" in ref and f"_{b}" in ref
            _assert_same(add_infos({}, batch, NUM_ENVS, env._add_info), ref)
    finally:
        env.close()
