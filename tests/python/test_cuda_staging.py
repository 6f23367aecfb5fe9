"""GPU staging (ringenv._staging, docs/GPU.md).

Everywhere: ``device`` strings are checked, asking for CUDA where it cannot be used raises
``CudaUnavailableError`` saying why, and ``import ringenv`` does not import torch. Against a
stand-in driver (tests/rust/support/fake_libcuda.c, built with ``cc``, where "device memory" is
host memory), ``ringenv._native.CudaStaging`` runs every call path, both pinning modes, and maps
driver errors to typed exceptions. Where a CUDA
device is usable: staged values equal the host arrays for every dtype, the copy is ordered on the
caller's current stream and ``stage`` returns before it ran, the two output sets alternate, a
slot is safe to rewrite after ``before_reuse``, actions come back from the GPU, and a real pool's
memfd segment stages. Elsewhere those tests skip, printing why.
"""

from __future__ import annotations

import mmap
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import ringenv
from ringenv import _native
from ringenv._staging import GpuStaging, parse_device
from ringenv.errors import CudaError, CudaUnavailableError, RingenvError, _from_native

N = 8

REASONS = {"no_driver", "no_torch", "torch_without_cuda", "no_device"}


def _driver_device_count():
    """The driver's device count, or None without a driver."""
    try:
        return _native.cuda_device_count()
    except CudaUnavailableError:
        return None


# -- everywhere: the device argument and the no-GPU errors --------------------------------------


def test_import_ringenv_does_not_import_torch():
    code = "import sys, ringenv, ringenv._staging; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_cpu_and_none_mean_host_arrays():
    assert parse_device(None) is None
    assert parse_device("cpu") is None
    torch = pytest.importorskip("torch", reason="torch.device objects need PyTorch")
    assert parse_device(torch.device("cpu")) is None


@pytest.mark.parametrize("device", ["cuda:x", "tpu", "cuda:", "CUDA", "cuda:0:1", "gpu", ""])
def test_bad_device_strings_raise_value_error_naming_the_argument(device):
    with pytest.raises(ValueError, match="device must be 'cpu', 'cuda' or 'cuda:N'") as info:
        parse_device(device)
    assert repr(device) in str(info.value)


def test_a_device_of_another_type_raises_type_error():
    with pytest.raises(TypeError, match="got int 0"):
        parse_device(0)


def test_asking_for_cuda_without_a_driver_says_so():
    if _driver_device_count() is not None:
        pytest.skip("a CUDA driver is installed here: the no-driver error cannot occur")
    for device in ("cuda", "cuda:0", "cuda:3"):
        with pytest.raises(CudaUnavailableError) as info:
            parse_device(device)
        e = info.value
        assert isinstance(e, RuntimeError) and isinstance(e, RingenvError)
        assert e.reason == "no_driver"
        assert str(e) == (f"device={device!r}: libcuda.so.1 not found: install the NVIDIA driver "
                          "or use device='cpu'")
    with pytest.raises(CudaUnavailableError, match="libcuda.so.1 not found") as info:
        _native.cuda_device_count()
    assert info.value.reason == "no_driver"


def test_asking_for_cuda_where_it_cannot_be_used_gives_a_reason():
    # Whatever this machine lacks (driver, torch, a CUDA build of torch, a device), the error
    # names it; on a GPU machine the device resolves instead.
    for device in ("cuda", "cuda:0"):
        try:
            resolved = parse_device(device)
        except CudaUnavailableError as e:
            assert e.reason in REASONS, e.reason
            assert str(e).startswith(f"device={device!r}: ")
        else:
            assert resolved.type == "cuda" and resolved.index is not None


