"""Vectorising a batch of per-env infos the way Gymnasium's ``VectorEnv._add_info`` does, a column
at a time instead of an env at a time.

:func:`add_infos` gives the same dict as ``_add_info`` called env by env (same key order, dtypes,
values and masks), building each column at once where every value of the key is a number
(:func:`_scalar_type`), a NumPy array of one shape and dtype, or an object that is none of a
number, an array or a dict; every other key goes through Gymnasium's own ``_add_info``, so its
result and errors stay Gymnasium's. Typed infos (``runtime/src/infos.rs``) are vectorised
natively (``ringenv._native.typed_columns``, ``dict_columns``); this module does the rest.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from gymnasium.vector.vector_env import VectorEnv

from ringenv import _native

AddInfo = Callable[[Dict[str, Any], Dict[str, Any], int], Dict[str, Any]]


#: An all-True mask of each vector size met, copied for a column every env has (a copy costs
#: less than ``np.ones``).
_EVERY: Dict[int, np.ndarray] = {}

#: The Python number types whose values ``np.array(values, dtype=T)`` converts exactly as
#: Gymnasium's item-by-item assignment does (NumPy number types are checked with ``issubclass``).
_PLAIN = frozenset((int, float, bool))

Columns = Dict[Any, Tuple[List[int], List[Any]]]


def _every(n: int) -> np.ndarray:
    """The cached all-True mask of ``n`` entries (copy it before handing it out)."""
    every = _EVERY.get(n)
    if every is None:
        every = _EVERY[n] = np.ones(n, dtype=np.bool_)
    return every


def _scalar_type(values: Sequence[Any]) -> Any:
    """The type of the first of ``values`` when every value is a number (``int``, ``float``,
    ``bool`` or a NumPy number type other than ``timedelta64``), else ``None``."""
    for t in set(map(type, values)):
        if t not in _PLAIN and (not issubclass(t, np.number) or t is np.timedelta64):
            return None
    return type(values[0])


class _Arrays:
    """The column type of NumPy arrays of one ``shape`` and ``dtype`` (see :func:`_column_type`)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: Tuple[int, ...], dtype: np.dtype):
        self.shape, self.dtype = shape, dtype


def _same_arrays(values: Sequence[Any]) -> Optional[_Arrays]:
    """An :class:`_Arrays` when every value is a ``numpy.ndarray`` (not a subclass) of the first
    one's shape and dtype, else ``None``."""
    first = values[0]
    if type(first) is not np.ndarray or not first.dtype.isnative:
        # (a non-native byte order: np.array(values) would make the column native, where
        # Gymnasium's np.zeros((n, *shape), dtype) keeps the env's dtype)
        return None
    shape, dtype = first.shape, first.dtype
    for v in values:
        if type(v) is not np.ndarray or v.shape != shape or v.dtype != dtype:
            return None
    return _Arrays(shape, dtype)


class _Objects:
    """The column type of values Gymnasium keeps in an ``object`` array (see :func:`_objects`)."""


_OBJECTS = _Objects()


def _objects(values: Sequence[Any]) -> Optional[_Objects]:
    """:data:`_OBJECTS` when no value is one Gymnasium's ``_add_info`` gives a typed column or
    recurses into: not exactly an ``int``, ``float`` or ``bool``, nor a NumPy number, nor a
    ``numpy.ndarray`` or ``dict`` (or a subclass of either); else ``None``."""
    for t in set(map(type, values)):
        if t in _PLAIN or issubclass(t, (np.number, np.ndarray, dict)):
            return None
    return _OBJECTS


def _column_type(values: Sequence[Any]) -> Any:
    """What :func:`_fill` builds ``values``' column from: their :func:`_scalar_type`, else an
    :class:`_Arrays` (:func:`_same_arrays`), else :data:`_OBJECTS` (:func:`_objects`), else
    ``None`` (Gymnasium's ``_add_info``)."""
    t = _scalar_type(values)
    if t is None:
        t = _same_arrays(values)
    return t if t is not None else _objects(values)


