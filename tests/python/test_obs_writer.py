"""The worker's writer of composite observations (ringenv._obs_writer): the same bytes and errors
as Gymnasium's write_to_shared_memory, with one copy per leaf (no temporary of the leaf's size)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import create_shared_memory, write_to_shared_memory

from ringenv import _layout, _obs_writer

N = 3

SPACE = spaces.Dict({
    "image": spaces.Box(0, 255, (5, 4, 3), np.uint8),
    "pos": spaces.Box(-1.0, 1.0, (2,), np.float32),
    "count": spaces.Discrete(5),
    "md": spaces.MultiDiscrete([3, 4]),
    "mb": spaces.MultiBinary(3),
    "nested": spaces.Dict({"grid": spaces.Box(-100, 100, (3, 3), np.int16)}),
    "t": spaces.Tuple((spaces.Box(0, 10, (), np.int64), spaces.Text(5))),
})


def _memories(space):
    leaves = _layout.plan(space, N)
    sizes = [_layout.leaf_bytes(leaf) * N for leaf in leaves]
    ours = [np.zeros(s, np.uint8) for s in sizes]
    ref = [np.zeros(s, np.uint8) for s in sizes]

    def bind(bufs):
        from ringenv._layout import _Context
        return create_shared_memory(space, n=N, ctx=_Context(bufs))

    return ours, bind(ours), ref, bind(ref)


def _values():
    rng = np.random.default_rng(0)
    v = SPACE.sample()
    yield "sample", v
    w = dict(v)
    w["pos"] = rng.normal(size=2)  # float64 into float32: cast as np.asarray(value, float32) casts
    w["image"] = rng.integers(0, 300, (5, 4, 3))  # int64 into uint8: wraps as Gymnasium wraps
    w["count"] = 3  # a Python int
    w["md"] = [2, 1]  # a list
    w["mb"] = np.array([True, False, True])  # bools into int8
    yield "casts", w
    x = dict(v)
    x["pos"] = np.ones((1, 2))  # same size, other shape: Gymnasium flattens it
    x["nested"] = {"grid": np.arange(9)}  # flat grid of the right size
    yield "reshapes", x


@pytest.mark.parametrize("what,value", list(_values()), ids=[w for w, _ in _values()])
def test_same_bytes_as_gymnasium(what, value):
    ours_bufs, ours_mem, ref_bufs, ref_mem = _memories(SPACE)
    for index in range(N):
        _obs_writer.writer(SPACE, index, ours_mem)(value)
        write_to_shared_memory(SPACE, index, value, ref_mem)
    for a, b in zip(ours_bufs, ref_bufs):
        assert a.tobytes() == b.tobytes(), what


def test_same_errors_as_gymnasium():
    _, ours_mem, _, ref_mem = _memories(SPACE)
    v = SPACE.sample()
    for bad in ({k: x for k, x in v.items() if k != "pos"}, {**v, "pos": np.zeros(5)}, {**v, "t": (1,)}):
        with pytest.raises(Exception) as ref_error:
            write_to_shared_memory(SPACE, 0, bad, ref_mem)
        with pytest.raises(type(ref_error.value)):
            _obs_writer.writer(SPACE, 0, ours_mem)(bad)


def test_one_copy_per_leaf_no_temporary():
    space = spaces.Dict({"a": spaces.Box(0, 255, (1 << 20,), np.uint8), "b": spaces.Box(0, 9, (1 << 17,), np.int64)})
    _, ours_mem, _, ref_mem = _memories(space)
    write = _obs_writer.writer(space, 1, ours_mem)
    value = space.sample()
    write(value)  # warm up
    tracemalloc.start()
    try:
        write(value)
        _, ours_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        write_to_shared_memory(space, 1, value, ref_mem)
        _, ref_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ref_peak >= 1 << 20, "Gymnasium's path makes a temporary copy of a leaf (flatten)"
    assert ours_peak < 64 << 10, f"the writer allocated {ours_peak} bytes writing 2 MiB of leaves"


#: Python scalars at and past the edges of every dtype below (and values NumPy warns about).
_EDGES = [0, 1, -1, 127, 128, 255, 256, -129, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -2**63 - 1,
          True, False, 0.5, -1.7, float("nan"), float("inf"), 1e300, 70000.0]


def _write_outcome(write, value):
    """``(bytes written, exception type, warning categories)`` of ``write(value)``."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            write(value)
            error = None
        except Exception as e:  # the type is compared
            error = type(e)
    return error, [w.category for w in caught]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int64, np.uint64, np.float16, np.float32,
                                   np.float64, np.bool_])
def test_python_scalars_into_scalar_leaves_as_gymnasium(dtype):
    """A Python int, float or bool for a leaf of shape () (Blackjack's Tuple of Discretes) is
    assigned to the view: the bytes, the error and the warnings are Gymnasium's for every value."""
    space = spaces.Tuple((spaces.Box(0, 1, (), dtype), spaces.Discrete(3)))
    for value in _EDGES:
        ours_bufs, ours_mem, ref_bufs, ref_mem = _memories(space)
        for b in ours_bufs + ref_bufs:
            b[:] = 0xAB  # what a failed write must leave alone
        ours = _write_outcome(_obs_writer.writer(space, 1, ours_mem), (value, 2))
        ref = _write_outcome(lambda v: write_to_shared_memory(space, 1, v, ref_mem), (value, 2))
        assert ours == ref, (np.dtype(dtype).name, value)
        for a, b in zip(ours_bufs, ref_bufs):
            assert a.tobytes() == b.tobytes(), (np.dtype(dtype).name, value)


def test_python_scalars_skip_gymnasiums_path(monkeypatch):
    """The scalar path is taken (Gymnasium's function is not called) for a Python int, and not for
    a list of one int (a shape Gymnasium reshapes, left to it)."""
    space = spaces.Tuple((spaces.Discrete(5), spaces.Discrete(5)))
    _, mem, _, _ = _memories(space)
    write = _obs_writer.writer(space, 0, mem)
    calls = []
    monkeypatch.setattr(_obs_writer, "write_to_shared_memory", lambda *a: calls.append(a))
    write((3, 4))
    assert calls == []
    write(([3], 4))
    assert len(calls) == 1
