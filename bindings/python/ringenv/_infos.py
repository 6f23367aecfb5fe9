"""Vectorising a batch of per-env infos the way Gymnasium's ``VectorEnv._add_info`` does, a column
at a time instead of an env at a time.

Gymnasium builds a vector env's infos by calling ``_add_info(infos, info, env_id)`` once per env:
for every key it creates (on the key's first appearance) an array of ``num_envs`` entries whose
dtype is the type of that first value, assigns the env's entry, and keeps a boolean mask
``infos["_" + key]``. With a few scalar infos per env that is a ``np.zeros`` and two item
assignments per key per env, which on a Python env that returns in microseconds costs as much as
the step itself.

:func:`add_infos` gives the same dict, key for key (same insertion order, dtypes, values and
masks), building each column with one ``np.zeros`` and one fancy assignment when every value of
that key is a number of one type (``int``, ``float``, ``bool`` or a NumPy number type: then
``np.array(values, dtype=T)`` holds exactly what item-by-item assignment would). Every other key
(nested dicts, arrays, ``final_obs``, objects, or values of mixed types) goes through Gymnasium's
own ``_add_info`` env by env, so its result, and any error, stay Gymnasium's.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from gymnasium.vector.vector_env import VectorEnv

AddInfo = Callable[[Dict[str, Any], Dict[str, Any], int], Dict[str, Any]]


#: An all-True mask of each vector size met, copied for a column every env has (a copy costs
#: less than ``np.ones``).
_EVERY: Dict[int, np.ndarray] = {}

#: The Python number types whose values ``np.array(values, dtype=T)`` holds exactly as Gymnasium's
#: item-by-item assignment would (NumPy number types are checked with ``issubclass``).
_PLAIN = frozenset((int, float, bool))

Columns = Dict[Any, Tuple[List[int], List[Any]]]


def _every(n: int) -> np.ndarray:
    """The cached all-True mask of ``n`` entries (copy it before handing it out)."""
    every = _EVERY.get(n)
    if every is None:
        every = _EVERY[n] = np.ones(n, dtype=np.bool_)
    return every


def _scalar_type(values: Sequence[Any]) -> Any:
    """The one number type of ``values`` (``int``, ``float``, ``bool`` or a NumPy number type),
    or ``None`` when they are not all numbers of one such type."""
    types = set(map(type, values))
    if len(types) != 1:
        return None
    t = types.pop()
    return t if t in _PLAIN or issubclass(t, np.number) else None


def _uniform(infos: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The vectorised infos of ``infos`` (one info per env, in env order, every env of the vector
    env) when every info has the same keys (in any order: Gymnasium's columns follow the first
    env's, and each env's values land in their own rows whatever its order) and each key's values
    are numbers of one type: then each column is ``np.array(values, dtype=T)`` and each mask all
    True, as in :func:`_fill`. ``None`` otherwise (and for a ``final_obs`` key or a key whose mask
    name is also a key), for the general path. The common per-step case, in one pass over the
    values."""
    first = infos[0]
    keys = first.keys()
    for info in infos:
        if info.keys() != keys:  # a set comparison, in C
            return None
    every = _every(len(infos))
    out: Dict[str, Any] = {}
    for key in first:
        values = [info[key] for info in infos]
        t = _scalar_type(values)
        mask = f"_{key}"
        # (:func:`_clash`'s test, key by key here: this loop is a step's hot path)
        if t is None or key == "final_obs" or mask in first:
            return None
        out[key], out[mask] = np.array(values, dtype=t), every.copy()
    return out


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
    :func:`_scalar_type`, in the columns' order."""
    for (key, (ids, values)), t in zip(columns.items(), types):
        mask = f"_{key}"
        if t is None or key == "final_obs" or key in infos or mask in infos:
            for env_id, value in zip(ids, values):
                infos = add_info(infos, {key: value}, env_id)
            continue
        if len(ids) == num_envs:  # every env (each at most once, in order): ids are 0..num_envs-1
            infos[key], infos[mask] = np.array(values, dtype=t), _every(num_envs).copy()
            continue
        array = np.zeros(num_envs, dtype=t)
        array[ids] = np.array(values, dtype=array.dtype)
        present = np.zeros(num_envs, dtype=np.bool_)
        present[ids] = True
        infos[key], infos[mask] = array, present
    return infos


def _clash(keys: Any) -> bool:
    """Whether, among ``keys`` (a dict's: an info's or :func:`_columns`'), a key's mask name
    (``"_" + key``) is also a key: then Gymnasium writes one into the other env by env, which only
    its own ``_add_info`` reproduces."""
    return any(f"_{key}" in keys for key in keys)


def add_infos(infos: Dict[str, Any], env_infos: Sequence[Tuple[int, Dict[str, Any]]], num_envs: int,
              add_info: AddInfo) -> Dict[str, Any]:
    """Adds ``env_infos`` (``(env_id, info)`` pairs in env order, each env at most once) to
    ``infos`` as calling ``add_info(infos, info, env_id)`` for each pair in turn would (Gymnasium's
    ``VectorEnv._add_info``, bound to a vector env of ``num_envs`` envs), and returns the dict.

    Each numeric column is an array of shape ``(num_envs,)`` of the first value's type (``int`` ->
    ``int64``, ``float`` -> ``float64``, ``bool`` -> ``bool``) with its mask ``"_" + key``, a bool
    array of shape ``(num_envs,)``. Raises what ``add_info`` raises for the other keys.
    """
    if not env_infos:
        return infos
    if not infos and len(env_infos) == num_envs:  # every env (each once, in order)
        uniform = _uniform([info for _, info in env_infos])
        if uniform is not None:
            return uniform
    columns = _columns(env_infos)
    if _clash(columns):
        for env_id, info in env_infos:
            infos = add_info(infos, info, env_id)
        return infos
    return _fill(infos, columns, [_scalar_type(values) for _, values in columns.values()], num_envs, add_info)


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
        of every array, gives (same keys, order, dtypes, values and masks). Infos without a
        nested dict are built at the batch's size, with the batch's positions in place of the env
        ids; a nested dict goes the long way, since Gymnasium's ``_add_info`` can write an env id
        into it as a key (a key that is a dict in one env and a number in another).

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
    if len(at) == n:  # every env of the batch (each once, in order)
        uniform = _uniform([info for _, info in at])
        if uniform is not None:
            return uniform
    columns = _columns(at)
    types = [_scalar_type(values) for _, values in columns.values()]
    if any(t is None and any(isinstance(v, dict) for v in values)
           for t, (_, values) in zip(types, columns.values())):
        return _rows(add_infos({}, pairs, num_envs, add_info), env_ids)
    add_batch = _BATCH_ADD_INFO.get(n)
    if add_batch is None:
        add_batch = _BATCH_ADD_INFO[n] = _Batch(n)._add_info  # type: ignore[misc]
    if _clash(columns):
        infos: Dict[str, Any] = {}
        for position, info in at:
            infos = add_batch(infos, info, position)
        return infos
    return _fill({}, columns, types, n, add_batch)
