"""Writing one env's observation of a composite space (Dict, Tuple) into its row of the segment,
one ``np.copyto`` per leaf.

Gymnasium's ``write_to_shared_memory`` copies every byte twice (a ``flatten`` per leaf);
:func:`writer` builds once per env and slot a view of each leaf's row and writes a NumPy value
with one ``np.copyto(view, value, casting="unsafe")``, the same bytes. Any other value or space
goes through Gymnasium's own function, so results and errors stay Gymnasium's; a ``Text`` space
through :mod:`ringenv._text`. A worker's host (``bindings/src/obs_copy.rs``) copies plain NumPy
leaves itself along :func:`plan` and calls these writers for the rest.

A value that does not fit its leaf raises the exception type Gymnasium's function raises, its
message naming the env, the leaf's path (``['inner'][0]``), its space and the shapes
(:func:`misfit`).
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
    Gymnasium shared-memory structure of ``space`` over the segment, from ``_layout.bind``), exactly
    as ``write_to_shared_memory(space, index, value, memory)`` does."""
    return _writer(space, index, memory, "")


def _writer(space: spaces.Space, index: int, memory: Any, path: str) -> Writer:
    """:func:`writer` for the leaf or subtree at ``path`` of the observation (``""``: all of it)."""
    if isinstance(space, FLAT_SPACES):
        return _leaf_writer(space, index, memory, path)
    if isinstance(space, spaces.Dict):
        children = [(key, _writer(sub, index, memory[key], f"{path}[{key!r}]")) for key, sub in space.spaces.items()]

        def write_dict(values: Any) -> None:
            for key, write in children:
                try:
                    value = values[key]
                except KeyError:
                    raise KeyError(f"env {index} returned a Dict observation without the key {key!r} of its "
                                   f"space {space}{_at(path)}") from None
                write(value)

        return write_dict
    if isinstance(space, spaces.Tuple):
        items = [_writer(sub, index, mem, f"{path}[{i}]") for i, (sub, mem) in enumerate(zip(space.spaces, memory))]

        def write_tuple(values: Any) -> None:
            if type(values) is not tuple:
                try:
                    count = len(values)
                except TypeError:  # no length: Gymnasium's result or error
                    write_to_shared_memory(space, index, values, memory)
                    return
            else:
                count = len(values)
            if count != len(items):  # Gymnasium before 1.4 zips the items without a check
                raise ValueError(f"env {index} returned a Tuple observation of {count} items; its observation "
                                 f"space has {len(items)}: {space}{_at(path)}")
            for write, value in zip(items, values):  # as Gymnasium's function zips them
                write(value)

        return write_tuple
    if type(space) is spaces.Text:
        return _text.writer(space, index, memory)  # Gymnasium's codes, without a step per character
    return lambda value: write_to_shared_memory(space, index, value, memory)


def plan(space: spaces.Space, index: int, memory: Any) -> Tuple[Any, List[Leaf]]:
    """How the Rust host walks an observation of a Dict or Tuple ``space`` into row ``index`` of
    ``memory`` (as for :func:`writer`): ``(tree, leaves)``."""
    leaves: List[Leaf] = []

    def walk(sub: spaces.Space, mem: Any, path: str) -> Any:
        if isinstance(sub, spaces.Dict):
            return ("dict", [(key, walk(s, mem[key], f"{path}[{key!r}]")) for key, s in sub.spaces.items()])
        if isinstance(sub, spaces.Tuple):
            return ("tuple", [walk(s, m, f"{path}[{i}]") for i, (s, m) in enumerate(zip(sub.spaces, mem))])
        if isinstance(sub, FLAT_SPACES):
            leaves.append((_row(sub, index, mem), _leaf_writer(sub, index, mem, path)))
        else:
            leaves.append((None, _writer(sub, index, mem, path)))
        return ("leaf", len(leaves) - 1)

    return walk(space, memory, ""), leaves


def _row(space: spaces.Space, index: int, memory: Any) -> np.ndarray:
    """Row ``index`` of a flat leaf's shared memory, shaped like the space (a view)."""
    shape = tuple(space.shape or ())
    size = int(np.prod(shape, dtype=np.int64))
    flat = np.frombuffer(memory.get_obj(), dtype=space.dtype)[index * size:(index + 1) * size]
    return flat.reshape(shape)  # a view: the slice is contiguous


def _leaf_writer(space: spaces.Space, index: int, memory: Any, path: str = "") -> Writer:
    shape = tuple(space.shape or ())
    view = _row(space, index, memory)
    scalar = shape == ()

    def write_leaf(value: Any) -> None:
        try:
            if (type(value) is np.ndarray or isinstance(value, np.generic)) and value.shape == shape:
                np.copyto(view, value, casting="unsafe")
            elif scalar and type(value) in _PYTHON_SCALARS:
                view[()] = value
            else:
                write_to_shared_memory(space, index, value, memory)
        except (ValueError, TypeError, OverflowError) as e:
            raise misfit(index, path, space, value, e) from None

    return write_leaf


def _at(path: str) -> str:
    """Where a Dict or Tuple is in the observation: ``" (the value at ['inner'])"``, or nothing for
    the observation itself."""
    return f" (the value at {path})" if path else ""


def misfit(env_id: int, path: str, space: spaces.Space, value: Any, error: Exception) -> Exception:
    """The error for env ``env_id``'s observation ``value`` (the leaf at ``path``, ``""`` for the
    whole observation) that its ``space`` cannot hold, NumPy having raised ``error`` writing it: of
    ``error``'s type, naming the env, the path, the space, and the value's shape beside the space's
    (or, for a value of the space's shape, its type or dtype beside the space's dtype)."""
    if type(error) not in (ValueError, TypeError, OverflowError):
        return error
    expected = tuple(space.shape or ())
    try:
        got = np.shape(value)
    except Exception:  # a ragged sequence: NumPy's message says why
        got = None
    leaf = f"the space there, {space}," if path else f"its observation space {space}"
    if got is not None and got != expected:
        what = f"whose value at {path} has shape {got}" if path else f"of shape {got}"
        return type(error)(f"env {env_id} returned an observation {what}, but {leaf} has shape {expected}")
    kind = f"dtype {value.dtype}" if isinstance(value, (np.ndarray, np.generic)) else f"type {type(value).__name__}"
    what = f"whose value at {path} ({kind})" if path else f"({kind}) that"
    return type(error)(f"env {env_id} returned an observation {what} cannot be written as "
                       f"{np.dtype(space.dtype)}, the dtype of {leaf.rstrip(',')} ({error})")
