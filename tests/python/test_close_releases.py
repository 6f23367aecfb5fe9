"""``close()`` releases every OS resource of a vector env at once, even while the env object is
still referenced: the segment's memfd, the control sockets, the workers' pidfds. The mapping
stays while an array the caller holds (an observation returned with ``copy=False``) points into
it, and goes with the last such array, so no array ever points at unmapped memory.

Counts are taken from ``/proc/self/fd`` and ``/proc/self/maps`` of this process (no timing).
"""

from __future__ import annotations

import functools
import gc
import os

import numpy as np
import pytest

import ringenv
from helper_envs import CounterEnv


def _fds() -> set:
    return set(os.listdir("/proc/self/fd"))


def _memfd_maps() -> list:
    with open("/proc/self/maps") as f:
        return [line for line in f if "/memfd:" in line]


def _make(copy: bool = True):
    return ringenv.AsyncVectorEnv([functools.partial(CounterEnv, i) for i in range(2)], num_workers=2, copy=copy)


def test_ten_closed_envs_kept_in_a_list_hold_no_descriptor_and_no_mapping():
    gc.collect()
    fds_before, maps_before = _fds(), _memfd_maps()
    envs = [_make() for _ in range(10)]
    for env in envs:
        env.reset(seed=0)
        env.step(np.ones(2, np.int64))
    assert len(_fds() - fds_before) >= 10 * 5, "each open env holds a memfd, sockets and pidfds"
    assert len(_memfd_maps()) >= len(maps_before) + 10
    for env in envs:
        env.close()
    # The envs are still referenced (the list), closed.
    assert all(env.closed for env in envs)
    assert _fds() - fds_before == set(), f"descriptors left open: {sorted(_fds() - fds_before)}"
    assert _memfd_maps() == maps_before, "the closed envs' segments are still mapped"
    with pytest.raises(ringenv.errors.ClosedEnvironmentError):
        envs[0].step(np.ones(2, np.int64))


def test_a_view_the_caller_holds_keeps_the_mapping_alone_and_valid_until_it_dies():
    gc.collect()
    fds_before, maps_before = _fds(), _memfd_maps()
    env = _make(copy=False)
    env.reset(seed=0)
    obs, *_ = env.step(np.ones(2, np.int64))
    assert obs.tolist() == [[0.0, 1.0], [1.0, 1.0]]
    env.close()
    # Descriptors are gone at once; the view still reads the last values from the mapping.
    assert _fds() - fds_before == set(), f"descriptors left open: {sorted(_fds() - fds_before)}"
    assert len(_memfd_maps()) == len(maps_before) + 1, "the caller's view keeps the mapping"
    assert obs.tolist() == [[0.0, 1.0], [1.0, 1.0]]
    del obs
    gc.collect()
    assert _memfd_maps() == maps_before, "the mapping goes with the last view"


def test_a_worker_death_releases_the_descriptors_of_the_closed_env():
    from helper_envs import ExitEnv

    gc.collect()
    fds_before, maps_before = _fds(), _memfd_maps()
    env = ringenv.AsyncVectorEnv([functools.partial(ExitEnv, 0, 0, 1, 3), functools.partial(CounterEnv, 1)],
                                 num_workers=2)
    env.reset(seed=0)
    with pytest.raises(ringenv.errors.WorkerDiedError):
        env.step(np.ones(2, np.int64))
    assert env.closed
    assert _fds() - fds_before == set(), f"descriptors left open: {sorted(_fds() - fds_before)}"
    assert _memfd_maps() == maps_before
