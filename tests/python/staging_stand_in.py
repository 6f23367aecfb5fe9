"""A host stand-in for :class:`ringenv._staging.GpuStaging`, for machines without a GPU: the
device path of a local vector env runs through it in CI. What it stands
in for is checked on a GPU by the tests that need one (skipped elsewhere, printing why)."""

from __future__ import annotations

import numpy as np


class HostStaging:
    """``GpuStaging``'s interface on the host: ``stage`` and ``stage_new`` return CPU tensors
    copied from the slot's arrays, and every call is logged (``log``: ``("reuse", slot)``,
    ``("stage", slot, start, stop)``, ``("stage_new", *pieces)``). Each one made is appended to
    ``HostStaging.made`` (a fixture resets it)."""

    made: list = []

    def __init__(self, device, host_arrays_per_slot, segment):
        self.device, self.segment = device, segment
        self.host = [list(arrays) for arrays in host_arrays_per_slot]
        self.num_envs = self.host[0][0].shape[0]
        self.log, self.closed = [], False
        HostStaging.made.append(self)

    def before_reuse(self, slot):
        self.log.append(("reuse", slot))

    def stage(self, slot, rows=None):
        import torch

        assert not self.closed
        rows = rows or slice(0, self.num_envs)
        self.log.append(("stage", slot, rows.start, rows.stop))
        return [torch.from_numpy(a[rows].copy()) for a in self.host[slot]]

    def stage_new(self, pieces):
        import torch

        assert not self.closed
        self.log.append(("stage_new", *pieces))
        return [torch.from_numpy(np.concatenate([self.host[s][k][a:b] for s, a, b in pieces]))
                for k in range(len(self.host[0]))]

    def close(self):
        self.closed = True
