"""``ringenv.settle_allocator()``, an opt-in (``ringenv/_allocator.py``): after it, the arrays of
a copied ``copy=True`` batch come from the heap instead of pages the kernel faults in and zeroes
at every step. Page faults are counted (``getrusage``), so nothing here depends on timing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
                                reason="glibc's dynamic mmap threshold is what ringenv.settle_allocator sets up")

STEPS = 40

_SCRIPT = textwrap.dedent("""
    import ctypes, resource, sys
    import numpy as np
    import gymnasium as gym
    from gymnasium import spaces
    import ringenv, ringenv.vector

    class BigEnv(gym.Env):
        # 12 leaves, 148 KiB (uint8, int16, int64; benches/grid.py's Dict), one preallocated observation
        def __init__(self):
            leaves = {}
            for i in range(4):
                leaves[f"frame{i}"] = spaces.Box(0, 255, (64, 64, 3), np.uint8)
                leaves[f"height{i}"] = spaces.Box(-1000, 1000, (48, 48, 2), np.int16)
                leaves[f"ids{i}"] = spaces.Box(0, 2**31 - 1, (32, 32, 2), np.int64)
            self.observation_space = spaces.Dict(leaves)
            self.action_space = spaces.Discrete(2)
            self.obs = {k: np.zeros(s.shape, s.dtype) for k, s in leaves.items()}

        def reset(self, *, seed=None, options=None):
            return self.obs, {}

        def step(self, action):
            return self.obs, 0.0, False, False, {}

    if sys.argv[1] == "unsettled":
        # glibc's own threshold, held there (mallopt turns its dynamic raise off): what a process
        # gets whose history never freed a block this large
        ctypes.CDLL(None).mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
    else:
        ringenv.settle_allocator()
    # Batches that are copied (a batch this large is lent instead where it can be, ringenv/_leases.py;
    # it is copied where the caller holds every other slot, and for asynchronous batches).
    ringenv.vector.lends = lambda *args: False
    envs = ringenv.AsyncVectorEnv([BigEnv] * 8, num_workers=0)   # copy=True: 1.2 MB a batch
    obs, _ = envs.reset(seed=0)
    actions = np.zeros(8, np.int64)
    for _ in range(5):
        obs = envs.step(actions)[0]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(STEPS):
        obs = envs.step(actions)[0]   # the last batch kept, as a policy loop keeps it
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    envs.close()
""").replace("STEPS", str(STEPS))


def _faults(how: str) -> int:
    out = subprocess.run([sys.executable, "-c", _SCRIPT, how], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def test_after_settle_allocator_copied_batches_come_from_the_heap_not_fresh_pages():
    # The premise: at glibc's default mmap threshold, ~120 pages a batch faulted in at each step
    # (each 128 KiB leaf is mapped and unmapped); it holds if any of three processes shows it.
    unsettled = max(_faults("unsettled") for _ in range(3))
    assert unsettled > STEPS * 50, unsettled
    settled = _faults("settled")
    assert settled < STEPS * 5, (settled, unsettled)