def test_gpu_staging_without_cuda_fails_before_touching_the_segment():
    if _driver_device_count() is not None:
        pytest.skip("a CUDA driver is installed here: the no-driver error cannot occur")
    segment = mmap.mmap(-1, 4096)
    arrays = [[np.frombuffer(segment, np.float32, N, 0)]]
    with pytest.raises(CudaUnavailableError, match="libcuda.so.1 not found"):
        GpuStaging("cuda", arrays, segment)
    with pytest.raises(CudaUnavailableError, match="libcuda.so.1 not found"):
        _native.CudaStaging(0, segment)


def test_native_errors_become_typed_exceptions():
    e = _from_native("cuda_unavailable", "no CUDA device 3: the driver sees 2 device(s), numbered 0 to 1",
                     {"reason": "no_device", "ordinal": 3, "count": 2})
    assert isinstance(e, CudaUnavailableError) and (e.reason, e.ordinal, e.count) == ("no_device", 3, 2)
    e = _from_native("cuda", "cuMemcpyHtoDAsync failed: CUDA_ERROR_INVALID_VALUE (1): invalid argument",
                     {"call": "cuMemcpyHtoDAsync", "code": 1, "name": "CUDA_ERROR_INVALID_VALUE"})
    assert isinstance(e, CudaError) and isinstance(e, RingenvError)
    assert (e.call, e.code, e.name) == ("cuMemcpyHtoDAsync", 1, "CUDA_ERROR_INVALID_VALUE")


# -- against a stand-in driver, on any machine ------------------------------------------------------

FAKE_DRIVER = Path(__file__).resolve().parents[1] / "rust" / "support" / "fake_libcuda.c"
RELEASED = "fake libcuda: retained=0 events=0 registered=0 host_allocs=0 contexts_pushed=0"

FAKE_SCRIPT = textwrap.dedent("""
    import mmap, os, sys
    import numpy as np
    from ringenv import _native
    from ringenv._staging import parse_device
    from ringenv.errors import CudaError, CudaUnavailableError

    assert _native.cuda_device_count() == 1
    segment = mmap.mmap(-1, 1 << 16)
    host = np.frombuffer(segment, np.float32, 64, 4096)
    host[:] = np.arange(64)
    staging = _native.CudaStaging(0, segment, slots=2)
    assert staging.ordinal == 0 and staging.slots == 2
    whole = np.frombuffer(segment, np.uint8)
    assert staging.host_range == (whole.__array_interface__["data"][0], 1 << 16)
    if os.environ.get("FAKE_CUDA_REGISTER_FAILS"):
        assert staging.pin_mode == "staging_buffer", staging.pin_mode
        assert "cuMemHostRegister failed: CUDA_ERROR_NOT_PERMITTED" in staging.fallback_reason
    else:
        assert staging.pin_mode == "registered" and staging.fallback_reason is None
    device = np.zeros(32, np.float32)  # "device memory" under the fake driver
    device_ptr = device.__array_interface__["data"][0]
    host_ptr = host.__array_interface__["data"][0]
    assert staging.is_done(1)
    staging.copy_to_device(1, [(host_ptr + 16 * 4, device_ptr, 32 * 4)], 0x1234)
    staging.wait_slot(1)
    assert staging.is_done(1)
    assert np.array_equal(device, np.arange(16, 48)), device
    back = np.zeros(32, np.float32)
    staging.copy_to_host(device_ptr, back, 7)
    assert np.array_equal(back, np.arange(16, 48))

    def raises(cls, call, *args):
        try:
            call(*args)
        except cls as e:
            return e
        raise AssertionError(f"{call} did not raise {cls.__name__}")

    e = raises(CudaError, staging.copy_to_device, 0, [(host_ptr, 0, 4)], 0)
    assert (e.call, e.code, e.name) == ("cuMemcpyHtoDAsync", 1, "CUDA_ERROR_INVALID_VALUE"), vars(e)
    assert "not inside the registered memory" in str(raises(ValueError, staging.copy_to_device, 0,
                                                           [(host_ptr - 8192, device_ptr, 4)], 0))
    assert "slot 2 out of range" in str(raises(ValueError, staging.wait_slot, 2))
    assert "C-contiguous" in str(raises(ValueError, staging.copy_to_host, device_ptr, back[::2], 0))
    e = raises(CudaUnavailableError, _native.CudaStaging, 1, segment)
    assert (e.reason, e.ordinal, e.count) == ("no_device", 1, 1), vars(e)
    assert "the driver sees 1 device(s)" in str(e)
    # The driver is there; PyTorch decides the rest (checked in one run only: importing torch is slow).
    if os.environ.get("CHECK_TORCH"):
        import torch
    if os.environ.get("CHECK_TORCH") and torch.version.cuda is None:
        e = raises(CudaUnavailableError, parse_device, "cuda:0")
        assert e.reason == "torch_without_cuda" and "CPU-only build" in str(e), str(e)
    del staging
    print("fake driver script done")
""")


