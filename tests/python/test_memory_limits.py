"""A pool made where memory is limited (``ulimit -v``: RLIMIT_AS, as clusters set it) fails with
a Python exception, never by aborting the process: every large buffer ringenv's native code
allocates while a pool starts (a worker's init message, which holds the pickled factories and
spaces, megabytes for a big ``Box``; a control frame) is allocated fallibly and reported as
``MemoryError``, where Rust's infallible allocation would abort (SIGABRT).

Which allocation fails first depends on the limit, so the scenario sweeps it: from a little
above what the interpreter already maps to enough for the pool to start.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_SCRIPT = r"""
import resource, sys
import gymnasium as gym, numpy as np, ringenv

MIB = 16  # each observation: a Box of 16 MiB of uint8, so each init message holds ~64 MiB of spaces

class Big(gym.Env):
    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 255, (MIB << 20,), np.uint8)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros(MIB << 20, np.uint8), {}

    def step(self, action):
        return np.zeros(MIB << 20, np.uint8), 0.0, False, False, {}

mapped = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (mapped + (int(sys.argv[1]) << 20), resource.RLIM_INFINITY))
num_workers = None if sys.argv[2] == "default" else int(sys.argv[2])
try:
    envs = ringenv.AsyncVectorEnv([Big] * 4, num_workers=num_workers)
    envs.reset(seed=0)
    envs.step(np.zeros(4, np.int64))
    envs.close()
    print("started")
except Exception as e:
    print(type(e).__name__)
"""


@pytest.mark.parametrize("layout", ["default", "2"])
@pytest.mark.parametrize("extra_mib", [300, 400, 500, 600, 700, 800, 900, 1000])
def test_a_pool_under_an_address_space_limit_raises_instead_of_aborting(layout, extra_mib):
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(extra_mib), layout], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"exit status {done.returncode}; stderr:\n{done.stderr[-3000:]}"
    outcome = done.stdout.strip().splitlines()[-1]
    assert outcome in {"started", "MemoryError", "RingenvError", "WorkerStartupError", "WorkerDiedError"}, done.stdout
