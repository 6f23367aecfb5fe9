"""Text observations encoded and decoded by ringenv._text: the codes Gymnasium's
write_to_shared_memory writes and the strings its read_from_shared_memory reads, for every value and
code (the slow paths included), and end to end through a vector env."""

from __future__ import annotations

import string

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

import ringenv
from ringenv import _layout, _text
from helper_envs import CounterEnv
from vec_asserts import assert_tree_identical

N = 3

CHARSETS = {
    "alphanumeric": None,  # Gymnasium's default
    "printable": string.printable,
    "accents and CJK": "aé漢字 z",
    "beyond U+FFFF": "ab\U0001F600",  # no lookup table: Gymnasium's encoder
}


def _space(charset, max_length=12):
    return spaces.Text(max_length) if charset is None else spaces.Text(max_length, charset=charset)


def _values(space):
    chars = space.character_list
    yield "".join(chars[i % len(chars)] for i in range(space.max_length))  # full length
    yield ""
    yield chars[-1] * 3
    yield list(chars[:2])  # not a str: Gymnasium iterates it
    yield np.str_(chars[0] * 2)  # a str subclass


def _bad_values(space):
    yield space.character_list[0] * (space.max_length + 1)  # too long
    yield "\x00"  # outside the charset
    yield "\ud800"  # a lone surrogate
    yield 7  # not iterable


def _outcome(fn):
    """``(error type or None, result)``."""
    try:
        return None, fn()
    except Exception as e:  # the type is compared
        return type(e), None


@pytest.mark.parametrize("charset", CHARSETS)
def test_writes_gymnasiums_codes_and_errors(charset):
    space = _space(CHARSETS[charset])
    ours_mem, ref_mem = create_shared_memory(space, n=N), create_shared_memory(space, n=N)
    write = _text.writer(space, 1, ours_mem)
    for value in [*_values(space), *_bad_values(space)]:
        for mem in (ours_mem, ref_mem):
            np.frombuffer(mem.get_obj(), np.int32)[:] = -7  # what a failed write must leave alone
        ours = _outcome(lambda: write(value))
        ref = _outcome(lambda: write_to_shared_memory(space, 1, value, ref_mem))
        _assert_same_outcome(ours, ref, value)
        assert bytes(ours_mem.get_obj()) == bytes(ref_mem.get_obj()), (charset, value)


def _assert_same_outcome(ours, ref, value):
    """Gymnasium's result; where Gymnasium fails (a bare ``KeyError: 97`` for ``b"a"``), a
    ``TypeError`` or ``ValueError`` that names the env (row 1) instead."""
    if ref[0] is None:
        assert ours[0] is None, value
    else:
        assert ours[0] in (TypeError, ValueError), (value, ours[0], ref[0])


@pytest.mark.parametrize("value,error,message", [
    (b"abc", TypeError, r"env 1 returned a Text observation of type bytes \(b'abc'\); its observation space "
                        r"Text\(1, 5, charset=ab\) holds a str"),
    (7, TypeError, r"env 1 returned a Text observation of type int \(7\)"),
    ("ababab", ValueError, r"env 1 returned a Text observation of 6 characters; its observation space "
                           r"Text\(1, 5, charset=ab\) holds at most 5"),
    ("axbyx", ValueError, r"env 1 returned a Text observation with characters outside its observation space's "
                          r"charset: 'xy'"),
], ids=["bytes", "int", "too-long", "outside-charset"])
def test_a_value_gymnasium_cannot_encode_is_an_error_naming_the_env_and_the_space(value, error, message):
    space = spaces.Text(5, charset="ab")
    mem = create_shared_memory(space, n=N)
    with pytest.raises(Exception) as gymnasium_error:  # Gymnasium's own write fails too
        write_to_shared_memory(space, 1, value, mem)
    assert not isinstance(gymnasium_error.value, error) or value == 7  # KeyError, IndexError: no env named
    with pytest.raises(error, match=message) as info:
        _text.writer(space, 1, mem)(value)
    assert info.value.__cause__ is not None  # Gymnasium's error, kept as the cause


def test_the_fast_encoder_takes_plain_strings_only():
    space = _space(None)
    row = np.zeros(space.max_length, np.int32)
    codec = _text.TextCodec(space)
    assert codec.encode_into(row, "abc")
    assert row[:3].tolist() == [space.character_index(c) for c in "abc"]
    assert (row[3:] == len(space.character_set)).all()
    for value in (["a"], "a" * 13, "a-b"):
        before = row.copy()
        assert not codec.encode_into(row, value)
        assert (row == before).all()
    assert not _text.TextCodec(_space(CHARSETS["beyond U+FFFF"])).encode_into(row, "ab")