#: ``GpuStaging`` itself against the stand-in driver, whose "device memory" is host memory: host
#: tensors stand in for the device's (``parse_device`` and the stream patched), so the copies it
#: plans land where a real driver would put them. Every staged tensor is checked against the host
#: arrays, and so is the number of copies: one for a whole slot laid out as a pool lays it out,
#: into the reused tensors or into new ones.
GPU_STAGING_SCRIPT = textwrap.dedent("""
    import gc
    import numpy as np, torch
    from ringenv import _staging
    from test_cuda_staging import N, _fill, _segment_arrays

    _staging.parse_device = lambda device: torch.device("cpu", 0)
    segment, arrays = _segment_arrays()
    for s, slot in enumerate(arrays):
        _fill(slot, s)
    copies = []

    class Counting:
        def __init__(self, native):
            self.native = native

        def copy_to_device(self, slot, planned, stream):
            copies.append(len(planned))
            self.native.copy_to_device(slot, planned, stream)

    def stand_in(host_arrays):
        staging = _staging.GpuStaging("cuda", host_arrays, segment)
        staging._raw_stream = lambda index: 0  # the null stream, and no record_stream on host tensors
        staging._streams.add(0)
        staging._native = Counting(staging._native)
        return staging

    def check(tensors, expected):
        assert len(tensors) == len(expected)
        for k, (t, a) in enumerate(zip(tensors, expected)):
            assert (t.dtype, tuple(t.shape)) == (torch.from_numpy(a).dtype, a.shape), (k, t.dtype, t.shape, a.shape)
            assert np.array_equal(t.numpy(), a), f"array {k} ({a.dtype})"

    staging = stand_in(arrays)
    first, second = staging.stage(0), staging.stage(1)
    check(first, arrays[0])
    check(second, arrays[1])
    assert copies == [1, 1], copies
    assert staging.stage(0)[0].data_ptr() == first[0].data_ptr() != second[0].data_ptr(), "two sets, in turn"
    check(staging.stage(1, slice(2, 5)), [a[2:5] for a in arrays[1]])
    assert copies[-1] == len(arrays[1]), copies
    own = staging.stage_new([(1, 0, N)])
    check(own, arrays[1])
    assert copies[-1] == 1, copies
    check(staging.stage_new([(0, 0, N)]), arrays[0])
    check(own, arrays[1])  # new tensors: not rewritten by the next batch
    check(staging.stage_new([(1, 5, N), (0, 0, 3)]), [np.concatenate([b[5:], a[:3]]) for a, b in zip(*arrays)])
    assert copies[-2:] == [len(arrays[1])] * 2, copies
    # Arrays in another order than the pool's: one copy per array.
    reverse = stand_in([slot[::-1] for slot in arrays])
    check(reverse.stage(0), arrays[0][::-1])
    assert copies[-1] == len(arrays[0]), copies
    staging.close()
    reverse.close()
    del staging, reverse
    gc.collect()
    print("fake driver script done")
""")


