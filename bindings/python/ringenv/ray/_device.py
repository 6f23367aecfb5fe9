"""``device="cuda"`` for ``ringenv.ray``: the driver's batches staged to a GPU through ringenv's
pinned path (:class:`ringenv._staging.GpuStaging`, docs/GPU.md).

A Ray vector env's batches arrive block by block from Ray's object store, so the driver owns one
page-aligned host buffer (an anonymous ``mmap``) holding, for each of two slots used in turn, the
batch arrays of the whole vector env, and hands it to :class:`~ringenv._staging.GpuStaging` as its
"segment". :meth:`PinnedBatches.assemble` concatenates the blocks' arrays straight into a slot's
pinned arrays and enqueues the copies without waiting for the GPU.
"""

from __future__ import annotations

import functools
import mmap
from typing import TYPE_CHECKING, Any, List, Sequence, Tuple

import numpy as np
from gymnasium import spaces

from ringenv._slots import device_tree, leaf_spaces, tree_leaves, tree_of
from ringenv._staging import DeviceBatches, GpuStaging

if TYPE_CHECKING:
    import torch

__all__ = ["PinnedBatches", "check_space"]

#: Slots of the pinned buffer, used in turn (a slot is rewritten two batches after its copy).
SLOTS = 2
_ALIGN = 64  # each array starts on a cache line


def check_space(space: spaces.Space, device: Any) -> None:
    """Raises ``ValueError`` unless ``space`` is arrays per env (a Box, Discrete, MultiDiscrete or
    MultiBinary space, or a Dict or Tuple of them, nested or not) of dtypes torch has
    (:func:`ringenv._slots.device_tree`)."""
    if not device_tree(space):
        raise ValueError(f"device={device!r} needs observations of arrays (a Box, Discrete, MultiDiscrete or "
                         f"MultiBinary space, or a Dict or Tuple of them, of dtypes torch has), got {space}; "
                         "use device='cpu'")


class PinnedBatches(DeviceBatches):
    """Batches of ``num_envs`` envs of ``single_observation_space`` assembled in page-locked host
    memory and staged to ``device``.

    Args:
        device: a ``torch.device`` of type cuda (from :func:`ringenv._staging.parse_device`).
        single_observation_space: arrays per env (see :func:`check_space`): one array space, or a
            Dict or Tuple of them, whose every leaf gets its own pinned array per slot.
        num_envs: rows of the largest batch.

    Attributes:
        staging: the :class:`~ringenv._staging.GpuStaging` over the buffer (``pin_mode`` says
            whether the buffer itself is page-locked or copied through a pinned mirror).

    Raises:
        ValueError: an observation space that is not arrays (a Text or Graph leaf).
        CudaUnavailableError, CudaError: as :class:`~ringenv._staging.GpuStaging`.
    """

    def __init__(self, device: "torch.device", single_observation_space: spaces.Space, num_envs: int):
        check_space(single_observation_space, device)
        self._space = single_observation_space
        leaves = leaf_spaces(single_observation_space)
        columns = [((num_envs, *(leaf.shape or ())), np.dtype(leaf.dtype if leaf.dtype is not None else np.int64))
                   for leaf in leaves]
        columns += [((num_envs,), np.dtype(np.float64)), ((num_envs,), np.dtype(np.bool_)),
                    ((num_envs,), np.dtype(np.bool_))]
        offsets, size = [], 0
        for _ in range(SLOTS):
            for shape, dtype in columns:
                offsets.append(size)
                size += -(-int(np.prod(shape)) * dtype.itemsize // _ALIGN) * _ALIGN
        # Anonymous and page-aligned (cuMemHostRegister pins whole pages); one range for all slots.
        self._buffer = mmap.mmap(-1, max(size, mmap.PAGESIZE))
        whole = np.frombuffer(self._buffer, np.uint8)
        self.host: List[List[np.ndarray]] = [
            [whole[o:o + int(np.prod(shape)) * dtype.itemsize].view(dtype).reshape(shape)
             for o, (shape, dtype) in zip(offsets[s * len(columns):], columns)] for s in range(SLOTS)]
        self.device = device
        # What DeviceBatches._split needs: the leaves come first, then rewards and the flags.
        self._num_leaves = len(leaves)
        self._tree = functools.partial(tree_of, single_observation_space)
        self.staging = GpuStaging(device, self.host, self._buffer)
        self._turn = 0

    def assemble(self, obs: Sequence[Any], rewards: Sequence[np.ndarray], terminated: Sequence[np.ndarray],
                 truncated: Sequence[np.ndarray]) -> Tuple[Any, Any, Any, Any]:
        """The blocks' results (per block, in env order: its observation batch, an array or dicts
        and tuples of arrays shaped as the space, and one array per other column) as one batch of
        tensors on the device: observations of each leaf's dtype and shape ``(rows, ...)`` (in
        the space's dicts and tuples for a Dict or Tuple space), rewards ``float64``, the flags
        ``bool``, each the caller's own (cloned on the device, on the same stream). One host
        copy and one host-to-device copy per leaf and column; the copies are enqueued on the
        caller's current stream and nothing waits for them.

        Raises:
            CudaError: a driver call failed.
        """
        slot, self._turn = self._turn, (self._turn + 1) % SLOTS
        self.staging.before_reuse(slot)  # the copy that last read this slot (two batches ago) is done
        rows = sum(len(r) for r in rewards)
        blocks = [tree_leaves(self._space, o) for o in obs]
        columns = [[block[k] for block in blocks] for k in range(self._num_leaves)]
        for dest, parts in zip(self.host[slot], (*columns, rewards, terminated, truncated)):
            np.concatenate(parts, axis=0, out=dest[:rows], casting="same_kind")
        staged = self.staging.stage(slot, slice(0, rows))
        # Clones: a Ray vector env's results are always new, and the staging's tensors are reused.
        observations, (reward, term, trunc) = self._split([t.clone() for t in staged])
        return observations, reward, term, trunc

    def close(self) -> None:
        """Waits for the copies in flight, unpins the buffer; tensors returned stay valid."""
        self.staging.close()
