"""``AsyncVectorEnv(spin_us=...)``: the wake-up policy's bound reaches the workers, ``0`` means no
wait ever spins, and bad values are refused before any worker starts.

Nothing here depends on timing or scheduling: the counters asserted on (waits with a spin phase)
are decided by the policy alone, never by how long a wait took (a wait may find its condition
already true without sleeping, so sleep counts are not asserted)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from vec_asserts import child_pids

import ringenv
from ringenv import _native


def snapshot() -> dict:
    [entry] = [p for p in _native.list_pools() if p["pid"] == os.getpid()]
    return _native.pool_snapshot(entry["pid"], entry["fd"])


def run(envs, steps=200):
    out = [envs.reset(seed=4)[0]]
    for t in range(steps):
        out.extend(envs.step(np.array([(t + i) % 2 for i in range(4)]))[:4])
    return out


def test_spin_us_zero_never_spins_and_results_stay_the_same(closing):
    never = closing(ringenv.make_vec("CartPole-v1", 4, vector_kwargs={"num_workers": 2, "spin_us": 0}))
    ours = run(never)
    snap = snapshot()
    # With a bound of zero no wait of any process has a spin phase, however the processes were
    # scheduled; the counter is not touched on the sleep path.
    assert snap["main_spins"] == 0
    assert [w["spins"] for w in snap["workers"]] == [0, 0]
    assert sum(w["commands"] for w in snap["workers"]) >= 2 * 201, "every step and the reset reached both workers"
    never.close()
    ref = closing(ringenv.make_vec("CartPole-v1", 4, vector_kwargs={"num_workers": 2}))
    for x, y in zip(ours, run(ref)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_spin_us_is_refused_before_any_worker_starts(bad):
    before = set(child_pids())
    with pytest.raises(ValueError, match="spin_us must be None or a number of microseconds"):
        ringenv.make_vec("CartPole-v1", 2, vector_kwargs={"spin_us": bad})
    assert set(child_pids()) == before
