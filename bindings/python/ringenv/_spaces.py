"""How Gymnasium spaces map onto the segment's fixed byte layout, and NumPy views of it.

Supported here: ``Box`` (any NumPy dtype of fixed size) and ``Discrete`` (an ``int64`` scalar per
env, as Gymnasium batches it).
"""

from __future__ import annotations

from typing import List, Tuple

import numpy as np
from gymnasium import spaces

Spec = Tuple[str, List[int]]


def array_spec(space: spaces.Space, what: str) -> Spec:
    """The ``(numpy dtype name, shape)`` of one env's element of ``space``.

    Raises:
        NotImplementedError: for spaces without a fixed layout in this version (names the space).
    """
    if isinstance(space, spaces.Box):
        return np.dtype(space.dtype).name, list(space.shape)
    if isinstance(space, spaces.Discrete):
        return "int64", []
    raise NotImplementedError(
        f"ringenv does not support {what} space {space!r} yet; supported: Box, Discrete")


def from_dict(d: dict) -> spaces.Space:
    """The Gymnasium space of a built-in Rust env's space description."""
    if d["kind"] == "box":
        dtype = np.dtype(d["dtype"])
        shape = tuple(d["shape"])
        low = np.array(d["low"], dtype=np.float64).reshape(shape).astype(dtype)
        high = np.array(d["high"], dtype=np.float64).reshape(shape).astype(dtype)
        return spaces.Box(low=low, high=high, shape=shape, dtype=dtype)
    if d["kind"] == "discrete":
        return spaces.Discrete(d["n"], start=d["start"])
    raise ValueError(f"unknown space kind {d['kind']!r}")


def view(segment, offset: int, dtype: str, shape) -> np.ndarray:
    """A NumPy array over ``segment`` bytes at ``offset``; it keeps the mapping alive."""
    dt = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(segment, dtype=dt, count=count, offset=offset).reshape(shape)
