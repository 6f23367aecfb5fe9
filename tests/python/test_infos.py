"""Per-step infos end to end: whatever path each step takes (a typed message, runtime/src/infos.rs,
written by Python and Rust workers alike; the pickled fallback for other values; the info arena in
the segment or, for what does not fit, the control socket), the vectorised infos are Gymnasium's
(key order, dtypes, bytes, masks) and ``env_infos()`` gives each env's own dict (its keys in
order, its values' own types); a message that is not well formed raises ``ValueError``, never
crashes."""

from __future__ import annotations

import functools
import random
import struct
import time

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import ringenv
from ringenv import _native
from helper_envs import InfoEnv
from info_envs import EveryStepInfoEnv, LambdaInfoEnv, MutableInfoEnv, NumberInfoEnv
from vec_asserts import assert_infos_equal, assert_tree_identical
from vec_compare import make_ours, make_ref, run_lockstep

NUM_ENVS = 4
STEPS = 80


def _fns(env=NumberInfoEnv):
    return [functools.partial(env, i) for i in range(NUM_ENVS)]


class _Counting:
    """Counts the typed messages the main process vectorised natively (``typed_columns`` giving
    columns) and decoded into dicts (``typed_dicts``)."""

    def __init__(self, monkeypatch):
        self.columns = self.dicts = 0
        columns, dicts = _native.typed_columns, _native.typed_dicts

        def counted_columns(*args):
            out = columns(*args)
            self.columns += out is not None
            return out

        def counted_dicts(*args):
            self.dicts += 1
            return dicts(*args)

        monkeypatch.setattr(_native, "typed_columns", counted_columns)
        monkeypatch.setattr(_native, "typed_dicts", counted_dicts)


#: Same-step autoreset's keys, which Gymnasium's AsyncVectorEnv (whose worker ringenv's follows)
#: and SyncVectorEnv add in opposite orders.
_FINAL = {"final_obs", "_final_obs", "final_info", "_final_info"}


def _assert_infos_in_order(ours, ref, what):
    order, ref_order = [k for k in ours if k not in _FINAL], [k for k in ref if k not in _FINAL]
    assert order == ref_order, f"{what}: key order {order} != {ref_order}"
    assert_infos_equal(ours, ref, what)


def _assert_env_infos_are_the_envs_own(vec, what):
    """``env_infos()`` holds what each env returned: the same keys in the same order, values of
    the same types and bytes (the envs keep their last info in ``last_info``)."""
    own = vec.get_attr("last_info")
    got = vec.env_infos()
    assert len(got) == len(own) == vec.num_envs
    for i, (g, o) in enumerate(zip(got, own)):
        # (same-step autoreset adds the ended episode's final_info and final_obs to the reset's)
        g = {k: v for k, v in g.items() if k not in ("final_info", "final_obs")}
        assert_tree_identical(g, o, f"{what}: env_infos()[{i}]")


@pytest.mark.parametrize("num_workers,inline", [(None, None), (0, None), (1, False), (2, False), (3, True)])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
def test_infos_equal_gymnasiums_and_env_infos_the_envs_own_whatever_path_each_step_takes(monkeypatch, num_workers, inline, mode):
    count = _Counting(monkeypatch)
    kwargs = {} if num_workers is None else {"num_workers": num_workers}
    if inline is not None:
        kwargs["inline"] = inline
    ours = ringenv.AsyncVectorEnv(_fns(), autoreset_mode=mode, **kwargs)
    ref = make_ref(_fns(), autoreset_mode=mode)
    try:
        obs, infos = ours.reset(seed=5)
        ref_obs, ref_infos = ref.reset(seed=5)
        _assert_infos_in_order(infos, ref_infos, "reset")
        _assert_env_infos_are_the_envs_own(ours, "reset")
        ref.action_space.seed(5)
        for t in range(STEPS):
            actions = ref.action_space.sample()
            out, ref_out = ours.step(actions), ref.step(actions)
            for name, a, b in zip(("obs", "rewards", "terminations", "truncations"), out[:4], ref_out[:4]):
                assert_tree_identical(a, b, f"step {t} {name}")
            _assert_infos_in_order(out[4], ref_out[4], f"step {t}")
            if t % 3 == 0:  # now and then: env_infos() is made on demand, from whichever path
                _assert_env_infos_are_the_envs_own(ours, f"step {t}")
            done = out[2] | out[3]
            if mode == AutoresetMode.DISABLED and done.any():
                _assert_infos_in_order(ours.reset(options={"reset_mask": done})[1],
                                       ref.reset(options={"reset_mask": done.copy()})[1], f"masked reset {t}")
    finally:
        ours.close()
        ref.close()
    # Most steps were typed messages vectorised natively (fewer in same-step mode, where a step
    # that ends an episode has final_obs and final_info); the schedule's others were not.
    least = 10 if mode == AutoresetMode.SAME_STEP else STEPS // 3
    assert count.columns > least, f"only {count.columns} of {STEPS} steps were vectorised from typed messages"
    assert count.columns < STEPS + 1