def _run_against_fake_driver(tmp_path, script=FAKE_SCRIPT, **env):
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc}) to build the stand-in CUDA driver")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so"), str(FAKE_DRIVER)], check=True)
    path = os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "LD_LIBRARY_PATH": str(tmp_path), "PYTHONPATH": path, **env})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "fake driver script done" in out.stdout
    balance = [line for line in out.stderr.splitlines() if line.startswith("fake libcuda:")]
    assert balance and all(line == RELEASED for line in balance), out.stderr


def test_native_staging_against_a_stand_in_driver(tmp_path):
    _run_against_fake_driver(tmp_path, CHECK_TORCH="1")


def test_native_staging_falls_back_to_a_pinned_mirror_when_registering_fails(tmp_path):
    _run_against_fake_driver(tmp_path, FAKE_CUDA_REGISTER_FAILS="1")


def test_gpu_staging_copies_a_whole_slot_in_one_copy_and_rows_per_array(tmp_path):
    pytest.importorskip("torch", reason="GpuStaging's batches are torch tensors")
    _run_against_fake_driver(tmp_path, GPU_STAGING_SCRIPT)


# -- on a GPU ---------------------------------------------------------------------------------------


#: The dtypes and row shapes of the arrays staged in the tests below: every NumPy dtype a
#: Gymnasium space lays out (Box of each dtype, MultiBinary int8, Discrete int64), the rewards
#: (float64 for Python envs, float32 for Rust envs) and the bool flags.
LEAVES = [(np.uint8, (3, 2)), (np.int8, ()), (np.int16, (2,)), (np.int32, ()), (np.int64, (5,)),
          (np.uint16, ()), (np.float16, (2,)), (np.float32, (4,)), (np.float64, ()), (np.float32, ()),
          (np.bool_, ()), (np.bool_, ())]


