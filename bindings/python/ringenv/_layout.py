"""How Gymnasium spaces are laid out in ringenv's shared memory segment.

ringenv reuses Gymnasium's ``create_shared_memory`` / ``read_from_shared_memory`` /
``write_to_shared_memory``, so every space is encoded exactly as Gymnasium's
``AsyncVectorEnv(shared_memory=True)`` encodes it; here a multiprocessing-like context hands out
*leaves*: regions of the segment, one contiguous ``[num_envs, ...]`` array per leaf. Spaces with
no fixed layout have no leaves and travel pickled; a ``Dict`` with values of both kinds is split
(:func:`observation_layout`). ``Text`` leaves are read by :mod:`ringenv._text` (:func:`reader`).
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from gymnasium import spaces
from gymnasium.error import CustomSpaceError
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory

from ringenv import _text

# (numpy dtype name, elements per env) of one leaf: what the Rust layout needs.
LeafSpec = Tuple[str, List[int]]

#: Spaces written through a single NumPy view per env (no Python call per step).
FLAT_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)

#: The most observation and action leaves a segment holds (``MAX_LEAVES`` in
#: ``runtime/src/layout.rs``): the values of a space with more travel pickled (:func:`observation_layout`).
MAX_LEAVES = 32
#: The most dimensions a leaf's row declares (``MAX_NDIM`` there): a flat space of more is laid
#: out as its element count (:func:`plan`; every reader and writer views it with the space's shape).
MAX_NDIM = 8


class _Leaf:
    """Stands in for a ``multiprocessing.Array``: ``get_obj()`` is a flat byte array over the
    leaf's region of the segment (or ``None`` while only the layout is being planned)."""

    __slots__ = ("dtype", "size", "buffer")

    def __init__(self, dtype: np.dtype, size: int):
        self.dtype, self.size, self.buffer = dtype, size, None

    def get_obj(self):
        return self.buffer


class _Context:
    """A multiprocessing-like context that records the leaves Gymnasium asks for and hands out the
    given byte arrays (``buffers``, in order; none while only the layout is planned)."""

    def __init__(self, buffers: Sequence[np.ndarray] = ()):
        self.leaves: List[_Leaf] = []
        self._buffers = iter(buffers)

    def Array(self, typecode, size):  # noqa: N802 - the multiprocessing name
        """The leaf Gymnasium asks for as ``Array(typecode, size)``; numbers of more than 8 bytes
        (``np.longdouble``, ``np.clongdouble``), which the segment's arrays do not hold, as their
        bytes (``uint8``): Gymnasium 1.4 asks for them so, before 1.4 as their own typecode, and
        every version reads and writes them through ``np.frombuffer(..., dtype=space.dtype)``."""
        dtype = np.dtype(np.bool_ if typecode is ctypes.c_bool else typecode)
        leaf = (_Leaf(np.dtype(np.uint8), int(size) * dtype.itemsize) if dtype.itemsize > 8
                else _Leaf(dtype, int(size)))
        leaf.buffer = next(self._buffers, None)
        self.leaves.append(leaf)
        return leaf