def _object_column(n: int, ids: Sequence[int], values: Sequence[Any]) -> np.ndarray:
    """Gymnasium's ``object`` column of ``n`` entries: ``None`` but at ``ids``, which hold
    ``values`` (the objects themselves)."""
    array = np.full(n, None, dtype=object)
    for i, value in zip(ids, values):
        array[i] = value
    return array


def _column(values: Sequence[Any], t: Any) -> np.ndarray:
    """The column of ``values`` (one per env) of :func:`_column_type` ``t``: a new array of shape
    ``(len(values), ...)``, as Gymnasium's item-by-item assignment fills it."""
    if t is _OBJECTS:
        return _object_column(len(values), range(len(values)), values)
    return np.array(values) if type(t) is _Arrays else np.array(values, dtype=t)


def _columns(env_infos: Sequence[Tuple[int, Dict[str, Any]]]) -> Columns:
    """Each key's ``(env ids, values)`` over ``env_infos`` (``(env_id, info)`` pairs), keys in
    the order Gymnasium's env-by-env ``_add_info`` first meets them."""
    keys = env_infos[0][1].keys()
    if all(info.keys() == keys for _, info in env_infos):
        # The common case, every env with the same keys (then in the first env's order, as
        # Gymnasium inserts them): a column is one list comprehension.
        ids = [env_id for env_id, _ in env_infos]
        infos = [info for _, info in env_infos]
        return {key: (ids, [info[key] for info in infos]) for key in keys}
    columns: Columns = {}
    for env_id, info in env_infos:
        for key, value in info.items():
            column = columns.get(key)
            if column is None:
                columns[key] = ([env_id], [value])
            else:
                column[0].append(env_id)
                column[1].append(value)
    return columns


def _fill(infos: Dict[str, Any], columns: Columns, types: List[Any], num_envs: int,
          add_info: AddInfo) -> Dict[str, Any]:
    """Adds ``columns`` to ``infos`` (see :func:`add_infos`); ``types`` holds each column's
    :func:`_column_type`, in the columns' order."""
    for (key, (ids, values)), t in zip(columns.items(), types):
        mask = f"_{key}"
        if t is None or key == "final_obs" or key in infos or mask in infos:
            for env_id, value in zip(ids, values):
                infos = add_info(infos, {key: value}, env_id)
            continue
        if len(ids) == num_envs:  # every env (each at most once, in order): ids are 0..num_envs-1
            infos[key], infos[mask] = _column(values, t), _every(num_envs).copy()
            continue
        if t is _OBJECTS:
            array = _object_column(num_envs, ids, values)
        elif type(t) is _Arrays:
            array = np.zeros((num_envs, *t.shape), dtype=t.dtype)
            array[ids] = _column(values, t)
        else:
            array = np.zeros(num_envs, dtype=t)
            array[ids] = np.array(values, dtype=array.dtype)
        present = np.zeros(num_envs, dtype=np.bool_)
        present[ids] = True
        infos[key], infos[mask] = array, present
    return infos


def _clash(keys: Any) -> bool:
    """Whether, among ``keys`` (a dict's: an info's or :func:`_columns`'), a key's mask name (``"_"
    + key``) is also a key, or a key is not a ``str``."""
    return any(type(key) is not str or f"_{key}" in keys for key in keys)


def add_infos(infos: Dict[str, Any], env_infos: Sequence[Tuple[int, Dict[str, Any]]], num_envs: int,
              add_info: AddInfo) -> Dict[str, Any]:
    """Adds ``env_infos`` (``(env_id, info)`` pairs in env order, each env at most once) to
    ``infos`` as calling ``add_info(infos, info, env_id)`` for each pair in turn would (Gymnasium's
    ``VectorEnv._add_info``, bound to a vector env of ``num_envs`` envs), and returns the dict."""
    if not env_infos:
        return infos
    before = dict(infos)
    try:
        if not infos and len(env_infos) == num_envs:  # every env (each once, in order)
            typed = _native.dict_columns(env_infos if type(env_infos) is list else list(env_infos), num_envs)
            if typed is not None:
                return typed
        columns = _columns(env_infos)
        if not _clash(columns):
            return _fill(infos, columns, [_column_type(values) for _, values in columns.values()], num_envs,
                         add_info)
    except Exception:
        # Column by column, the first error met need not be the one Gymnasium meets first, env
        # by env (an int column refusing a str of env 2 before a nested dict clashing with an
        # array in env 1): its own path, from the infos as they came, raises Gymnasium's.
        infos = before
    for env_id, info in env_infos:
        infos = add_info(infos, info, env_id)
    return infos


