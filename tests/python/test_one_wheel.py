"""One wheel for every CPython from 3.10 on: ``ringenv._native`` is built against the stable ABI
of 3.10 (PyO3 ``abi3-py310``), which has no buffer protocol, so memory crosses through NumPy
(``bindings/src/py_segment.rs``). scripts/wheel_smoke.sh installs the wheel under 3.10 to 3.13;
these tests check the memory path in the build under test.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import ringenv
from ringenv import _native
from helper_envs import CounterEnv


def test_the_native_module_is_the_stable_abi_build():
    assert os.path.basename(_native.__file__) == "_native.abi3.so"


def test_the_segment_is_a_writable_uint8_array_over_the_mapping_owned_by_a_segment(closing):
    env = closing(ringenv.AsyncVectorEnv([functools.partial(CounterEnv, i) for i in range(2)], num_workers=1))
    env.reset(seed=0)
    seg = env._pool.segment()
    assert isinstance(seg, np.ndarray) and seg.dtype == np.uint8 and seg.ndim == 1
    assert seg.flags.writeable and seg.flags.c_contiguous
    assert isinstance(seg.base, _native.Segment) and len(seg.base) == seg.size
    # Another call maps nothing new: the same bytes, seen through numpy.frombuffer as _slots.py does.
    other = env._pool.segment()
    assert other.ctypes.data == seg.ctypes.data and other.base is not seg.base
    offset = env._pool.offset(0, "reward")
    reward = np.frombuffer(other, np.float64, 2, offset)
    seg[offset:offset + 8] = np.frombuffer(np.float64(2.5).tobytes(), np.uint8)
    assert reward[0] == 2.5


def test_host_buffers_that_are_not_writable_contiguous_memory_are_refused_before_cuda():
    # Checked before the driver is opened, so on any machine.
    with pytest.raises(ValueError, match="segment must be a writable, C-contiguous buffer"):
        _native.CudaStaging(0, object())
    with pytest.raises(ValueError, match="segment must be a writable, C-contiguous buffer: ndarray is not C-contiguous"):
        _native.CudaStaging(0, np.zeros(64, np.uint8)[::2])
    with pytest.raises(ValueError, match="segment must be a non-empty, writable"):
        _native.CudaStaging(0, b"read-only bytes")
    with pytest.raises(ValueError, match="segment must be a non-empty, writable"):
        _native.CudaStaging(0, bytearray())


def test_importing_a_source_tree_without_its_build_says_so(tmp_path):
    """The package's Python files without ``_native.abi3.so`` (``import ringenv`` run inside
    ``bindings/python`` of an unbuilt clone) raise an ``ImportError`` that names the missing
    extension, not Python's "partially initialized module ... circular import"."""
    shutil.copytree(os.path.dirname(ringenv.__file__), tmp_path / "ringenv",
                    ignore=shutil.ignore_patterns("_native*.so", "__pycache__"))
    done = subprocess.run([sys.executable, "-c", "import ringenv"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    assert "ImportError: ringenv's compiled extension (ringenv._native, _native.abi3.so) cannot be imported" in done.stderr
    assert "circular import" not in done.stderr.splitlines()[-1]


def test_importing_and_stepping_loads_no_module_of_the_command_or_the_extras():
    """pyproject.toml's core dependencies hold what importing and stepping need (NumPy, Gymnasium,
    cloudpickle) and the ``ringenv`` command's own (rich, psutil), which load only when a command
    runs; the extras' packages (matplotlib for ``tune --plot``, minigrid, torch, Ray) load only
    where a user imports them."""
    code = """
import sys
import gymnasium as gym, numpy as np, ringenv

def cartpole():
    return gym.make("CartPole-v1")

for envs in (ringenv.make_vec("CartPole-v1", 2), ringenv.AsyncVectorEnv([cartpole] * 2)):
    envs.reset(seed=0)
    envs.step(np.zeros(2, np.int64))
    envs.close()
print(sorted(m for m in ("matplotlib", "minigrid", "psutil", "ray", "rich", "torch") if m in sys.modules))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n", done.stdout