class _OddChar(str):
    """A character equal only to its own kind: Gymnasium's index (a dict) finds no plain str."""

    __hash__ = str.__hash__

    def __eq__(self, other):
        return type(other) is _OddChar and str.__eq__(self, other)


def test_unusual_characters_and_indexes_are_left_to_gymnasium():
    """Characters that are not plain ``str`` and a ``character_index`` replaced on the space are
    Gymnasium's to encode (a table by code point would not see them)."""
    odd = spaces.Text(3, charset=[_OddChar("a"), _OddChar("b")])
    patched = spaces.Text(3, charset="ab")
    patched.character_index = lambda c: 2**40
    for space, value in ((odd, "ab"), (patched, ""), (patched, "a")):
        ours_mem, ref_mem = create_shared_memory(space, n=N), create_shared_memory(space, n=N)
        ours = _outcome(lambda: _text.writer(space, 1, ours_mem)(value))
        ref = _outcome(lambda: write_to_shared_memory(space, 1, value, ref_mem))
        _assert_same_outcome(ours, ref, value)
        assert bytes(ours_mem.get_obj()) == bytes(ref_mem.get_obj()), value


@pytest.mark.parametrize("charset", CHARSETS)
def test_reads_gymnasiums_strings_from_any_codes(charset):
    space = _space(CHARSETS[charset])
    pad = len(space.character_set)
    rng = np.random.default_rng(0)
    mem = create_shared_memory(space, n=N)
    codes = np.frombuffer(mem.get_obj(), np.int32).reshape(N, space.max_length)
    read = _layout.reader(space, mem, N)
    cases = {
        "written": None,
        "padding inside": lambda c: c.__setitem__((0, 2), pad),
        "codes past the padding": lambda c: c.__setitem__((1, slice(0, 3)), [pad + 1, 10**6, 2**31 - 1]),
        "negative, indexing from the end": lambda c: c.__setitem__((2, 0), -1),
        "random in range": lambda c: c.__setitem__(slice(None), rng.integers(-pad, pad + 2, c.shape)),
        "below -len: IndexError": lambda c: c.__setitem__((1, 4), -pad - 1),
    }
    for name, corrupt in cases.items():
        for i, value in enumerate(list(_values(space))[:N]):
            write_to_shared_memory(space, i, value, mem)
        if corrupt is not None:
            corrupt(codes)
        ours = _outcome(read)
        ref = _outcome(lambda: read_from_shared_memory(space, mem, n=N))
        assert ours == ref, (charset, name)


class TextEnv(CounterEnv):
    """A text world's observation: a Dict of a long Text and a Box, or the Text alone."""

    def __init__(self, env_index, nested):
        super().__init__(env_index)
        text = spaces.Text(300, charset=string.ascii_letters + " .,0123456789")
        self.observation_space = spaces.Dict({"text": text, "hp": spaces.Box(0, 9, (2,), np.int64)}) if nested else text
        self.nested = nested

    def _obs(self):
        text = (f"env {self.env_index} step {self.t}. " + "You see a door, a key and a lamp. " * (self.t % 9))[:300]
        return {"text": text, "hp": np.array([self.t % 9, self.env_index])} if self.nested else text


@pytest.mark.parametrize("nested", [False, True], ids=["Text", "Dict with Text"])
@pytest.mark.parametrize("host", [dict(num_workers=1, inline=False), dict(num_workers=0)], ids=["worker", "this process"])
def test_text_observations_through_a_vector_env_equal_sync_vector_envs(nested, host):
    fns = [lambda i=i: TextEnv(i, nested) for i in range(N)]
    ours, ref = ringenv.AsyncVectorEnv(fns, **host), gym.vector.SyncVectorEnv(fns)
    try:
        assert_tree_identical(ours.reset(seed=0)[0], ref.reset(seed=0)[0])
        for _ in range(12):
            a = np.zeros(N, np.int64)
            assert_tree_identical(ours.step(a)[0], ref.step(a)[0])
    finally:
        ours.close()
        ref.close()


class _RewrittenAfterTheMask(np.ndarray):
    """Codes that another process rewrites to padding right after they are compared with the
    padding code (what a worker writing rows of the same slot can do while an asynchronous batch
    reads it): the read of a decoder that looks at them twice gathers padding codes."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        result = super().__array_ufunc__(ufunc, method, *(np.asarray(x) for x in inputs), **kwargs)
        if ufunc is np.less:
            self.view(np.ndarray)[...] = self.pad
        return result


def test_a_row_rewritten_while_it_is_decoded_decodes_without_an_error():
    space = spaces.Text(4, charset="abc")
    codec = _text.TextCodec(space)
    data = np.array([[0, 1, 2, 3], [2, 2, 3, 3]], np.int32).view(_RewrittenAfterTheMask)
    data.pad = codec.pad
    assert codec.decode(data) == ("abc", "cc")  # the codes as they were when read, once