@pytest.mark.parametrize("env,kwargs,least", [
    (NumberInfoEnv, {"num_workers": 2}, 10),
    # (21 of the 40 batches, the schedule's fallbacks aside; 9 while the share's lists were pickled)
    (functools.partial(MutableInfoEnv, lists=True), {"num_workers": 1, "inline": True}, 15)])
def test_async_batches_of_typed_messages_equal_the_envs_infos(monkeypatch, env, kwargs, least):
    """recv() batches: the columns over each batch's env ids, built from typed messages, equal
    Gymnasium's columns of the same envs' infos added one env at a time; with the inline share,
    a list column's entries for its envs are their own lists."""
    from gymnasium.vector.vector_env import VectorEnv

    count = _Counting(monkeypatch)
    ours = ringenv.AsyncVectorEnv(_fns(env), batch_size=2, **kwargs)
    share = range(NUM_ENVS // 2, NUM_ENVS) if ours.inline else range(0)
    try:
        ours.async_reset(seed=1)
        rng = np.random.default_rng(1)
        for t in range(40):
            infos = ours.recv()[4]
            env_ids = infos["env_id"]
            batch = VectorEnv.__new__(VectorEnv)
            batch.num_envs = len(env_ids)
            ref: dict = {}
            own = ours.env_infos()
            for k, env_id in enumerate(env_ids):
                if own[env_id]:
                    ref = batch._add_info(ref, own[env_id], k)
            _assert_infos_in_order({k: v for k, v in infos.items() if k != "env_id"}, ref, f"recv {t}")
            for k, env_id in enumerate(env_ids):
                if env_id in share and infos.get("_commands", [False] * len(env_ids))[k]:
                    assert infos["commands"][k] is own[env_id]["commands"], f"recv {t}: env {env_id}'s list is a copy"
            ours.send(rng.integers(0, 3, len(env_ids)), env_ids)
    finally:
        ours.close()
    assert count.columns > least, count.columns


def test_vector_infos_false_still_gives_each_envs_dict(monkeypatch):
    count = _Counting(monkeypatch)
    ours = ringenv.AsyncVectorEnv(_fns(), num_workers=2, vector_infos=False)
    try:
        assert ours.reset(seed=0)[1] == {}
        for t in range(12):
            assert ours.step(np.zeros(NUM_ENVS, np.int64))[4] == {}
            _assert_env_infos_are_the_envs_own(ours, f"step {t}")
    finally:
        ours.close()
    assert count.columns == 0 and count.dicts > 0


def _typed_message(monkeypatch, env=NumberInfoEnv):
    """The typed messages the two worker processes sent at a reset of ``env``s (the envs'
    schedule's first step: every key typed)."""
    seen = []
    ours = ringenv.AsyncVectorEnv(_fns(env), num_workers=2, inline=False)
    try:
        absorb = ours._absorb

        def keep(messages, restarted, *args):
            seen.extend(p for _, p in messages if type(p) is bytes)
            return absorb(messages, restarted, *args)

        monkeypatch.setattr(ours, "_absorb", keep)
        ours.reset(seed=0)
    finally:
        ours.close()
    typed = [m for m in seen if m[:4] == b"\0RTI"]
    assert len(typed) == 2, "both workers sent typed messages"
    return typed


def test_a_typed_message_decodes_to_the_envs_dicts_and_names_what_is_wrong_with_a_bad_one(monkeypatch):
    first, second = _typed_message(monkeypatch)
    pairs = _native.typed_dicts(first, NUM_ENVS) + _native.typed_dicts(second, NUM_ENVS)
    assert [i for i, _ in pairs] == list(range(NUM_ENVS))
    assert list(pairs[0][1]) == ["t", "score", "even", "energy", "small", "big", "half", "wave", "id", "xy",
                                 "pose", "msg", "none", "path", "events"]
    assert [type(v) for v in pairs[0][1].values()] == [int, float, bool, np.float32, np.int8, np.uint64,
                                                       np.float16, np.complex64, np.int64, tuple, tuple, str,
                                                       type(None), tuple, tuple]
    assert [type(v) for v in pairs[3][1]["pose"]] == [float, np.float32, bool, np.uint8]
    assert pairs[3][1]["xy"] == (0, -3) and pairs[3][1]["pose"] == (0.0, np.float32(0), True, np.uint8(3))
    assert [info["msg"] for _, info in pairs] == ["moved", "bumped into a wall", "",
                                                  "picked up the key \u2192 d\u00e9j\u00e0"]
    assert pairs[1][1]["path"] == (0, "south", None) and pairs[1][1]["events"] == ()
    columns = _native.typed_columns([first, second], None, NUM_ENVS)
    assert columns is not None and columns["id"].tolist() == [0, 1000, 2000, 3000]
    # A tuple key's column is Gymnasium's: an object array of each env's tuple, all envs present.
    assert columns["xy"].dtype == object and columns["xy"].shape == (NUM_ENVS,)
    assert list(columns["xy"]) == [(0, 0), (0, -1), (0, -2), (0, -3)] and columns["_xy"].all()
    assert [type(v) for v in columns["pose"][2]] == [float, np.float32, bool, np.uint8]
    assert columns["msg"].dtype == object and columns["msg"][1] == "bumped into a wall"
    assert columns["none"].dtype == object and list(columns["none"]) == [None] * NUM_ENVS
    assert columns["events"][0] == () and columns["path"][3] == (0, "south", None)
    # Not every env, the wrong order, another env count: the general path decides.
    assert _native.typed_columns([first], None, NUM_ENVS) is None
    assert _native.typed_columns([second, first], None, NUM_ENVS) is None
    assert _native.typed_columns([first], [0, 1], NUM_ENVS)["id"].tolist() == [0, 1000]
    with pytest.raises(ValueError, match="vector env of 3 envs"):
        _native.typed_dicts(second, 3)  # envs 2..4 of a vector env of 3
    with pytest.raises(ValueError, match="malformed typed infos"):
        _native.typed_dicts(first[:-1], NUM_ENVS)  # a value's byte missing
    with pytest.raises(ValueError, match="malformed typed infos"):
        _native.typed_columns([first, second[:-1]], None, NUM_ENVS)  # the last string's byte missing


@pytest.mark.parametrize("env", [NumberInfoEnv, MutableInfoEnv])
@pytest.mark.parametrize("seed", range(4))
def test_corrupt_typed_messages_raise_value_error_or_decode_never_crash(monkeypatch, seed, env):
    """Bytes flipped, cut or added anywhere in a real message: each call raises ValueError or
    returns a well-formed result (a value flipped is just another value); the process lives."""
    message = _typed_message(monkeypatch, env)[0]
    rng = random.Random(seed)
    for _ in range(400):
        m = bytearray(message)
        for _ in range(rng.randint(1, 4)):
            what = rng.random()
            if what < 0.6 and m:
                m[rng.randrange(len(m))] = rng.randrange(256)
            elif what < 0.8:
                del m[rng.randrange(len(m) + 1):][:rng.randint(1, 16)]
            else:
                m[rng.randrange(len(m) + 1):0] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        corrupt = bytes(m)
        for call in (lambda: _native.typed_dicts(corrupt, NUM_ENVS),
                     lambda: _native.typed_columns([corrupt], [0, 1], NUM_ENVS)):
            try:
                out = call()
            except ValueError as e:
                assert "malformed typed infos" in str(e)
                continue
            assert out is None or isinstance(out, (list, dict))


def _message(first: int, count: int, names) -> bytes:
    """A typed message of ``count`` envs from ``first`` with ``int`` keys ``names`` (the layout of
    bindings/src/infos.rs); env ``i``'s value of key ``k`` is ``100 * i + k``."""
    out = [b"\0RTI", struct.pack("=IIHI", first, count, len(names), 0)]
    for name in names:
        raw = name.encode()
        out.append(b"i\0" + struct.pack("=H", len(raw)) + raw)
    out += [struct.pack("=q", 100 * i + k) for i in range(count) for k in range(len(names))]
    return b"".join(out)


def test_keys_gymnasium_treats_specially_leave_the_columns_to_the_general_path():
    """A key whose mask name is also a key (either order), ``final_obs``, or a key twice: the
    general path (Gymnasium's own ``_add_info`` for those) decides, as for pickled infos."""
    def columns(names):
        return _native.typed_columns([_message(0, 2, names)], None, 2)

    assert list(columns(["x", "_y", "z"])) == ["x", "_x", "_y", "__y", "z", "_z"]
    assert columns(["x", "_y", "z"])["z"].tolist() == [2, 102]
    assert columns(["x", "_x"]) is None and columns(["_x", "x"]) is None
    assert columns(["", "_"]) is None, "the mask of the key '' is '_'"
    assert columns(["final_obs"]) is None
    assert columns(["x", "x"]) is None
    # Thousands of keys: each key's mask name is looked up, not compared with every other key.
    many = [f"key{j}" for j in range(5000)] + ["_key4999"]
    assert columns(many) is None and columns(many[:-1])["key4999"].tolist() == [4999, 5099]


def _sequence_message(kind, codes, cells, text=b"") -> bytes:
    """A typed message of env 0 of one key ``"xy"`` of the kind byte ``kind`` (``b"t"``: a tuple)
    whose items have the kinds ``codes`` (two bytes each), the 8-byte ``cells`` and the strings'
    ``text``."""
    head = kind + bytes([len(codes)]) + struct.pack("=H", 2) + b"".join(codes) + b"xy"
    return b"\0RTI" + struct.pack("=IIHI", 0, 1, 1, len(text)) + head + b"".join(cells) + text


def test_a_tuple_key_decodes_to_its_items_and_a_bad_one_names_what_is_wrong():
    text = "d\u00e9j\u00e0 vu".encode()
    string = struct.pack("=II", 0, len(text))
    cells = [struct.pack("=q", -7), struct.pack("=d", 0.5), b"\1" + bytes(7), bytes(8), string]
    codes = [b"i\0", b"f\0", b"b\0", b"z\0", b"s\0"]
    good = _sequence_message(b"t", codes, cells, text)
    ((env_id, info),) = _native.typed_dicts(good, 1)
    assert env_id == 0 and info == {"xy": (-7, 0.5, True, None, "d\u00e9j\u00e0 vu")}
    assert [type(v) for v in info["xy"]] == [int, float, bool, type(None), str]
    column = _native.typed_columns([good], None, 1)["xy"]
    assert column.dtype == object and column[0] == (-7, 0.5, True, None, "d\u00e9j\u00e0 vu")
    assert _native.typed_dicts(_sequence_message(b"t", [], []), 1) == [(0, {"xy": ()})]
    for bad, what in [
        (_sequence_message(b"t", [b"i\0", b"y\0"], cells[:2]), "unknown value kind"),
        (_sequence_message(b"t", [b"i\0", b"f\0"], cells[:3]), "not starting with the typed header"),
        (_sequence_message(b"t", [b"i\0", b"f\0"], cells[:2], b"x"), "bytes of values for 1 envs x 2 cells"),
        (_sequence_message(b"t", [b"s\0"], [string], text[:-1]), "a string of 9 bytes at 0 of a data section of 8 bytes"),
        (_sequence_message(b"t", [b"s\0"], [string], b"\xff" * len(text)), "not UTF-8"),
        (_sequence_message(b"l", [b"i\0"], cells[:1]), "unknown value kind"),  # (a list key's second byte is 0)
        (_sequence_message(b"t", [b"i\0", b"n" + bytes([np.dtype(np.bool_).num])], cells[:2]), "not a typed dtype"),
    ]:
        for call in (lambda: _native.typed_dicts(bad, 1), lambda: _native.typed_columns([bad], None, 1)):
            with pytest.raises(ValueError, match=what):
                call()


@pytest.mark.parametrize("num_workers,inline", [(None, None), (0, None), (1, False), (2, False), (3, True)])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("lists", [True, False])
def test_array_and_list_infos_equal_gymnasiums_typed_and_env_infos_the_shares_own_objects(
        monkeypatch, num_workers, inline, mode, lists):
    """Arrays and lists in infos: a worker process's go as typed messages (most steps; the
    schedule's others, pickled); the inline share's too, as copies beside its envs' own dicts;
    the vectorised infos are Gymnasium's whichever path, a list column's entry for an env of the
    share that env's own list, as ``SyncVectorEnv``'s (an env may change a list it returned); and
    ``env_infos()`` each env's values at that step, the share's its envs' own
    objects (``MutableInfoEnv`` changes its mask in place)."""
    count = _Counting(monkeypatch)
    kwargs = {} if num_workers is None else {"num_workers": num_workers}
    if inline is not None:
        kwargs["inline"] = inline
    fns = [functools.partial(MutableInfoEnv, i, lists) for i in range(NUM_ENVS)]
    ours = ringenv.AsyncVectorEnv(fns, autoreset_mode=mode, **kwargs)
    ref = make_ref(fns, autoreset_mode=mode)
    share = range(NUM_ENVS - ours.num_envs // (ours.num_workers + 1), NUM_ENVS) if ours.inline else range(0)
    try:
        _assert_infos_in_order(ours.reset(seed=3)[1], ref.reset(seed=3)[1], "reset")
        masks = [info["mask"] for info in ours.env_infos()]
        ref.action_space.seed(3)
        for t in range(STEPS):
            actions = ref.action_space.sample()
            out, ref_out = ours.step(actions), ref.step(actions)
            _assert_infos_in_order(out[4], ref_out[4], f"step {t}")
            _assert_env_infos_are_the_envs_own(ours, f"step {t}")
            # The share's mask is its env's own buffer at every step; a worker's, a new copy.
            last, masks = masks, [info["mask"] for info in ours.env_infos()]
            own = [np.shares_memory(a, b) for a, b in zip(last, masks)]
            assert own == [i in share for i in range(NUM_ENVS)], f"step {t}"
            assert not any(np.shares_memory(out[4]["mask"], m) for m in masks), "the column is a copy"
            # The share's commands in the column are its env's own list, typed step or not.
            if lists and "commands" in out[4]:
                dicts = ours.env_infos()
                for i in (i for i in share if out[4]["_commands"][i]):
                    assert out[4]["commands"][i] is dicts[i]["commands"], f"step {t}: env {i}'s commands are a copy"
    finally:
        ours.close()
        ref.close()
    least = 10 if mode == AutoresetMode.SAME_STEP else STEPS // 3
    assert least < count.columns <= STEPS + 1, f"{count.columns} of {STEPS} steps vectorised natively"


def test_an_array_key_decodes_to_new_arrays_of_its_bytes_and_a_bad_one_names_what_is_wrong(monkeypatch):
    first, second = _typed_message(monkeypatch, MutableInfoEnv)
    pairs = _native.typed_dicts(first, NUM_ENVS) + _native.typed_dicts(second, NUM_ENVS)
    assert list(pairs[0][1]) == ["t", "mask", "pos", "grid", "seen", "none_yet", "commands", "path"]
    info = pairs[3][1]
    assert [type(v) for v in info.values()] == [int] + [np.ndarray] * 5 + [list] * 2
    assert info["commands"] == ["go north", "take key", "open door \u2192 d\u00e9j\u00e0"]
    assert pairs[0][1]["commands"] == [] and pairs[1][1]["commands"] == ["go north"]
    assert info["path"] == [0, 1.5, True, 0, None, 3.0]
    assert [type(v) for v in info["path"]] == [int, float, bool, np.int8, type(None), np.float32]
    assert info["mask"].dtype == bool and info["mask"].tolist() == [True, True, True]
    assert info["grid"].dtype == np.int16 and info["grid"].tolist() == [[-12, -8, -4], [0, 4, 8]]
    assert info["seen"].shape == () and info["seen"] == np.uint64(2**64 - 1)
    assert info["none_yet"].shape == (0, 4) and info["none_yet"].dtype == np.complex64
    assert info["pos"].flags.c_contiguous and info["pos"].flags.writeable and info["pos"].flags.owndata
    columns = _native.typed_columns([first, second], None, NUM_ENVS)
    assert columns["grid"].shape == (NUM_ENVS, 2, 3) and columns["grid"].dtype == np.int16
    assert columns["grid"][3].tolist() == info["grid"].tolist() and columns["_grid"].all()
    assert columns["pos"].tolist() == [[0.0, 0.0], [0.0, -1.0], [0.0, -2.0], [0.0, -3.0]]
    assert columns["seen"].shape == (NUM_ENVS,) and columns["none_yet"].shape == (NUM_ENVS, 0, 4)
    assert columns["commands"].dtype == object and columns["commands"].shape == (NUM_ENVS,)
    assert list(columns["commands"]) == [pairs[i][1]["commands"] for i in range(NUM_ENVS)]
    assert type(columns["path"][2]) is list and columns["path"][2] is not pairs[2][1]["path"]

    def array_message(num, shape, cells, data):
        name = b"pos"
        head = b"a" + bytes([num]) + struct.pack("=H", len(name)) + bytes([len(shape)])
        head += b"".join(struct.pack("=I", d) for d in shape) + name
        return b"\0RTI" + struct.pack("=IIHI", 0, len(cells), 1, len(data)) + head + b"".join(cells) + data

    data = np.array([1.5, -2.0, 3.0, 4.0], dtype=np.float32).tobytes()
    f32, whole = np.dtype(np.float32).num, struct.pack("=II", 0, 8)
    good = array_message(f32, [2], [whole, struct.pack("=II", 8, 8)], data)
    assert _native.typed_columns([good], None, 2)["pos"].tolist() == [[1.5, -2.0], [3.0, 4.0]]
    for bad, what in [
        (array_message(f32, [3], [whole], data), "an array of 8 bytes for shape \\[3\\] of 12 bytes"),
        (array_message(f32, [2], [struct.pack("=II", 12, 8)], data), "an array of 8 bytes at 12 of a data section of 16"),
        (array_message(np.dtype(object).num, [2], [whole], data), "not a typed array dtype"),
        (array_message(np.dtype("datetime64[s]").num, [2], [whole], data), "not a typed array dtype"),
        (array_message(f32, [1] * 33, [whole], data), "an array key of 33 dimensions"),
        (array_message(f32, [2**31, 2**31, 2**31], [whole], data), "too large"),
        (array_message(f32, [2], [whole], b""), "an array of 8 bytes at 0 of a data section of 0"),
    ]:
        for call in (lambda: _native.typed_dicts(bad, 2), lambda: _native.typed_columns([bad], [0], 2)):
            with pytest.raises(ValueError, match=what):
                call()


def test_a_list_key_decodes_to_new_lists_of_its_items_and_a_bad_one_names_what_is_wrong():
    def list_message(cell, data):
        head = b"l\0" + struct.pack("=H", 8) + b"commands"
        return b"\0RTI" + struct.pack("=IIHI", 0, 1, 1, len(data)) + head + cell + data

    text = "d\u00e9j\u00e0".encode()
    items = (b"s\0" + struct.pack("=II", 0, len(text)) + b"i\0" + struct.pack("=q", -3) + b"z\0" + bytes(8)
             + b"n" + bytes([np.dtype(np.uint16).num]) + struct.pack("=H", 7) + bytes(6))
    good = list_message(struct.pack("=II", len(text), len(items)), text + items)
    ((_, info),) = _native.typed_dicts(good, 1)
    assert info == {"commands": ["d\u00e9j\u00e0", -3, None, 7]}
    assert [type(v) for v in info["commands"]] == [str, int, type(None), np.uint16]
    assert _native.typed_columns([good], None, 1)["commands"][0] == info["commands"]
    empty = list_message(struct.pack("=II", 0, 0), b"")
    assert _native.typed_dicts(empty, 1) == [(0, {"commands": []})]
    for bad, what in [
        (list_message(struct.pack("=II", len(text), len(items) - 1), text + items), "not whole items of 10"),
        (list_message(struct.pack("=II", len(text), len(items) + 10), text + items), "a list of 50 bytes at 6 of a data section of 46"),
        (list_message(struct.pack("=II", 0, 10), b"y\0" + bytes(8)), "unknown value kind .* in a list"),
        (list_message(struct.pack("=II", 0, 10), b"s\0" + struct.pack("=II", 0, 99)), "a string of 99 bytes"),
    ]:
        for call in (lambda: _native.typed_dicts(bad, 1), lambda: _native.typed_columns([bad], None, 1)):
            with pytest.raises(ValueError, match=what):
                call()


def test_the_shares_list_column_entries_are_its_envs_own_lists_and_a_bad_payload_names_what_it_must_be():
    """The inline share hands over ``(None, [(env_id, info), ...], message)``: a list key's column
    entry for its env is that env's own list (``SyncVectorEnv``'s column holds it), the decoded
    copy where the pair does not match the message (another env id, another value), and a
    worker's message beside it is decoded."""
    def list_message(first, words):
        data = b"".join(w.encode() for w in words)
        items, at = b"", 0
        for w in words:
            items += b"s\0" + struct.pack("=II", at, len(w.encode()))
            at += len(w.encode())
        head = b"l\0" + struct.pack("=H", 8) + b"commands"
        return (b"\0RTI" + struct.pack("=IIHI", first, 1, 1, len(data) + len(items)) + head
                + struct.pack("=II", len(data), len(items)) + data + items)

    worker, share = list_message(0, ["look"]), list_message(1, ["go north", "take key"])
    own = ["go north", "take key"]
    column = _native.typed_columns([worker, (None, [(1, {"commands": own})], share)], None, 2)["commands"]
    assert column[0] == ["look"] and column[1] is own
    # (the env's list is what SyncVectorEnv's column would hold, whatever it holds now)
    changed = ["go north", "take key", "open door"]
    assert _native.typed_columns([worker, (None, [(1, {"commands": changed})], share)], None, 2)["commands"][1] is changed
    for pairs in ([(0, {"commands": own})], [(1, {"commands": tuple(own)})], [(1, {})], []):
        column = _native.typed_columns([worker, (None, pairs, share)], None, 2)["commands"]
        assert column[1] == own and column[1] is not own, pairs
    for bad in ("text", (None, [], "text"), (None, (), share), (None, share)):
        with pytest.raises(ValueError, match=r"must be bytes or the inline share's \(None, \[\(env_id, info\), \.\.\.\], bytes\)"):
            _native.typed_columns([worker, bad], None, 2)


# Per-step infos travel through each worker's info arena in the segment, not the control socket:
# only a payload larger than the arena (64 KiB by default) goes on the socket. These tests count
# the messages on each worker's control socket (``Pool.control_message_counts``).


def _counts(vec):
    return [vec._pool.control_message_counts(w) for w in range(vec._pool.num_workers)]


def _arena_fns(blob: int = 0):
    return [functools.partial(EveryStepInfoEnv, blob) for _ in range(NUM_ENVS)]


def test_per_step_infos_cost_no_control_message_and_equal_gymnasium():
    ours, ref = make_ours(_arena_fns()), make_ref(_arena_fns())
    try:
        assert ours._pool.num_workers == 2
        before = _counts(ours)
        ends = run_lockstep(ours, ref, seed=3, steps=40)
        assert ends > 0, "some episodes must end, so autoreset infos are covered"
        # One reset and 40 steps, every one with non-empty infos in every env: no message on
        # any worker's control socket, either way.
        assert _counts(ours) == before
    finally:
        ours.close()
        ref.close()


def test_infos_too_large_for_the_arena_fall_back_to_the_socket_and_equal_gymnasium():
    blob = 40_000  # two envs per worker: ~80 KB of infos per worker per step, over the 64 KiB arena
    ours, ref = make_ours(_arena_fns(blob)), make_ref(_arena_fns(blob))
    try:
        before = _counts(ours)
        steps = 12
        run_lockstep(ours, ref, seed=5, steps=steps)
        after = _counts(ours)
        for (sent0, recv0), (sent1, recv1) in zip(before, after):
            assert sent1 == sent0
            assert recv1 - recv0 == steps + 1, "each reset and step sends its infos on the socket"
    finally:
        ours.close()
        ref.close()


def test_call_results_come_back_through_the_arena():
    ours, ref = make_ours(_arena_fns()), make_ref(_arena_fns())
    try:
        ours.reset(seed=0)
        ref.reset(seed=0)
        before = _counts(ours)
        assert ours.get_attr("length") == ref.get_attr("length")
        after = _counts(ours)
        for (sent0, recv0), (sent1, recv1) in zip(before, after):
            assert (sent1 - sent0, recv1 - recv0) == (1, 0), "the request goes on the socket, the results do not"
    finally:
        ours.close()
        ref.close()


def test_a_corrupt_arena_length_is_a_typed_error_not_a_crash():
    ours = make_ours(_arena_fns(), on_worker_failure="raise")
    try:
        ours.reset(seed=0)
        layout = ours._pool.layout()
        at, size = layout["info_arena_offsets"][0], layout["info_arena_bytes"]
        seg = np.frombuffer(ours._pool.segment(), dtype=np.uint8)
        (seq0,) = struct.unpack_from("=Q", seg, at + 8)
        ours.step_async(np.zeros(NUM_ENVS, dtype=np.int64))
        # Wait until worker 0 left this step's infos in its arena, then corrupt their length
        # before the main process reads them (it reads only in step_wait).
        deadline = time.monotonic() + 30
        while struct.unpack_from("=Q", seg, at + 8)[0] == seq0:
            assert time.monotonic() < deadline, "worker 0 never wrote its arena"
            time.sleep(0.001)
        time.sleep(0.05)  # let the worker finish publishing the completion
        struct.pack_into("=Q", seg, at, size * 4)
        with pytest.raises(ringenv.errors.WorkerDiedError) as e:
            ours.step_wait()
        assert "info arena" in str(e.value) and "capacity" in str(e.value), str(e.value)
    finally:
        ours.close()


def test_infos_plain_pickle_refuses_still_arrive():
    ours = make_ours([LambdaInfoEnv for _ in range(NUM_ENVS)])
    try:
        ours.reset(seed=1)
        for t in range(1, 4):
            _, _, terminated, truncated, infos = ours.step(np.ones(NUM_ENVS, dtype=np.int64))
            assert list(infos["_fn"]) == [True] * NUM_ENVS
            assert [f(10) for f in infos["fn"]] == [10 + t] * NUM_ENVS
            assert not (terminated | truncated).any()
    finally:
        ours.close()


def test_an_arena_of_zero_bytes_sends_every_payload_on_the_socket(monkeypatch):
    from ringenv import _native

    real = _native.Pool

    class ZeroArenaPool:  # the native Pool, built with an arena of zero bytes
        segment_size = staticmethod(real.segment_size)

        def __new__(cls, *a, **k):
            return real(*a, info_arena_bytes=0, **k)

    monkeypatch.setattr(_native, "Pool", ZeroArenaPool)
    ours, ref = make_ours(_arena_fns()), make_ref(_arena_fns())
    try:
        assert ours._pool.layout()["info_arena_bytes"] == 0
        before = _counts(ours)
        steps = 10
        run_lockstep(ours, ref, seed=7, steps=steps)
        for (_, recv0), (_, recv1) in zip(before, _counts(ours)):
            assert recv1 - recv0 == steps + 1
    finally:
        ours.close()
        ref.close()


def _assert_each_identical(actual, expected, what):
    """Lists of info dicts, element by element."""
    assert isinstance(actual, list) and len(actual) == len(expected), what
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert_tree_identical(a, e, f"{what}[{i}]")


def test_env_infos_are_each_envs_own_dicts_and_vector_infos_false_skips_vectorising(closing):
    kwargs = dict(num_workers=2, autoreset_mode=AutoresetMode.SAME_STEP)
    plain = closing(ringenv.AsyncVectorEnv([InfoEnv] * NUM_ENVS, **kwargs))
    raw = closing(ringenv.AsyncVectorEnv([InfoEnv] * NUM_ENVS, vector_infos=False, **kwargs))
    local = [InfoEnv() for _ in range(NUM_ENVS)]
    _, infos = plain.reset(seed=5)
    assert raw.reset(seed=5)[1] == {}
    expected = [env.reset(seed=5 + i)[1] for i, env in enumerate(local)]
    _assert_each_identical(raw.env_infos(), expected, "reset env_infos")
    _assert_each_identical(plain.env_infos(), expected, "env_infos beside vectorised infos")
    assert set(infos) >= {"length", "_length"}  # the default still vectorises
    rng = np.random.default_rng(0)
    ends = 0
    for t in range(40):
        actions = rng.integers(0, 3, NUM_ENVS)
        plain.step(actions)
        assert raw.step(actions)[4] == {}
        got = raw.env_infos()
        assert isinstance(got, list) and len(got) == NUM_ENVS
        if t < 2:  # no episode has ended yet (they last 3 steps or more): the env's own step infos
            _assert_each_identical(got, [env.step(a)[4] for env, a in zip(local, actions)], f"step {t}")
        _assert_each_identical(got, plain.env_infos(), f"step {t}")
        ends += sum("final_info" in info for info in got)
    assert ends > 5


def test_env_infos_of_a_recv_batch(closing):
    envs = closing(ringenv.AsyncVectorEnv([InfoEnv] * NUM_ENVS, num_workers=2, batch_size=2, vector_infos=False))
    envs.async_reset(seed=0)
    *_, infos = envs.recv()
    ids = infos["env_id"]
    assert set(infos) == {"env_id"} and len(ids) == 2
    got = envs.env_infos()
    assert all(("length" in got[i]) == (i in ids) for i in range(NUM_ENVS)), got
