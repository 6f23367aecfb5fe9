"""The vector env's side of its pool's slots: NumPy views of the shared segment, actions written
into a slot, results read from a slot or from rows of slots.

A pool has ``depth`` slots (2), so that workers write step t+1 into one while the caller reads
step t from the other. A slot holds one ``(num_envs, ...)`` array per observation leaf,
``reward`` ``(num_envs,)`` ``float64``,
``terminated`` and ``truncated`` ``(num_envs,)`` ``bool``, and the actions
``(num_envs, *action_shape)`` of a flat action space. :class:`Slots` keeps the latest pickled
observations (and a split Dict's pickled values) of each env.
"""

from __future__ import annotations

import functools
from copy import deepcopy
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import cloudpickle
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate, read_from_shared_memory

from ringenv import _layout
from ringenv._checks import action_bounds, check_action_values, check_fits, refuse_objects
from ringenv._leases import Leases
from ringenv._staging import DeviceBatches, host_actions

__all__ = ["Slots", "array_tree", "device_tree", "leaf_spaces", "tree_leaves", "tree_of"]

#: Rows ``start:stop`` of slot ``slot`` (one worker's block, or a run of blocks).
Run = Tuple[int, int, int]


class Slots:
    """Views of every slot of ``pool``; writes actions into a slot and reads results from one.

    Args:
        pool: the vector env's ``ringenv._native.Pool`` of ``num_envs`` envs.
        single_observation_space, single_action_space: a sub-env's spaces.
        observation_space, action_space: the vector env's batched spaces.
        obs_layout: where observations go (``_layout.observation_layout``), or ``None``: they
            travel pickled.
        act_leaves: the action leaves (a flat action space), or ``None``: actions travel pickled.
        check_actions: whether :meth:`write_actions` checks action values (range, NaN).
        lend: whether ``copy=True`` observations are lent rather than copied
            (:mod:`ringenv._leases`; the pool then has ``LENDING_DEPTH`` slots).

    Attributes:
        latest: per worker, the slot holding its latest results (``None`` before any).
        device: the :class:`ringenv._staging.DeviceBatches` the results go through with a CUDA
            device (:meth:`to_device`), else ``None``.
    """

    def __init__(self, pool: Any, num_envs: int, single_observation_space: spaces.Space,
                 single_action_space: spaces.Space, observation_space: spaces.Space, action_space: spaces.Space,
                 obs_layout: Optional[_layout.ObservationLayout], act_leaves: Optional[list],
                 check_actions: bool, lend: bool = False):
        n = self.num_envs = num_envs
        self._pool = pool
        self.single_observation_space, self.single_action_space = single_observation_space, single_action_space
        self.observation_space, self.action_space = observation_space, action_space
        self.latest: List[Optional[int]] = [None] * pool.num_workers
        self.device: Optional[DeviceBatches] = None
        seg, slots = pool.segment(), range(pool.depth)
        self.obs_mem: Optional[List[Any]] = None
        self.obs_rows: Optional[List[List[np.ndarray]]] = None
        self.env_obs: Optional[List[Any]] = None
        obs_leaves = obs_layout.leaves if obs_layout is not None else None
        # The space laid out in the segment; for a split Dict, the Dict of the values that travel
        # pickled (each env's latest in env_obs), put back beside them by _with_pickled.
        laid = self._laid = obs_layout.space if obs_layout is not None else single_observation_space
        self._shape = _shape(laid)
        self._pickled: Optional[spaces.Dict] = obs_layout.pickled if obs_layout is not None else None
        #: The keys of a split Dict's batch, in the space's order.
        self._keys: List[Any] = list(getattr(single_observation_space, "spaces", ())) if self._pickled else []
        if obs_leaves:
            self.obs_mem = [_layout.bind(laid, n, seg, [pool.offset(s, "obs", k) for k in range(len(obs_leaves))],
                                         obs_leaves)
                            for s in slots]
            self.obs_rows = [
                [np.frombuffer(seg, np.uint8, n * _layout.leaf_bytes(leaf), pool.offset(s, "obs", k)).reshape(n, -1)
                 for k, leaf in enumerate(obs_leaves)]
                for s in slots]
        if not obs_leaves or self._pickled is not None:
            self.env_obs = [None] * n
            self._obs_batch: Any = create_empty_array(self._pickled or single_observation_space, n=n, fn=np.zeros)
        #: Each slot's reader of its observation batch (``_layout.reader``), where it has leaves.
        self.obs_read: Optional[List[Any]] = (
            [_layout.reader(laid, mem, n) for mem in self.obs_mem] if self.obs_mem is not None else None)
        # Each slot's observation batch as Gymnasium reads it, built once where it is all views
        # (array leaves; a Text leaf reads as new strings): the views never change.
        self.obs_views: Optional[List[Any]] = (
            [read_from_shared_memory(laid, mem, n=n) for mem in self.obs_mem]
            if self.obs_mem is not None and array_tree(laid) else None)
        # Flat observation spaces skip Gymnasium's generic read (the same arrays, fewer calls).
        self.obs_flat: Optional[List[np.ndarray]] = (
            [_layout.flat_view(laid, n, seg, pool.offset(s, "obs")) for s in slots]
            if obs_leaves and _layout.is_flat(laid) else None)
        self.action: Optional[List[np.ndarray]] = (
            [_layout.flat_view(single_action_space, n, seg, pool.offset(s, "action")) for s in slots]
            if act_leaves else None)
        #: The slots whose observations are lent with ``copy=True``, or ``None``: copied.
        self.leases: Optional[Leases] = (
            _leases_of(pool, seg, laid, n, obs_leaves) if lend and obs_leaves else None)
        #: Per ``(slot, start, stop)`` run of rows of a flat observation space: the views of its
        #: observations, rewards, terminations and truncations, made on first use (:meth:`rows`).
        self._run_views: Dict[Run, Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self.reward = [np.frombuffer(seg, np.float64, n, pool.offset(s, "reward")) for s in slots]
        self.terminated = [np.frombuffer(seg, np.bool_, n, pool.offset(s, "terminated")) for s in slots]
        self.truncated = [np.frombuffer(seg, np.bool_, n, pool.offset(s, "truncated")) for s in slots]
        # The batched space of what the segment holds (Gymnasium's iterate walks a batch by it).
        self._laid_batch = observation_space if self._pickled is None else batch_space(laid, n)
        self._action_shape = (n, *(single_action_space.shape or ()))
        # Discrete, MultiDiscrete, MultiBinary, and a Box of an integer (or bool) dtype: floats are
        # refused there, not truncated into the slot (NaN would reach the env as INT_MIN).
        self._integer_actions = (not isinstance(single_action_space, spaces.Box)
                                 or np.dtype(single_action_space.dtype).kind in "iub")
        self._action_bounds = action_bounds(single_action_space) if check_actions else None
        # A batch of every env's actions of the leaf's own dtype is checked and written in one
        # native call (the same rules as check_action_values, over its bytes); any other batch,
        # or one it refuses, takes the NumPy path below, which names the bad value.
        self._action_dtype = self.action[0].dtype if self.action is not None else None
        self._write_native = pool.write_actions
        if self._action_bounds == "nan":
            pool.set_action_bounds(nan=True)
        elif self._action_bounds is not None:
            # One (low, high) per element of one env's action, in C order.
            low, high = (np.broadcast_to(b, self._action_shape[1:]).reshape(-1).tolist() for b in self._action_bounds)
            try:
                pool.set_action_bounds(low, high)
            except OverflowError:  # a bound beyond int64 (a uint64 space): the NumPy path checks every batch
                self._action_dtype = None

    def to_device(self, device: Any, segment: Any) -> None:
        """Reads the results as tensors on ``device`` (a CUDA ``torch.device``) from now on,
        page-locking ``segment`` (the pool's). Needs observations in shared memory whose laid out
        space is a :func:`device_tree`; a split Dict's pickled values stay on the host, batched as
        Gymnasium batches them (a tuple of strings for MiniGrid's mission).

        Raises:
            CudaUnavailableError, CudaError: as :class:`ringenv._staging.GpuStaging`.
        """
        arrays = [[*self.device_leaves(s), r, te, tr]
                  for s, (r, te, tr) in enumerate(zip(self.reward, self.terminated, self.truncated))]
        self.device = DeviceBatches(device, arrays, self.observation_tree, segment)

    def device_leaves(self, slot: int) -> List[np.ndarray]:
        """The ``(num_envs, ...)`` arrays of ``slot``'s observations, one per leaf of the
        observation space laid out in the segment (a split Dict's values with a layout) in the
        order of :meth:`observation_tree` (one for an array space).

        Raises:
            ValueError: observations that are not an :func:`array_tree` in shared memory."""
        if self.obs_flat is not None:
            return [self.obs_flat[slot]]
        if self.obs_views is None:
            raise ValueError(f"observations of {self.single_observation_space!r} are not arrays in shared memory")
        return tree_leaves(self._laid, self.obs_views[slot])

    def observation_tree(self, leaves: Sequence[Any]) -> Any:
        """``leaves`` (one per leaf of the space laid out in the segment, in :meth:`device_leaves`'
        order) in new dicts and tuples shaped as that space; the one leaf of an array space."""
        if self.obs_flat is not None:
            return leaves[0]
        assert self.obs_views is not None
        return tree_of(self._laid, leaves)

    def next_slot(self, worker: Optional[int] = None) -> int:
        """The slot the next command to ``worker`` (``None``: to every worker) writes: the pool's
        next one, or, when the caller holds that one (:mod:`ringenv._leases`), one it does not
        hold, made the next."""
        slot = self._pool.next_slot if worker is None else self._pool.next_slot_of(worker)
        if self.leases is not None and self.leases.held(slot):
            slot = self.leases.free_slot(slot)
            self._pool.set_next_slot(slot, worker)
        return slot

    def before_reuse(self, slots: Iterable[int]) -> None:
        """Before a command that makes workers rewrite ``slots``: waits for the device's last
        copies of them (at once in a depth-2 pipeline); nothing without a device."""
        if self.device is not None:
            self.device.before_reuse(slots)

    def write_actions(self, actions: Any, ids: Optional[np.ndarray], slots: Any,
                      runs: Optional[List[Run]] = None) -> Optional[bytes]:
        """Checks ``actions`` (for the envs ``ids``, ``None``: all) and writes them into the
        action slot of each env (``slots``: one slot for all, or an array with one per env of
        ``ids``; or ``runs``, which ``slots`` is then not read: ``ids`` as ``(slot, start, stop)``
        runs of env ids in their order, written run by run, natively for a batch of the action
        leaf's dtype); returns the pickled payload of a
        non-flat action space instead (a list of ``num_envs`` entries, ``None`` where not sent).

        Raises:
            TypeError: a scalar instead of a batch.
            ValueError: wrong shape, count or dtype, or (``check_actions=True``) value, naming
                the env; nothing is written.
        """
        if type(actions) is not np.ndarray:
            actions = host_actions(actions, self.device)
        if type(actions) is np.ndarray and actions.dtype == self._action_dtype:
            if ids is None:  # every env, one slot
                if actions.shape == self._action_shape and self._write_native(actions.tobytes(),
                                                                              [(slots, 0, self.num_envs)]):
                    return None
            elif runs is not None and actions.shape == (len(ids), *self._action_shape[1:]) \
                    and self._write_native(actions.tobytes(), runs):  # runs of envs, in the order of ids
                return None
        count = self.num_envs if ids is None else len(ids)
        if self.action is None:
            space = self.action_space if ids is None else batch_space(self.single_action_space, count)
            batch = list(iterate(space, actions))
            if len(batch) != count:
                form = ""
                if isinstance(self.single_action_space, (spaces.Tuple, spaces.Dict)):
                    form = (f": a batch of {type(self.single_action_space).__name__} actions is one batch of {count} "
                            "per sub-space (as gymnasium.vector.utils.batch_space makes it; "
                            "gymnasium.vector.utils.concatenate builds one from per-env actions), not one "
                            "action per env")
                raise ValueError(f"got {len(batch)} actions for {count} envs{form}")
            if ids is None:
                return cloudpickle.dumps(batch)
            full: List[Any] = [None] * self.num_envs
            for i, a in zip(ids, batch):
                full[int(i)] = a
            return cloudpickle.dumps(full)
        actions = np.asarray(actions)
        shape = (count, *self._action_shape[1:])
        if actions.ndim == 0:  # Gymnasium's iterate raises TypeError for a scalar too
            raise TypeError(f"actions must be a batch of {count} actions (an array of shape {shape}), "
                            f"got the scalar {actions!r}")
        if actions.shape != shape:
            raise ValueError(f"actions have shape {actions.shape}, expected {shape} "
                             f"({count} envs, action shape {self.single_action_space.shape})")
        actions = refuse_objects(actions, self.single_action_space)
        if self._integer_actions and actions.dtype.kind not in "iub":
            of = f" of dtype {self.single_action_space.dtype}" if isinstance(self.single_action_space, spaces.Box) else ""
            raise ValueError(f"actions for a {type(self.single_action_space).__name__} space{of} must be integers, "
                             f"got dtype {actions.dtype}")
        check_fits(actions, self.action[0].dtype)
        if self._action_bounds is not None:
            check_action_values(actions, self._action_bounds, self.single_action_space)
        if runs is not None:
            at = 0
            for slot, start, stop in runs:
                self.action[slot][start:stop] = actions[at:at + stop - start]
                at += stop - start
        elif ids is None:
            np.copyto(self.action[slots], actions, casting="unsafe")
        elif not isinstance(slots, np.ndarray):  # one slot for every env
            self.action[slots][ids] = actions
        else:
            for slot in np.unique(slots):
                mine = slots == slot
                self.action[slot][ids[mine]] = actions[mine]
        return None

    def take_pickled(self, start: int, observations: Sequence[Any]) -> None:
        """Keeps the pickled observations of envs ``start, start + 1, ...`` (for a split Dict, the
        ``dict`` of its values that travel pickled; ``None``: an env that was not reset keeps its
        last one)."""
        assert self.env_obs is not None
        for k, obs in enumerate(observations):
            if obs is not None:
                self.env_obs[start + k] = obs

    def keep_observations(self, slot: int, previous: Sequence[Optional[int]], keep: np.ndarray,
                          ranges: Sequence[Tuple[int, int]]) -> None:
        """Copies into ``slot`` the observations of the envs ``keep`` marks (a bool array of shape
        ``(num_envs,)``: envs a masked reset left alone) from the slot ``previous[w]`` that held
        worker ``w``'s last results (envs ``ranges[w]``); pickled observations stay as they are."""
        if self.obs_rows is None:
            return
        for (start, stop), before in zip(ranges, previous):
            if before is None:
                continue
            rows = np.zeros_like(keep)
            rows[start:stop] = keep[start:stop]
            for new, old in zip(self.obs_rows[slot], self.obs_rows[before]):
                new[rows] = old[rows]

    def observations(self, slot: int, copy: bool) -> Any:
        """The observations of every env in ``slot``, batched as the observation space (views
        of shared memory when not ``copy``; with ``copy``, views no command writes while the
        caller holds them where the slot can be lent, :mod:`ringenv._leases`, else copies)."""
        if self._pickled is None:
            return self._laid_observations(slot, copy)
        return self._with_pickled(self._laid_observations(slot, copy), self._pickled_batch(None, copy))

    def _laid_observations(self, slot: int, copy: bool) -> Any:
        """:meth:`observations` of the space laid out in the segment (or, with no layout, every
        env's pickled observation)."""
        if self.device is not None:
            return self.device.observations(slot, copy)
        if copy and self.leases is not None:
            lent = self.leases.lend(slot)
            if lent is not None:
                return lent
        if self.obs_flat is not None:
            flat = self.obs_flat[slot]
            return flat.copy() if copy else flat
        space = self._laid
        if self.obs_views is not None:  # an array tree
            views = self.obs_views[slot]
            # New dicts and tuples either way: a caller may change them.
            return _gather(space, [(views, 0, self.num_envs)]) if copy else _containers(space, views)
        if self.obs_read is not None:
            obs = self.obs_read[slot]()
            return deepcopy(obs) if copy else obs
        return self._pickled_batch(None, copy)

    def _pickled_batch(self, ids: Optional[np.ndarray], copy: bool) -> Any:
        """The batch of the pickled observations (or pickled values of a split Dict) that
        :meth:`take_pickled` kept: of every env (``ids`` ``None``), or of the envs ``ids``; with
        ``copy`` a copy (the values of spaces such as custom ones are the envs' own objects, which
        an env may change later), else the batch the next call rebuilds or a new one."""
        space = self._pickled or self.single_observation_space
        assert self.env_obs is not None
        if ids is not None:
            items = [self.env_obs[i] for i in ids]
            out: Any = create_empty_array(space, n=len(items), fn=np.zeros)
            batch = concatenate(space, items, out)
            return _deepcopy(batch) if copy else batch
        obs = self._obs_batch = concatenate(space, self.env_obs, self._obs_batch)
        return _deepcopy(obs) if copy else obs

    def _with_pickled(self, laid: dict, pickled: dict) -> dict:
        """A split Dict's batch: the values ``laid`` read from the segment and the ``pickled``
        ones, in a new dict in the space's key order (as Gymnasium's ``concatenate`` builds it)."""
        return {key: laid[key] if key in laid else pickled[key] for key in self._keys}

    def results(self, slot: int, copy: bool) -> Tuple[Any, Any, Any, Any]:
        """``(observations, rewards, terminations, truncations)`` of every env in ``slot``:
        rewards ``float64``, the flags ``bool``, each of shape ``(num_envs,)`` (torch tensors
        on the device with one)."""
        if self.device is not None:
            obs, *rest = self.device.batch([(slot, 0, self.num_envs)], copy)
            if self._pickled is not None:
                obs = self._with_pickled(obs, self._pickled_batch(None, copy))
            return (obs, *rest)  # type: ignore[return-value]
        obs = self._laid_observations(slot, copy) if self._pickled is None else self.observations(slot, copy)
        return obs, self.reward[slot].copy(), self.terminated[slot].copy(), self.truncated[slot].copy()

    def rows(self, runs: List[Run], ids: np.ndarray, copy: bool) -> Tuple[Any, Any, Any, Any]:
        """``(observations, rewards, terminations, truncations)`` of the ``(slot, start, stop)``
        runs of rows, in order (``ids``: their env ids), as :meth:`results`."""
        if len(runs) == 1 and self.obs_flat is not None and self.device is None and self._pickled is None \
                and (not copy or self.leases is None):  # one run of a flat space (an async batch): kept views
            views = self._run_views.get(runs[0])
            if views is None:
                s, a, b = runs[0]
                views = self._run_views[runs[0]] = (self.obs_flat[s][a:b], self.reward[s][a:b],
                                                    self.terminated[s][a:b], self.truncated[s][a:b])
            rows, reward, terminated, truncated = views
            return rows.copy() if copy else rows[:], reward.copy(), terminated.copy(), truncated.copy()
        if self.device is not None:
            obs, *rest = self.device.batch(runs, copy)
            if self._pickled is not None:
                obs = self._with_pickled(obs, self._pickled_batch(ids, copy))
            return (obs, *rest)  # type: ignore[return-value]
        obs = self._row_observations(runs, ids, copy)
        if self._pickled is not None:
            obs = self._with_pickled(obs, self._pickled_batch(ids, copy))
        if len(runs) == 1:  # one run of rows: slices, no concatenation
            s, a, b = runs[0]
            return obs, self.reward[s][a:b].copy(), self.terminated[s][a:b].copy(), \
                self.truncated[s][a:b].copy()
        rewards = np.concatenate([self.reward[s][a:b] for s, a, b in runs], dtype=np.float64)
        terminated = np.concatenate([self.terminated[s][a:b] for s, a, b in runs])
        truncated = np.concatenate([self.truncated[s][a:b] for s, a, b in runs])
        return obs, rewards, terminated, truncated

    def _row_observations(self, runs: List[Run], ids: np.ndarray, copy: bool) -> Any:
        if copy and len(runs) == 1 and self.leases is not None:  # one run: lent rows where possible
            s, a, b = runs[0]
            lent = self.leases.lend(s, (a, b))
            if lent is not None:
                return lent
        flat = self.obs_flat
        if flat is not None:
            if len(runs) == 1:
                s, a, b = runs[0]
                return flat[s][a:b].copy() if copy else flat[s][a:b]
            return np.concatenate([flat[s][a:b] for s, a, b in runs])
        space = self._laid
        if self.obs_views is not None:  # Dict/Tuple of array leaves: views of one run, else one copy per leaf and run
            if not copy and len(runs) == 1:
                s, a, b = runs[0]
                return _views(self._shape, self.obs_views[s], (a, b))
            return _gather(space, [(self.obs_views[s], a, b) for s, a, b in runs])
        if self.obs_read is not None:
            full = {s: self.obs_read[s]() for s in {r[0] for r in runs}}
            per_env = {s: list(iterate(self._laid_batch, obs)) for s, obs in full.items()}
            items = [per_env[s][i] for s, a, b in runs for i in range(a, b)]
            if copy:  # a OneOf's value (a tuple) holds views of the slot, which concatenate keeps
                items = deepcopy(items)
            out: Any = create_empty_array(space, n=len(items), fn=np.zeros)
            return concatenate(space, items, out)
        return self._pickled_batch(ids, copy)

    def close(self) -> None:
        """Waits for the device's copies in flight and unpins the segment (with a device), then
        drops every view of the segment, so the mapping goes with the last array a caller holds."""
        device, self.device = self.device, None
        if device is not None:
            device.close()
        self.leases = None
        self.obs_mem = self.obs_rows = self.obs_flat = self.obs_views = self.obs_read = self.action = None
        self.reward, self.terminated, self.truncated = [], [], []
        self._run_views = {}


#: Types whose values ``copy.deepcopy`` returns as they are (immutable, holding nothing).
_ATOMS = frozenset((str, int, float, bool, bytes, type(None)))


def _deepcopy(batch: Any) -> Any:
    """``copy.deepcopy(batch)``, without its walk where it would give back the same objects: a
    tuple of atoms (a batch of strings, as Gymnasium batches MiniGrid's mission) is returned as it
    is (``deepcopy`` returns such a tuple itself), and a ``dict`` of such tuples under atom keys as
    a new ``dict`` holding them; anything else goes to ``deepcopy``."""
    if type(batch) is tuple and all(type(v) in _ATOMS for v in batch):
        return batch
    if type(batch) is dict and all(type(k) in _ATOMS and type(v) is tuple and all(type(x) in _ATOMS for x in v)
                                   for k, v in batch.items()):
        return dict(batch)
    return deepcopy(batch)


#: Spaces whose batch, as ``read_from_shared_memory`` reads it, is one ``(num_envs, ...)`` array.
_ARRAY_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def array_tree(space: spaces.Space) -> bool:
    """Whether ``space`` is an array space, or a Dict or Tuple whose every leaf is one."""
    if isinstance(space, _ARRAY_SPACES):
        return True
    if isinstance(space, spaces.Dict):
        return all(array_tree(s) for s in space.spaces.values())
    if isinstance(space, spaces.Tuple):
        return all(array_tree(s) for s in space.spaces)
    return False


def device_tree(space: spaces.Space) -> bool:
    """Whether batches of ``space`` can be staged to a torch device: an :func:`array_tree` with no
    leaf of a dtype torch has no type for (``longdouble``, ``clongdouble``, a non-native byte
    order)."""
    def torch_has(dtype: np.dtype) -> bool:
        return dtype.isnative and dtype.itemsize <= (16 if dtype.kind == "c" else 8)

    return array_tree(space) and all(torch_has(np.dtype(s.dtype)) for s in leaf_spaces(space))


def leaf_spaces(space: spaces.Space) -> List[spaces.Space]:
    """The leaf spaces of ``space`` in depth-first order: a Dict's values in the order the space
    lists its keys, a Tuple's items in order; ``[space]`` for any other space."""
    return tree_leaves(space, space)


def tree_leaves(space: spaces.Space, batch: Any) -> List[Any]:
    """The leaves of ``batch`` (a batch, or one env's value, of ``space``: dicts and tuples
    shaped as the space) in :func:`leaf_spaces`' order; ``[batch]`` for a space that is neither
    a Dict nor a Tuple."""
    leaves: List[Any] = []
    _containers(space, batch, leaves.append)
    return leaves


class _TooFewLeaves(Exception):
    """Raised inside :func:`tree_of`'s walk when the leaves run out."""


def tree_of(space: spaces.Space, leaves: Sequence[Any]) -> Any:
    """``leaves`` (one per leaf of ``space``, in :func:`leaf_spaces`' order) in new dicts and
    tuples shaped as ``space``; the one leaf of a space that is neither a Dict nor a Tuple.

    Raises:
        ValueError: ``leaves`` does not hold exactly one value per leaf of ``space``."""
    it = iter(leaves)

    def take(_: Any) -> Any:
        for leaf in it:
            return leaf
        raise _TooFewLeaves

    try:
        tree = _containers(space, space, take)
        exact = next(it, it) is it  # and none left over
    except _TooFewLeaves:
        exact = False
    if not exact:
        raise ValueError(f"{len(leaves)} leaves for a space of {len(leaf_spaces(space))}: {space}")
    return tree


def _leases_of(pool: Any, seg: np.ndarray, space: spaces.Space, n: int, obs_leaves: list) -> Leases:
    """The :class:`ringenv._leases.Leases` of ``pool``'s slots: per slot, the bytes of its
    observation leaves, read as ``space`` batched (one array, or dicts and tuples of arrays)."""
    def span(s: int) -> Tuple[int, int]:
        offs = [pool.offset(s, "obs", k) for k in range(len(obs_leaves))]
        return min(offs), max(o + n * _layout.leaf_bytes(leaf) for o, leaf in zip(offs, obs_leaves))

    def build(s: int, token: np.ndarray, start: int) -> Any:
        if _layout.is_flat(space):
            return _layout.flat_view(space, n, token, pool.offset(s, "obs") - start)
        offsets = [pool.offset(s, "obs", k) - start for k in range(len(obs_leaves))]
        return read_from_shared_memory(space, _layout.bind(space, n, token, offsets, obs_leaves), n=n)

    return Leases(seg, [span(s) for s in range(pool.depth)], build, functools.partial(_views, _shape(space)))


class _Keys(tuple):
    """The :func:`_shape` of a Dict whose items are all leaves: its keys."""


def _shape(space: spaces.Space) -> Any:
    """The containers of ``space``, for :func:`_views` to walk without the spaces: ``None`` for a
    leaf, a ``dict`` of each key's shape for a Dict (:class:`_Keys`, its keys, where every item
    is a leaf: one comprehension then makes its views), a ``tuple`` of each item's for a Tuple."""
    if isinstance(space, spaces.Dict):
        subs = {key: _shape(sub) for key, sub in space.spaces.items()}
        return _Keys(subs) if subs and all(sub is None for sub in subs.values()) else subs
    if isinstance(space, spaces.Tuple):
        return tuple(_shape(sub) for sub in space.spaces)
    return None


def _views(shape: Any, batch: Any, rows: Optional[Tuple[int, int]] = None) -> Any:
    """``batch`` (a batch of an :func:`array_tree` of :func:`_shape` ``shape``), or its rows
    ``rows[0]:rows[1]``, in new dicts and tuples holding new views of its arrays
    (``ndarray.view``, a slice): each holds its own reference to the arrays' base."""
    if shape is None:
        return batch.view() if rows is None else batch[rows[0]:rows[1]]
    if type(shape) is _Keys:  # a slice makes a new view, of every row where both ends are None
        a, b = rows or (None, None)
        return {key: batch[key][a:b] for key in shape}
    if type(shape) is dict:
        return {key: _views(sub, batch[key], rows) for key, sub in shape.items()}
    return tuple(_views(sub, batch[i], rows) for i, sub in enumerate(shape))


def _containers(space: spaces.Space, batch: Any, leaf: Optional[Callable[[np.ndarray], Any]] = None) -> Any:
    """``batch`` (a batch of ``space``) in new dicts and tuples holding the same arrays, or
    ``leaf(array)`` for each."""
    if isinstance(space, spaces.Dict):
        return {key: _containers(sub, batch[key], leaf) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_containers(sub, batch[i], leaf) for i, sub in enumerate(space.spaces))
    return batch if leaf is None else leaf(batch)


def _gather(space: spaces.Space, parts: List[Tuple[Any, int, int]]) -> Any:
    """The rows ``a:b`` of each ``(batch, a, b)`` of ``parts``, concatenated leaf by leaf into a
    new batch of ``space`` (an :func:`array_tree`): what Gymnasium's ``iterate`` then
    ``concatenate`` build env by env, with one copy per leaf and run instead."""
    if isinstance(space, spaces.Dict):
        return {key: _gather(sub, [(batch[key], a, b) for batch, a, b in parts]) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_gather(sub, [(batch[i], a, b) for batch, a, b in parts]) for i, sub in enumerate(space.spaces))
    if len(parts) == 1:  # one run (every step's case): a copy, ~1 µs less per leaf than concatenating one array
        batch, a, b = parts[0]
        return batch[a:b].copy()
    return np.concatenate([batch[a:b] for batch, a, b in parts])
