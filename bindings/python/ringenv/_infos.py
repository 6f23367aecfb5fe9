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

from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np
from gymnasium.vector.vector_env import VectorEnv

AddInfo = Callable[[Dict[str, Any], Dict[str, Any], int], Dict[str, Any]]


#: An all-True mask of each vector size met, copied for a column every env has (a copy costs
#: less than ``np.ones``).
_EVERY: Dict[int, np.ndarray] = {}


def _scalar_type(values: Sequence[Any]) -> Any:
    """The one number type of ``values`` (``int``, ``float``, ``bool`` or a NumPy number type),
    or ``None`` when they are not all numbers of one such type."""
    t = type(values[0])
    if not (t in (int, float, bool) or issubclass(t, np.number)):
        return None
    for v in values:
        if type(v) is not t:
            return None
    return t


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
    columns: Dict[str, Tuple[List[int], List[Any]]] = {}
    keys = env_infos[0][1].keys()
    if all(info.keys() == keys for _, info in env_infos):
        # The common case, every env with the same keys (then in the first env's order, as
        # Gymnasium inserts them): a column is one list comprehension.
        ids = [env_id for env_id, _ in env_infos]
        for key in keys:
            columns[key] = (ids, [info[key] for _, info in env_infos])
    else:
        for env_id, info in env_infos:
            for key, value in info.items():
                column = columns.get(key)
                if column is None:
                    columns[key] = ([env_id], [value])
                else:
                    column[0].append(env_id)
                    column[1].append(value)
    for key, (ids, values) in columns.items():
        t = None if key == "final_obs" or key in infos else _scalar_type(values)
        if t is None:
            for env_id, value in zip(ids, values):
                infos = add_info(infos, {key: value}, env_id)
            continue
        if len(ids) == num_envs:  # every env (each at most once, in order): ids are 0..num_envs-1
            every = _EVERY.get(num_envs)
            if every is None:
                every = _EVERY[num_envs] = np.ones(num_envs, dtype=np.bool_)
            infos[key], infos[f"_{key}"] = np.array(values, dtype=t), every.copy()
            continue
        array = np.zeros(num_envs, dtype=t)
        array[ids] = np.array(values, dtype=array.dtype)
        mask = np.zeros(num_envs, dtype=np.bool_)
        mask[ids] = True
        infos[key], infos[f"_{key}"] = array, mask
    return infos


class _Batch:
    """What Gymnasium's ``VectorEnv._add_info`` reads of its vector env, for a batch of
    ``num_envs`` entries: its ``num_envs`` (the size of each column) and itself."""

    _add_info = VectorEnv._add_info

    def __init__(self, num_envs: int):
        self.num_envs = num_envs


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
    at = {e: i for i, e in enumerate(env_ids.tolist())}  # each env's position in the batch
    for e in env_infos:
        if e not in at:
            raise KeyError(f"env {e} returned an info but is not in the batch {sorted(at)}")
    pairs = sorted(env_infos.items())
    if any(isinstance(v, dict) for _, info in pairs for v in info.values()):
        return _rows(add_infos({}, pairs, num_envs, add_info), env_ids)
    n = len(env_ids)
    return add_infos({}, [(at[e], info) for e, info in pairs], n, _Batch(n)._add_info)  # type: ignore[misc]