class _Batch:
    """What Gymnasium's ``VectorEnv._add_info`` reads of its vector env, for a batch of
    ``num_envs`` entries: its ``num_envs`` (the size of each column) and itself."""

    _add_info = VectorEnv._add_info

    def __init__(self, num_envs: int):
        self.num_envs = num_envs


#: Gymnasium's ``_add_info`` bound to a stand-in vector env of each batch size met.
_BATCH_ADD_INFO: Dict[int, AddInfo] = {}


def _rows(x: Any, index: np.ndarray) -> Any:
    """The rows ``index`` of every array in a (possibly nested) info dict."""
    if isinstance(x, dict):
        return {k: _rows(v, index) for k, v in x.items()}
    if isinstance(x, np.ndarray) and x.ndim >= 1:
        return x[index]
    return x


def add_batch_infos(env_infos: Dict[int, Dict[str, Any]], env_ids: np.ndarray, num_envs: int,
                    add_info: AddInfo) -> Dict[str, Any]:
    """The infos of a batch of envs (an asynchronous ``recv``), vectorised over the batch: each
    column and mask has ``len(env_ids)`` entries, entry ``i`` for env ``env_ids[i]``.

    Args:
        env_infos: each env's info by env id (only envs of the batch; envs without an info may be
            missing).
        env_ids: the batch's env ids, ascending, an integer array of shape ``(batch_size,)``.
        num_envs, add_info: the vector env's, as for :func:`add_infos`.

    Returns:
        what :func:`add_infos` over all ``num_envs`` envs, followed by taking the rows ``env_ids``
        of every array, gives (same keys, order, dtypes, values and masks).

    Raises:
        KeyError: naming an env id of ``env_infos`` that is not in ``env_ids``; what
            ``add_info`` raises.
    """
    if not env_infos:
        return {}
    ids = env_ids.tolist()
    n = len(ids)
    pairs = sorted(env_infos.items())
    if ids[-1] - ids[0] == n - 1:  # one run of ids (ascending, each once): a position is an offset
        first = ids[0]
        outside = [e for e in (pairs[0][0], pairs[-1][0]) if not first <= e < first + n]
        at = [(e - first, info) for e, info in pairs]
    else:
        position = {e: i for i, e in enumerate(ids)}
        outside = [e for e, _ in pairs if e not in position]
        at = [(position.get(e, -1), info) for e, info in pairs]
    if outside:
        raise KeyError(f"env {outside[0]} returned an info but is not in the batch {ids}")
    try:
        if len(at) == n:  # every env of the batch (each once, in order)
            typed = _native.dict_columns(at, n)
            if typed is not None:
                return typed
        columns = _columns(at)
        types = [_column_type(values) for _, values in columns.values()]
        if not any(t is None and any(isinstance(v, dict) for v in values)
                   for t, (_, values) in zip(types, columns.values())):
            add_batch = _BATCH_ADD_INFO.get(n)
            if add_batch is None:
                add_batch = _BATCH_ADD_INFO[n] = _Batch(n)._add_info  # type: ignore[misc]
            if _clash(columns):
                infos: Dict[str, Any] = {}
                for position, info in at:
                    infos = add_batch(infos, info, position)
                return infos
            return _fill({}, columns, types, n, add_batch)
    except Exception:
        pass  # the error Gymnasium meets first, env by env, is raised below (see add_infos)
    # A nested dict (or an error): the long way, over every env, then the batch's rows.
    return _rows(add_infos({}, pairs, num_envs, add_info), env_ids)
