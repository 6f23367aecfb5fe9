"""``AsyncVectorEnv(spin_us=...)``: the wake-up policy's bound reaches the workers, ``0`` makes
every wait sleep on the futex, and bad values are refused before any worker starts."""

from __future__ import annotations

import os

import numpy as np
import pytest
from vec_asserts import child_pids

import ringenv
from ringenv import _native


def worker_sleeps(envs) -> list:
    [entry] = [p for p in _native.list_pools() if p["pid"] == os.getpid()]
    return [w["sleeps"] for w in _native.pool_snapshot(entry["pid"], entry["fd"])["workers"]]


def run(envs, steps=200):
    out = [envs.reset(seed=4)[0]]
    for t in range(steps):
        out.extend(envs.step(np.array([(t + i) % 2 for i in range(4)]))[:4])
    return out


def test_spin_us_zero_makes_every_worker_wait_sleep_and_results_stay_the_same(closing):
    never = closing(ringenv.make_vec("CartPole-v1", 4, vector_kwargs={"num_workers": 1, "spin_us": 0}))
    never.reset(seed=0)
    before = worker_sleeps(never)[0]
    ours = run(never)
    # A worker that never spins sleeps in every wait for its next command: the next step can
    # only be sent after the main process read this one's completion.
    assert worker_sleeps(never)[0] - before >= 200
    never.close()
    ref = closing(ringenv.make_vec("CartPole-v1", 4, vector_kwargs={"num_workers": 1}))
    for x, y in zip(ours, run(ref)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_spin_us_is_refused_before_any_worker_starts(bad):
    before = set(child_pids())
    with pytest.raises(ValueError, match="spin_us must be None or a number of microseconds"):
        ringenv.make_vec("CartPole-v1", 2, vector_kwargs={"spin_us": bad})
    assert set(child_pids()) == before
