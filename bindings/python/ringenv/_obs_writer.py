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
value (a list, a wrong shape) and any other space (Text, OneOf, ...) goes through Gymnasium's own
function, so its result and errors stay exactly Gymnasium's.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import write_to_shared_memory

from ringenv._layout import FLAT_SPACES

Writer = Callable[[Any], None]

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
                write_to_shared_memory(space, index, values, memory)  # Gymnasium's result or error
                return
            for write, value in zip(items, values):
                write(value)

        return write_tuple
    return lambda value: write_to_shared_memory(space, index, value, memory)


def _leaf_writer(space: spaces.Space, index: int, memory: Any) -> Writer:
    shape = tuple(space.shape or ())
    size = int(np.prod(shape, dtype=np.int64))
    flat = np.frombuffer(memory.get_obj(), dtype=space.dtype)[index * size:(index + 1) * size]
    view = flat.reshape(shape)  # a view: the slice is contiguous
    scalar = shape == ()

    def write_leaf(value: Any) -> None:
        if (type(value) is np.ndarray or isinstance(value, np.generic)) and value.shape == shape:
            np.copyto(view, value, casting="unsafe")
        elif scalar and type(value) in _PYTHON_SCALARS:
            view[()] = value
        else:
            write_to_shared_memory(space, index, value, memory)

    return write_leaf
