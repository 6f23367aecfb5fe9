"""``device="cuda"`` for :class:`ringenv.AsyncVectorEnv`: its batches, staged from the shared
segment to the GPU by :class:`ringenv._staging.GpuStaging`, come back as torch tensors; actions
may be torch tensors (CUDA or CPU).

The vector env calls :meth:`DeviceBatches.before_reuse` before every command that makes workers
rewrite a slot (the copy of that slot's last batch must have finished: in a pipeline of depth 2
it has, and the call returns at once), and :meth:`DeviceBatches.batch` after every result.
"""

from __future__ import annotations

import sys
from typing import Any, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from ringenv._staging import GpuStaging

__all__ = ["DeviceBatches", "host_actions"]


class DeviceBatches:
    """The GPU side of a vector env.

    Args:
        device: a ``torch.device`` of type cuda (from :func:`ringenv._staging.parse_device`).
        obs: per slot, the ``(num_envs, ...)`` observation array of a single-array observation
            space (Box, Discrete, MultiDiscrete, MultiBinary).
        reward, terminated, truncated: per slot, the ``(num_envs,)`` arrays.
        segment: the pool's segment.

    Raises:
        CudaUnavailableError, CudaError: as :class:`ringenv._staging.GpuStaging`.
    """

    def __init__(self, device: Any, obs: Sequence[np.ndarray], reward: Sequence[np.ndarray],
                 terminated: Sequence[np.ndarray], truncated: Sequence[np.ndarray], segment: Any):
        self.device = device
        arrays = [[o, r, te, tr] for o, r, te, tr in zip(obs, reward, terminated, truncated)]
        self.staging = GpuStaging(device, arrays, segment)

    def before_reuse(self, slots: Iterable[int]) -> None:
        """Blocks until the last copies of ``slots`` finished (at once in a depth-2 pipeline)."""
        for slot in set(slots):
            self.staging.before_reuse(slot)

    def batch(self, pieces: List[Tuple[int, int, int]], copy: bool) -> Tuple[Any, Any, Any, Any]:
        """``(observations, rewards, terminations, truncations)`` as tensors on the device, for
        the rows ``start:stop`` of slot ``slot`` of each ``(slot, start, stop)`` piece, in order:
        observations of the space's dtype and shape ``(rows, ...)``, rewards ``float64``, the
        flags ``bool``. Copies are enqueued on the caller's current stream and nothing waits for
        them. Without ``copy`` the tensors are reused two batches later (see
        :meth:`GpuStaging.stage`); with it they are the caller's own.
        """
        import torch

        parts = [self.staging.stage(slot, slice(start, stop)) for slot, start, stop in pieces]
        if len(parts) == 1:
            obs, reward, terminated, truncated = parts[0]
            if copy:
                obs, terminated, truncated = obs.clone(), terminated.clone(), truncated.clone()
        else:  # torch.cat makes new tensors, enqueued on the same stream after the copies
            obs, reward, terminated, truncated = (torch.cat(column) for column in zip(*parts))
        return obs, reward.to(torch.float64, copy=True), terminated, truncated

    def observations(self, slot: int, copy: bool) -> Any:
        """The observations of every env of slot ``slot`` (after a reset), as :meth:`batch`."""
        return self.batch([(slot, 0, self.staging.num_envs)], copy)[0]

    def close(self) -> None:
        """Waits for the copies in flight and unpins the segment."""
        self.staging.close()


def host_actions(actions: Any, staging: Optional[DeviceBatches]) -> Any:
    """``actions`` as a NumPy array of the same dtype when it is a torch tensor (a CUDA tensor is
    copied to the host on its current stream, through the pinned staging when there is one, and
    that stream alone is waited for); anything else is returned as it is, so the vector env's
    checks see the caller's values and dtype either way."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(actions, torch.Tensor):
        return actions
    if actions.device.type == "cuda" and staging is not None and actions.device == staging.device:
        host = np.empty(tuple(actions.shape), dtype=torch.empty(0, dtype=actions.dtype).numpy().dtype)
        staging.staging.actions_to_host(actions, host)
        return host
    return actions.detach().cpu().numpy()