def _segment_arrays(num_envs=N, slots=2):
    """An anonymous shared mapping (as a pool's memfd is) with one array per LEAVES entry per
    slot, each 64-byte aligned."""
    sizes = [num_envs * int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize for dt, shape in LEAVES]
    total = slots * sum(-(-s // 64) * 64 for s in sizes)
    segment = mmap.mmap(-1, -(-total // 4096) * 4096)
    arrays, offset = [], 0
    for _ in range(slots):
        row = []
        for (dt, shape), size in zip(LEAVES, sizes):
            count = size // np.dtype(dt).itemsize
            row.append(np.frombuffer(segment, dt, count, offset).reshape((num_envs, *shape)))
            offset += -(-size // 64) * 64
        arrays.append(row)
    return segment, arrays


def _fill(arrays, seed):
    rng = np.random.default_rng(seed)
    for a in arrays:
        if a.dtype == np.bool_:
            a[...] = rng.random(a.shape) < 0.5
        elif a.dtype.kind == "f":
            a[...] = rng.uniform(-1000, 1000, a.shape).astype(a.dtype)
        else:
            info = np.iinfo(a.dtype)
            a[...] = rng.integers(info.min, info.max, a.shape, dtype=a.dtype, endpoint=True)


def _assert_equal(tensors, arrays, device):
    import torch

    assert len(tensors) == len(arrays)
    for k, (t, a) in enumerate(zip(tensors, arrays)):
        assert t.device == device, k
        assert t.dtype == torch.from_numpy(a).dtype, (k, t.dtype, a.dtype)
        assert tuple(t.shape) == a.shape, (k, t.shape, a.shape)
        assert np.array_equal(t.cpu().numpy(), a), f"array {k} ({a.dtype})"


def _sleep_cycles(torch, device):
    """GPU clock cycles in about half a second (or more): long enough that a copy queued behind
    `torch.cuda._sleep` of this many cycles cannot have run when the host looks right after."""
    rate_khz = getattr(torch.cuda.get_device_properties(device), "clock_rate", 0) or 2_000_000
    return int(rate_khz * 1000 * 0.5)


def test_staged_values_equal_the_host_arrays_for_every_dtype(cuda):
    import torch

    segment, arrays = _segment_arrays()
    _fill(arrays[0], 0)
    _fill(arrays[1], 1)
    staging = GpuStaging(cuda, arrays, segment)
    print("pin mode:", staging.pin_mode)
    out0 = staging.stage(0)
    out1 = staging.stage(1)
    torch.cuda.current_stream(cuda).synchronize()
    _assert_equal(out0, arrays[0], cuda)
    _assert_equal(out1, arrays[1], cuda)
    assert out0[-1].dtype == torch.bool
    # An asynchronous batch: rows 2..5 of slot 1.
    part = staging.stage(1, rows=slice(2, 5))
    torch.cuda.current_stream(cuda).synchronize()
    _assert_equal(part, [a[2:5] for a in arrays[1]], cuda)
    with pytest.raises(ValueError, match="step 1"):
        staging.stage(0, rows=slice(0, N, 2))
    with pytest.raises(ValueError, match="slot 2 out of range"):
        staging.stage(2)
    staging.close()


def test_the_copy_runs_on_the_callers_current_stream_and_stage_does_not_wait(cuda):
    import torch

    segment, arrays = _segment_arrays()
    _fill(arrays[0], 2)
    staging = GpuStaging(cuda, arrays, segment)
    side = torch.cuda.Stream(cuda)  # a non-blocking stream: the legacy default stream does not wait for it
    with torch.cuda.stream(side):
        torch.cuda._sleep(_sleep_cycles(torch, cuda))  # the side stream is busy for ~0.5 s
        out = staging.stage(0)
        after_copy = torch.cuda.Event()
        after_copy.record(side)
    # Whatever the default stream holds has run; the copy has not: it waits behind the sleep on
    # `side`, the stream that was current when stage() was called, and stage() did not wait.
    on_default = torch.cuda.Event()
    on_default.record(torch.cuda.default_stream(cuda))
    on_default.synchronize()
    assert not after_copy.query()
    assert not staging.copy_done(0)
    side.synchronize()
    assert after_copy.query()
    assert staging.copy_done(0)
    _assert_equal(out, arrays[0], cuda)
    staging.close()


def test_a_slot_may_be_rewritten_after_before_reuse(cuda):
    import torch

    segment, arrays = _segment_arrays()
    _fill(arrays[0], 3)
    expected = [a.copy() for a in arrays[0]]
    staging = GpuStaging(cuda, arrays, segment)
    side = torch.cuda.Stream(cuda)
    with torch.cuda.stream(side):
        torch.cuda._sleep(_sleep_cycles(torch, cuda))
        out = staging.stage(0)
    staging.before_reuse(0)
    if staging.pin_mode == "registered":
        # The copy reads the slot itself: before_reuse blocked until it ran, behind the sleep.
        assert staging.copy_done(0)
    # (With a pinned mirror, stage() had copied the slot already and before_reuse returns at once.)
    _fill(arrays[0], 4)  # what the workers do next
    side.synchronize()
    _assert_equal(out, expected, cuda)
    staging.close()


def test_two_output_sets_alternate(cuda):
    import torch

    segment, arrays = _segment_arrays()
    _fill(arrays[0], 5)
    _fill(arrays[1], 6)
    staging = GpuStaging(cuda, arrays, segment)
    first = staging.stage(0)
    expected_first = [a.copy() for a in arrays[0]]
    staging.before_reuse(0)
    _fill(arrays[0], 7)
    second = staging.stage(1)  # batch t + 1: batch t's tensors stay valid
    torch.cuda.current_stream(cuda).synchronize()
    _assert_equal(first, expected_first, cuda)
    _assert_equal(second, arrays[1], cuda)
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(first, second))
    third = staging.stage(0)  # batch t + 2 reuses batch t's tensors
    torch.cuda.current_stream(cuda).synchronize()
    assert [t.data_ptr() for t in third] == [t.data_ptr() for t in first]
    _assert_equal(first, arrays[0], cuda)
    staging.close()
    with pytest.raises(RuntimeError, match="closed"):
        staging.stage(0)


def test_actions_come_back_from_the_gpu(cuda):
    import torch

    segment, arrays = _segment_arrays()
    staging = GpuStaging(cuda, arrays, segment)
    dest = np.zeros(N, np.int64)
    actions = torch.arange(N, device=cuda, dtype=torch.int64) * 3 - 7
    staging.actions_to_host(actions, dest)
    assert np.array_equal(dest, actions.cpu().numpy())
    # Converted to dest's dtype, and made contiguous, on the device.
    dest32 = np.zeros((N, 2), np.float32)
    source = torch.arange(2 * N, device=cuda, dtype=torch.float64).reshape(2, N).t() / 4
    assert not source.is_contiguous()
    staging.actions_to_host(source, dest32)
    assert np.array_equal(dest32, source.cpu().numpy().astype(np.float32))
    # Into rows of the segment itself, as the pool's action array is.
    rows = arrays[0][4]  # int64 (N, 5)
    produced = torch.randint(-5, 5, (N, 5), device=cuda)
    staging.actions_to_host(produced, rows)
    assert np.array_equal(rows, produced.cpu().numpy())
    # CPU tensors: a plain copy.
    staging.actions_to_host(torch.full((N,), 9), dest)
    assert (dest == 9).all()
    with pytest.raises(ValueError, match="do not match"):
        staging.actions_to_host(actions[:-1], dest)
    with pytest.raises(TypeError, match="torch.Tensor"):
        staging.actions_to_host(np.zeros(N), dest)
    staging.close()


def test_bad_host_arrays_are_refused(cuda):
    segment, arrays = _segment_arrays()
    with pytest.raises(ValueError, match="needs a CUDA device"):
        GpuStaging("cpu", arrays, segment)
    with pytest.raises(ValueError, match="slot 1, array 0"):
        GpuStaging(cuda, [arrays[0], [arrays[1][1]] + arrays[1][1:]], segment)
    with pytest.raises(ValueError, match="does not lie inside the segment"):
        GpuStaging(cuda, [[np.zeros(N, np.float32)]], segment)
    with pytest.raises(ValueError, match="C-contiguous"):
        GpuStaging(cuda, [[arrays[0][7][:, ::2]]], segment)


def test_a_pools_memfd_segment_stages(cuda, closing):
    import torch

    envs = closing(ringenv.AsyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(N)], num_workers=2))
    obs, _ = envs.reset(seed=0)
    obs, rewards, terminations, truncations, _ = envs.step(np.ones(N, np.int64))
    pool = envs._pool
    segment = pool.segment()
    # Python envs: float32 (N, 4) observations, float64 rewards, bool flags.
    host = [[np.frombuffer(segment, np.float32, N * 4, pool.offset(s, "obs")).reshape(N, 4),
             np.frombuffer(segment, np.float64, N, pool.offset(s, "reward")),
             np.frombuffer(segment, np.bool_, N, pool.offset(s, "terminated")),
             np.frombuffer(segment, np.bool_, N, pool.offset(s, "truncated"))] for s in range(pool.depth)]
    staging = GpuStaging(cuda, host, segment)
    print("pin mode of the memfd segment:", staging.pin_mode, staging._open().fallback_reason)
    staged = [staging.stage(s) for s in range(pool.depth)]
    torch.cuda.current_stream(cuda).synchronize()
    for s in range(pool.depth):
        _assert_equal(staged[s], host[s], cuda)
    # The step's results are in one of the slots.
    assert any(np.array_equal(h[0], obs) and np.array_equal(h[1], rewards) and np.array_equal(h[2], terminations)
               and np.array_equal(h[3], truncations) for h in host)
    staging.close()