def plan(space: spaces.Space, num_envs: int) -> Optional[List[LeafSpec]]:
    """The leaves of ``space`` for ``num_envs`` envs, or ``None`` when the space has no fixed layout
    (its values must travel pickled)."""
    if is_flat(space):
        shape = list(space.shape or ())
        if len(shape) > MAX_NDIM:
            shape = [int(np.prod(shape, dtype=np.int64))]
        return [(np.dtype(space.dtype).name, shape)]
    ctx = _Context()
    try:
        create_shared_memory(space, n=num_envs, ctx=ctx)  # type: ignore[arg-type]  # a duck-typed context
    except (TypeError, CustomSpaceError, NotImplementedError):
        return None
    leaves = []
    for leaf in ctx.leaves:
        if leaf.size % num_envs:
            return None
        leaves.append((leaf.dtype.name, [leaf.size // num_envs]))
    return leaves


class ObservationLayout(NamedTuple):
    """Where a vector env's observations go (:func:`observation_layout`).

    Attributes:
        leaves: the leaves of ``space`` in the segment (:func:`plan`).
        space: the space laid out in the segment: the single observation space, or for a split
            ``Dict`` the ``Dict`` of its values that have a layout (in the space's key order).
        pickled: ``None``, or for a split ``Dict`` the ``Dict`` of its other values (in the
            space's key order), which travel pickled: one ``dict`` of them per env.
    """

    leaves: List[LeafSpec]
    space: spaces.Space
    pickled: Optional[spaces.Dict]


def observation_layout(space: spaces.Space, num_envs: int, action_leaves: int) -> Optional[ObservationLayout]:
    """Where observations of ``space`` go for ``num_envs`` envs beside ``action_leaves`` action
    leaves: its :func:`plan` when it has one of at most ``MAX_LEAVES - action_leaves`` leaves; for a
    ``Dict`` that has none (or one of more leaves) but some of whose values do (its top-level keys
    only), the plan of those values, taken in the space's key order while their leaves fit, and the
    ``Dict`` of the others, which travel pickled; else ``None``: every observation travels pickled.
    Computed alike in the main process and in each worker."""
    budget = MAX_LEAVES - action_leaves
    leaves = plan(space, num_envs)
    if leaves is not None and len(leaves) <= budget:
        if is_flat(space) and np.dtype(space.dtype).itemsize > 8:
            # longdouble: the segment's arrays hold numbers of at most 8 bytes; its rows are
            # laid out as bytes (every reader and writer views them with the space's dtype).
            leaves = [("uint8", [leaf_bytes(leaves[0])])]
        return ObservationLayout(leaves, space, None)
    if type(space) is not spaces.Dict:
        return None
    laid: "OrderedDict[str, spaces.Space]" = OrderedDict()
    for key, sub in space.spaces.items():
        sub_leaves = plan(sub, num_envs)
        if sub_leaves is not None and len(sub_leaves) <= budget:
            laid[key] = sub
            budget -= len(sub_leaves)
    if not laid:
        return None
    # OrderedDicts: a plain dict would make Gymnasium sort the keys.
    shared = spaces.Dict(laid)
    pickled = spaces.Dict(OrderedDict((key, sub) for key, sub in space.spaces.items() if key not in laid))
    leaves = plan(shared, num_envs)
    # No bytes to lay out (only empty Dicts or Tuples): the whole observation travels pickled.
    return ObservationLayout(leaves, shared, pickled) if leaves else None


def bind(space: spaces.Space, num_envs: int, segment, offsets: Sequence[int], leaves: Sequence[LeafSpec]):
    """The Gymnasium shared-memory structure of ``space`` over the leaves at ``offsets`` of
    ``segment`` (for ``read_from_shared_memory`` / ``write_to_shared_memory``)."""
    buffers = [
        np.frombuffer(segment, dtype=np.uint8, count=num_envs * leaf_bytes(leaf), offset=off)
        for off, leaf in zip(offsets, leaves)
    ]
    return create_shared_memory(space, n=num_envs, ctx=_Context(buffers))  # type: ignore[arg-type]


def leaf_bytes(leaf: LeafSpec) -> int:
    """Bytes of one env's row of a leaf."""
    dtype, shape = leaf
    return np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64))


def flat_view(space: spaces.Space, num_envs: int, segment, offset: int) -> np.ndarray:
    """The ``(num_envs, *space.shape)`` array of a single-leaf ``FLAT_SPACES`` space."""
    shape = tuple(space.shape or ())
    count = num_envs * int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(segment, dtype=space.dtype, count=count, offset=offset).reshape((num_envs, *shape))


def is_flat(space: spaces.Space) -> bool:
    """Whether ``space`` is one contiguous array per env that NumPy assignment writes exactly as
    ``write_to_shared_memory`` would."""
    return isinstance(space, FLAT_SPACES)


def from_dict(d: dict) -> spaces.Space:
    """The Gymnasium space of a Rust env's space description (``Space::to_json`` in the
    ``ringenv-worker`` crate, as ``_native.builtin_spaces`` returns it and a worker binary's
    ``describe`` prints it).

    Kinds: ``box`` (``dtype``, ``shape``, ``low``, ``high``: one bound per element, row-major,
    infinities as ``"inf"`` / ``"-inf"``; integer bounds are clipped to the dtype's range),
    ``discrete`` (``n``, ``start``), ``multi_discrete`` (``nvec``, ``start``, ``dtype``),
    ``multi_binary`` (``n``: the shape), ``dict`` (``spaces``: ``[key, space]`` pairs, kept in
    that order) and ``tuple`` (``spaces``).

    Raises:
        ValueError: an unknown kind or dtype, or bounds that are not one per element.
    """
    kind = d.get("kind")
    if kind == "box":
        dtype = np.dtype(d["dtype"])
        shape = tuple(int(n) for n in d["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        bounds = []
        for name in ("low", "high"):
            values = [float(v) for v in d[name]]
            if len(values) != count:
                raise ValueError(f"Box {name} has {len(values)} values for shape {shape} ({count} elements)")
            if np.issubdtype(dtype, np.integer) or dtype == np.bool_:
                if dtype == np.bool_:
                    lo, hi = 0, 1
                else:
                    lo, hi = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
                # Python ints compare exactly with floats, so int64 bounds such as 2**63 - 1 survive.
                clipped = [lo if v <= lo else hi if v >= hi else int(v) for v in values]
                bounds.append(np.array(clipped, dtype=dtype).reshape(shape))
            else:
                bounds.append(np.array(values, dtype=np.float64).astype(dtype).reshape(shape))
        return spaces.Box(low=bounds[0], high=bounds[1], shape=shape, dtype=dtype)  # type: ignore[arg-type]
    if kind == "discrete":
        return spaces.Discrete(int(d["n"]), start=int(d["start"]))
    if kind == "multi_discrete":
        dtype = np.dtype(d["dtype"])
        nvec, start = np.array(d["nvec"], dtype=dtype), np.array(d["start"], dtype=dtype)
        return spaces.MultiDiscrete(nvec, dtype=dtype, start=start)
    if kind == "multi_binary":
        dims = [int(n) for n in d["n"]]
        return spaces.MultiBinary(dims[0] if len(dims) == 1 else dims)
    if kind == "dict":
        return spaces.Dict([(str(k), from_dict(v)) for k, v in d["spaces"]])
    if kind == "tuple":
        return spaces.Tuple([from_dict(v) for v in d["spaces"]])
    raise ValueError(f"unknown space kind {kind!r} in {d!r}")


def reader(space: spaces.Space, memory: Any, n: int) -> Callable[[], Any]:
    """A callable returning ``read_from_shared_memory(space, memory, n=n)`` (``memory``: the space's
    shared memory from :func:`bind`): the same batch, each ``Text`` leaf decoded by
    :mod:`ringenv._text` instead of a Python step per character."""
    if type(space) is spaces.Text:
        return _text.reader(space, memory, n)
    if type(space) is spaces.Dict:
        parts = [(key, reader(sub, memory[key], n)) for key, sub in space.spaces.items()]
        return lambda: {key: read() for key, read in parts}
    if type(space) is spaces.Tuple:
        items = [reader(sub, mem, n) for sub, mem in zip(space.spaces, memory)]
        return lambda: tuple(read() for read in items)
    return lambda: read_from_shared_memory(space, memory, n=n)
