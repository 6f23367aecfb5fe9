"""Writing one env's observation of a composite space (Dict, Tuple) into its row of the segment,
one ``np.copyto`` per leaf.

Gymnasium's ``write_to_shared_memory`` writes each Box-like leaf as
``np.copyto(np.frombuffer(...)[row], np.asarray(value, dtype).flatten())``: a ``frombuffer`` and a
temporary copy (``flatten``) per leaf per step, so every byte is copied twice. :func:`writer`
builds, once per env and slot, a view of each leaf's row shaped like the leaf's space, and writes
a NumPy value of that shape with a single ``np.copyto(view, value, casting="unsafe")``: the same
bytes (``np.asarray(value, dtype)`` casts with the same unsafe rule) with one copy. A Python
``int``, ``float`` or ``bool`` for a leaf of shape ``()`` (a Discrete in a Tuple, as Blackjack's
observation) is assigned to the view, ``view[()] = value``: NumPy converts it as
``np.asarray(value, dtype)`` does, with the same bytes, errors and warnings
(``tests/python/test_obs_writer.py`` compares them over every dtype and edge value). Any other
value (a list, a wrong shape) and any other space (OneOf, ...) goes through Gymnasium's own
function, so its result and errors stay exactly Gymnasium's; a ``Text`` space through
:mod:`ringenv._text`, which writes the same codes without a Python step per character.

The host of a worker (``bindings/src/obs_copy.rs``) does not call :func:`writer` for each
observation: it walks the observation along :func:`plan` and copies each leaf that is a NumPy
array of its row's dtype, shape and C order with one ``memcpy`` (what ``np.copyto`` does for such
a value, without a Python call per leaf), and so a NumPy scalar of a row of shape ``()``'s dtype
(a Discrete's ``numpy.int64``); any other leaf goes to that leaf's writer below, and a
Dict or Tuple that is not a plain ``dict`` or ``tuple`` (of the right length, with every key) to
the whole observation's :func:`writer`, so results and errors stay the same.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import write_to_shared_memory

from ringenv import _text
from ringenv._layout import FLAT_SPACES

Writer = Callable[[Any], None]

#: One leaf of :func:`plan`: its row in the segment (``None`` for a leaf of no flat layout: Text
#: and other spaces) and its writer.
Leaf = Tuple[Optional[np.ndarray], Writer]

#: The Python scalar types a leaf of shape ``()`` takes by assignment (see the module's docstring).
_PYTHON_SCALARS = frozenset((int, float, bool))


def writer(space: spaces.Space, index: int, memory: Any) -> Writer:
    """A callable writing one observation of ``space`` into row ``index`` of ``memory`` (the
    Gymnasium shared-memory structure of ``space`` over the segment, from ``_layout.bind``),
    exactly as ``write_to_shared_memory(space, index, value, memory)`` does.

    Raises (from the returned callable) what ``write_to_shared_memory`` raises for a value that
    does not fit the space (``KeyError`` for a missing Dict key, ``ValueError`` for a wrong size).
    """
    if isinstance(space, FLAT_SPACES):
        return _leaf_writer(space, index, memory)
    if isinstance(space, spaces.Dict):
        children = [(key, writer(sub, index, memory[key])) for key, sub in space.spaces.items()]

        def write_dict(values: Any) -> None:
            for key, write in children:
                write(values[key])

        return write_dict
    if isinstance(space, spaces.Tuple):
        items = [writer(sub, index, mem) for sub, mem in zip(space.spaces, memory)]

        def write_tuple(values: Any) -> None:
            if type(values) is not tuple or len(values) != len(items):
                try:
                    count = len(values)
                except TypeError:  # no length: Gymnasium's error below
                    count = len(items)
                if count != len(items):  # Gymnasium before 1.4 zips the items without a check
                    raise ValueError(f"env {index} returned a Tuple observation of {count} items; its "
                                     f"observation space has {len(items)}: {space}")
                write_to_shared_memory(space, index, values, memory)  # Gymnasium's result
                return
            for write, value in zip(items, values):
                write(value)

        return write_tuple
    if type(space) is spaces.Text:
        return _text.writer(space, index, memory)  # Gymnasium's codes, without a step per character
    return lambda value: write_to_shared_memory(space, index, value, memory)


def plan(space: spaces.Space, index: int, memory: Any) -> Tuple[Any, List[Leaf]]:
    """How the Rust host walks an observation of a Dict or Tuple ``space`` into row ``index`` of
    ``memory`` (as for :func:`writer`): ``(tree, leaves)``.

    ``tree`` is ``("dict", [(key, subtree), ...])`` in the space's key order, ``("tuple",
    [subtree, ...])``, or ``("leaf", i)``; ``leaves[i]`` is ``(row, write)``: for a Box, Discrete,
    MultiDiscrete or MultiBinary leaf its row, a C-contiguous writable array of the leaf's shape
    and dtype over the segment, and for any other leaf ``None``; ``write`` writes a value of that
    leaf as :func:`writer` would. Leaves are numbered in the order :func:`writer` writes them.
    """
    leaves: List[Leaf] = []

    def walk(sub: spaces.Space, mem: Any) -> Any:
        if isinstance(sub, spaces.Dict):
            return ("dict", [(key, walk(s, mem[key])) for key, s in sub.spaces.items()])
        if isinstance(sub, spaces.Tuple):
            return ("tuple", [walk(s, m) for s, m in zip(sub.spaces, mem)])
        if isinstance(sub, FLAT_SPACES):
            leaves.append((_row(sub, index, mem), _leaf_writer(sub, index, mem)))
        else:
            leaves.append((None, writer(sub, index, mem)))
        return ("leaf", len(leaves) - 1)

    return walk(space, memory), leaves


def _row(space: spaces.Space, index: int, memory: Any) -> np.ndarray:
    """Row ``index`` of a flat leaf's shared memory, shaped like the space (a view)."""
    shape = tuple(space.shape or ())
    size = int(np.prod(shape, dtype=np.int64))
    flat = np.frombuffer(memory.get_obj(), dtype=space.dtype)[index * size:(index + 1) * size]
    return flat.reshape(shape)  # a view: the slice is contiguous


def _leaf_writer(space: spaces.Space, index: int, memory: Any) -> Writer:
    shape = tuple(space.shape or ())
    view = _row(space, index, memory)
    scalar = shape == ()

    def write_leaf(value: Any) -> None:
        if (type(value) is np.ndarray or isinstance(value, np.generic)) and value.shape == shape:
            np.copyto(view, value, casting="unsafe")
        elif scalar and type(value) in _PYTHON_SCALARS:
            view[()] = value
        else:
            write_to_shared_memory(space, index, value, memory)

    return write_leaf
