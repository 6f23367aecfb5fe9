"""GPU staging for ``device="cuda"``: a pool's finished batches copied to a CUDA device as torch
tensors, asynchronously, on the caller's current stream (see docs/GPU.md).

:class:`GpuStaging` page-locks the segment once (``cuMemHostRegister``; a pinned mirror where the
driver refuses) and enqueues copies without waiting for the GPU; :class:`DeviceBatches` is the
vector env's side. PyTorch is imported only when a CUDA device is asked for.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterable, List, Optional, Sequence, Set, Tuple

import numpy as np

from ringenv import _native
from ringenv.errors import CudaUnavailableError

if TYPE_CHECKING:
    import torch

__all__ = ["DeviceBatches", "GpuStaging", "host_actions", "parse_device"]

_DEVICE = re.compile(r"cuda(?::(\d+))?")


def _unavailable(device: Any, why: str, reason: str, **fields: Any) -> CudaUnavailableError:
    return CudaUnavailableError(f"device={device!r}: {why}", reason=reason, **fields)


def parse_device(device: Any) -> Optional["torch.device"]:
    """Checks a ``device`` argument and says where batches go.

    Args:
        device: ``None`` or ``"cpu"`` (NumPy arrays on the host), ``"cuda"`` (the current CUDA
            device), ``"cuda:N"``, or a ``torch.device`` of type ``cpu`` or ``cuda``.

    Returns:
        ``None`` for the host, else a ``torch.device("cuda", N)`` with its index resolved.

    Raises:
        TypeError: ``device`` is neither a string, ``None`` nor a ``torch.device``.
        ValueError: a string other than ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (``"cuda:x"``,
            ``"tpu"``).
        CudaUnavailableError: a CUDA device was asked for and cannot be used; ``reason`` says
            why: ``"no_driver"`` (``libcuda.so.1`` not found), ``"no_torch"`` (PyTorch not
            installed), ``"torch_without_cuda"`` (a CPU-only PyTorch build, or PyTorch cannot use
            the driver), ``"no_device"`` (no device N; ``count`` says how many there are).
    """
    if device is None:
        return None
    torch_module = sys.modules.get("torch")
    if isinstance(device, str):
        text = device
    elif torch_module is not None and isinstance(device, torch_module.device):
        text = device.type if device.index is None else f"{device.type}:{device.index}"
    else:
        raise TypeError(f"device must be 'cpu', 'cuda', 'cuda:N' or a torch.device, got {type(device).__name__} "
                        f"{device!r}")
    if text in ("cpu", "cpu:0"):
        return None
    match = _DEVICE.fullmatch(text)
    if match is None:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N' (N a device index), got {device!r}")
    index = int(match.group(1)) if match.group(1) is not None else None
    # The driver first: it is what is missing on a machine without a GPU, torch or not.
    try:
        count = _native.cuda_device_count()
    except CudaUnavailableError as e:
        raise _unavailable(device, str(e), e.reason or "no_driver") from e
    if count == 0:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise _unavailable(device, f"the NVIDIA driver sees no CUDA device (CUDA_VISIBLE_DEVICES={visible!r}); "
                           "use device='cpu'", "no_device", ordinal=index or 0, count=0)
    try:
        import torch
    except ImportError as e:
        raise _unavailable(device, "GPU batches are torch tensors and PyTorch is not installed: install a CUDA "
                           "build of torch, or use device='cpu'", "no_torch") from e
    if torch.version.cuda is None:
        raise _unavailable(device, f"PyTorch {torch.__version__} is a CPU-only build: install a CUDA build of "
                           "torch, or use device='cpu'", "torch_without_cuda")
    if not torch.cuda.is_available():
        raise _unavailable(device, f"PyTorch {torch.__version__} (CUDA {torch.version.cuda}) cannot use the GPU: "
                           "torch.cuda.is_available() is False (is the driver older than that CUDA?)",
                           "torch_without_cuda")
    if index is None:
        index = torch.cuda.current_device()
    count = min(count, torch.cuda.device_count())
    if index >= count:
        raise _unavailable(device, f"no CUDA device {index}: {count} visible, numbered 0 to {count - 1}",
                           "no_device", ordinal=index, count=count)
    return torch.device("cuda", index)


#: The alignment of each array in a packed buffer, in bytes: a pool slot's (``runtime/src/layout.rs``).
ALIGN = 64


def _packed(row_bytes: Sequence[int], rows: int) -> Tuple[List[int], int]:
    """The byte offsets of arrays of ``rows`` rows of ``row_bytes`` bytes each, one after the
    other, each at a multiple of :data:`ALIGN`, and the bytes they take in all: how a pool lays
    out a slot's results, and how the device buffers hold them."""
    offsets, at = [], 0
    for size in row_bytes:
        offsets.append(at)
        at += -(-rows * size // ALIGN) * ALIGN
    return offsets, at


@functools.lru_cache(maxsize=None)
def _torch_dtype(dtype: np.dtype) -> "torch.dtype":
    import torch
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


@functools.lru_cache(maxsize=None)
def _numpy_dtype(dtype: "torch.dtype") -> np.dtype:
    import torch
    return torch.empty(0, dtype=dtype).numpy().dtype


class GpuStaging:
    """Copies a pool's batches from its shared segment to a CUDA device.

    Args:
        device: a CUDA device, as :func:`parse_device` accepts it (``"cuda"``, ``"cuda:N"``, a
            ``torch.device``).
        host_arrays_per_slot: for each slot of the pool (``depth`` of them, 2), the NumPy views
            of that slot to stage, in the order :meth:`stage` returns them: the observation
            leaves ``(num_envs, ...)``, then reward, terminated and truncated ``(num_envs,)``
            (float64, bool, bool). Every array must be C-contiguous,
            lie inside ``segment`` and have ``num_envs`` rows; slot ``s`` must match slot 0 in
            shapes and dtypes.
        segment: the pool's ``Segment`` (``pool.segment()``); kept alive, and page-locked, as
            long as this staging lives.

    Raises:
        ValueError, TypeError: bad arrays (naming the slot and array index) or device.
        CudaUnavailableError: as :func:`parse_device`; also when the driver has no such device.
        CudaError: a CUDA driver call failed (names the call and the error code).

    Not thread-safe: one thread stages at a time.
    """

    def __init__(self, device: Any, host_arrays_per_slot: Sequence[Sequence[np.ndarray]], segment: Any):
        torch_device = parse_device(device)
        if torch_device is None:
            raise ValueError(f"GpuStaging needs a CUDA device, got device={device!r}")
        import torch

        slots = [list(arrays) for arrays in host_arrays_per_slot]
        if not slots or not slots[0]:
            raise ValueError("host_arrays_per_slot must hold at least one slot with at least one array")
        for s, arrays in enumerate(slots):
            for k, a in enumerate(arrays):
                if not isinstance(a, np.ndarray):
                    raise TypeError(f"slot {s}, array {k}: expected a NumPy array, got {type(a).__name__}")
        first = slots[0]
        num_envs = first[0].shape[0] if first[0].ndim else -1
        for s, arrays in enumerate(slots):
            if len(arrays) != len(first):
                raise ValueError(f"slot {s} has {len(arrays)} arrays, slot 0 has {len(first)}")
            for k, a in enumerate(arrays):
                if a.ndim == 0 or a.shape[0] != num_envs or not a.flags.c_contiguous:
                    raise ValueError(f"slot {s}, array {k}: expected a C-contiguous array of {num_envs} rows, "
                                     f"got shape {a.shape} (C-contiguous: {a.flags.c_contiguous})")
                if a.shape != first[k].shape or a.dtype != first[k].dtype:
                    raise ValueError(f"slot {s}, array {k}: {a.dtype}{list(a.shape)} differs from slot 0's "
                                     f"{first[k].dtype}{list(first[k].shape)}")
        dtypes = []
        for k, a in enumerate(first):
            try:
                dtypes.append(_torch_dtype(a.dtype))
            except (TypeError, ValueError) as e:  # no torch dtype, or non-native byte order
                raise TypeError(f"array {k}: dtype {a.dtype} has no torch equivalent") from e

        whole = np.frombuffer(segment, np.uint8)
        base, length = whole.__array_interface__["data"][0], whole.nbytes
        for s, arrays in enumerate(slots):
            for k, a in enumerate(arrays):
                address = a.__array_interface__["data"][0]
                if not (base <= address and address + a.nbytes <= base + length):
                    raise ValueError(f"slot {s}, array {k} does not lie inside the segment")
        self.device: "torch.device" = torch_device
        self.num_envs: int = num_envs
        self._native: Optional[_native.CudaStaging] = _native.CudaStaging(torch_device.index, segment,
                                                                         slots=len(slots))
        self._host: List[List[Tuple[int, int]]] = [
            [(a.__array_interface__["data"][0], a.nbytes // num_envs) for a in arrays] for arrays in slots]
        self._row_bytes = [row_bytes for _, row_bytes in self._host[0]]
        # Per array: its dtype, bytes per element, the shape of one row and the strides below it,
        # to view it in a buffer (:meth:`_carve`).
        self._leaves = [(d, a.itemsize, tuple(a.shape[1:]), tuple(s // a.itemsize for s in a.strides))
                        for a, d in zip(first, dtypes)]
        self._plans: dict = {}  # rows -> how :meth:`_carve` lays out that many rows
        # Where a slot's arrays lie as the reused device buffers pack them (a pool's layout), a
        # whole batch is one copy of one region.
        packed = _packed(self._row_bytes, num_envs)[0]
        self._one_region = all(
            [address - arrays[0][0] for address, _ in arrays] == packed for arrays in self._host)
        self._region_bytes = packed[-1] + num_envs * self._row_bytes[-1]
        # Two sets of output tensors, used in turn, each in one buffer.
        self._out: List[List["torch.Tensor"]] = [self._carve(num_envs) for _ in range(2)]
        self._out_ptrs = [[t.data_ptr() for t in out] for out in self._out]
        self._raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self._turn = 0
        # Streams the output tensors were recorded on (Tensor.record_stream).
        self._streams: Set[int] = set()

    def _open(self) -> _native.CudaStaging:
        if self._native is None:
            raise RuntimeError("this GpuStaging is closed")
        return self._native

    @property
    def pin_mode(self) -> str:
        """``"registered"`` (copies read the segment itself) or ``"staging_buffer"`` (through a
        pinned mirror, filled by ``memcpy`` in :meth:`stage`)."""
        return self._open().pin_mode

    def stage(self, slot: int, rows: Optional[slice] = None) -> List["torch.Tensor"]:
        """Enqueues the copy of slot ``slot`` (rows ``rows``, a ``slice`` with step 1, for an
        asynchronous batch) to the device on ``torch.cuda.current_stream(device)``, and returns
        at once, without waiting for the GPU.

        Returns:
            One tensor per host array, on the device, of the array's dtype and shape
            ``(len(rows), ...)`` (``(num_envs, ...)`` without ``rows``). The tensors of call ``t``
            are rewritten by the copy of call ``t + 2``: clone what must outlive that.

        Raises:
            ValueError: ``slot`` out of range, or ``rows`` not a slice with step 1.
            CudaError: a driver call failed.
            RuntimeError: the staging is closed.
        """
        native = self._open()
        self._check_slot(slot)
        n = self.num_envs
        if rows is None:
            start, stop = 0, n
        elif isinstance(rows, slice) and rows.step in (None, 1):
            start, stop, _ = rows.indices(n)
            stop = max(start, stop)
        else:
            raise ValueError(f"rows must be a slice with step 1, got {rows!r}")
        handle = self._stream_handle()
        if handle not in self._streams:
            import torch

            stream = torch.cuda.current_stream(self.device)
            for out in self._out:
                for t in out:
                    t.record_stream(stream)
            self._streams.add(handle)
        turn, self._turn = self._turn, self._turn ^ 1
        count = stop - start
        ptrs = self._out_ptrs[turn]
        if count == n and self._one_region:
            copies = [(self._host[slot][0][0], ptrs[0], self._region_bytes)]
        else:
            copies = [(address + start * row_bytes, ptr, count * row_bytes)
                      for (address, row_bytes), ptr in zip(self._host[slot], ptrs)]
        native.copy_to_device(slot, copies, handle)
        out = self._out[turn]
        return out if count == n else [t[:count] for t in out]

    def stage_new(self, pieces: Sequence[Tuple[int, int, int]]) -> List["torch.Tensor"]:
        """Enqueues the copy of the rows ``start:stop`` of slot ``slot`` of each ``(slot, start,
        stop)`` piece, in order, into new tensors on ``torch.cuda.current_stream(device)``, and
        returns at once.

        Returns:
            One tensor per host array, of shape ``(rows, ...)`` (``rows`` the pieces' rows in
            all) and the array's dtype; the caller's own (never rewritten by a later stage).
            They are views of one new device buffer: any one of them holds all of it.

        Raises:
            ValueError: a piece's slot out of range or rows outside ``0..num_envs``.
            CudaError: a driver call failed. RuntimeError: the staging is closed.
        """
        native = self._open()
        n = self.num_envs
        rows = 0
        for slot, start, stop in pieces:
            self._check_slot(slot)
            if not 0 <= start <= stop <= n:
                raise ValueError(f"rows {start}:{stop} are not within 0..{n}")
            rows += stop - start
        out = self._carve(rows)
        handle = self._stream_handle()
        if len(pieces) == 1 and pieces[0][1:] == (0, n) and self._one_region:
            slot = pieces[0][0]
            native.copy_to_device(slot, [(self._host[slot][0][0], out[0].data_ptr(), self._region_bytes)], handle)
            return out
        ptrs = [t.data_ptr() for t in out]
        by_slot: dict = {}
        at = 0
        for slot, start, stop in pieces:
            count = stop - start
            by_slot.setdefault(slot, []).extend(
                (address + start * row_bytes, ptr + at * row_bytes, count * row_bytes)
                for (address, row_bytes), ptr in zip(self._host[slot], ptrs))
            at += count
        for slot, copies in by_slot.items():
            native.copy_to_device(slot, copies, handle)
        return out

    def _carve(self, rows: int) -> List["torch.Tensor"]:
        """One new device buffer holding every array of ``rows`` rows, packed as :func:`_packed`
        says (a pool slot's layout, so a whole slot is one copy), and one tensor per array viewing
        its part, in order: a strided view of one view of the buffer per dtype."""
        import torch

        plan = self._plans.get(rows)
        if plan is None:
            offsets, size = _packed(self._row_bytes, rows)
            dtypes = list(dict.fromkeys(dtype for dtype, *_ in self._leaves))
            views = [(dtypes.index(dtype), (rows, *shape), strides, at // itemsize)
                     for at, (dtype, itemsize, shape, strides) in zip(offsets, self._leaves)]
            plan = self._plans[rows] = (size, dtypes, views)
        size, dtypes, views = plan
        buffer = torch.empty(size, dtype=torch.uint8, device=self.device)
        typed = [buffer.view(dtype) for dtype in dtypes]
        return [typed[k].as_strided(shape, strides, offset) for k, shape, strides, offset in views]

    def _check_slot(self, slot: int) -> None:
        """Raises ``ValueError`` naming ``slot`` unless it is one of the pool's slots."""
        if not 0 <= slot < len(self._host):
            raise ValueError(f"slot {slot} out of range: the pool has {len(self._host)} slots")

    def _stream_handle(self) -> int:
        """The ``cudaStream_t`` of ``torch.cuda.current_stream(device)``: through
        ``torch._C._cuda_getCurrentRawStream`` where it exists (~0.5 µs against ~13 µs)."""
        raw = self._raw_stream
        if raw is not None:
            return raw(self.device.index)
        import torch

        return torch.cuda.current_stream(self.device).cuda_stream

    def copy_done(self, slot: int) -> bool:
        """Whether the last copy of ``slot`` finished on the device (never blocks; True for a
        slot never staged)."""
        return self._open().is_done(slot)

    def before_reuse(self, slot: int) -> None:
        """Blocks until the last copy of ``slot`` finished, so the workers may rewrite the slot.

        Raises:
            ValueError: ``slot`` out of range. CudaError: the copy failed on the device.
        """
        self._open().wait_slot(slot)

    def actions_to_host(self, tensor: Any, dest: np.ndarray) -> None:
        """Copies actions into ``dest`` (the pool's action array, or rows of it).

        A CUDA tensor is copied device-to-host on its current stream, which alone is waited for.

        Args:
            tensor: a ``torch.Tensor`` of shape ``dest.shape``.
            dest: a writable NumPy array.

        Raises:
            TypeError: ``tensor`` is not a torch tensor, or ``dest`` not a NumPy array.
            ValueError: shapes differ, ``dest`` is read-only, or the tensor is on another device.
            CudaError: the copy failed.
        """
        import torch

        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"actions must be a torch.Tensor here, got {type(tensor).__name__}")
        if not isinstance(dest, np.ndarray):
            raise TypeError(f"dest must be a NumPy array, got {type(dest).__name__}")
        if tuple(tensor.shape) != dest.shape:
            raise ValueError(f"actions of shape {tuple(tensor.shape)} do not match the action array {dest.shape}")
        if not dest.flags.writeable:
            raise ValueError("dest is read-only")
        source = tensor.detach()
        if source.device.type == "cpu":
            np.copyto(dest, source.numpy(), casting="unsafe")
            return
        if source.device != self.device:
            raise ValueError(f"actions are on {source.device}, the staging on {self.device}")
        source = source.to(_torch_dtype(dest.dtype)).contiguous()
        if not dest.flags.c_contiguous:
            np.copyto(dest, source.cpu().numpy())
            return
        stream = self._stream_handle()
        self._open().copy_to_host(source.data_ptr(), dest, stream)

    def close(self) -> None:
        """Waits for every copy in flight, then unpins the segment. Idempotent; any other call
        afterwards raises ``RuntimeError``."""
        self._native = None


# -- the vector env's side: batches as torch tensors on the device, actions from tensors --------


class DeviceBatches:
    """The GPU side of a vector env: its slots' results staged to a CUDA device.

    Args:
        device: a ``torch.device`` of type cuda (from :func:`ringenv._staging.parse_device`).
        arrays: per slot, its observation leaves ``(num_envs, ...)``, then its ``(num_envs,)``
            reward, terminated and truncated arrays.
        tree: puts a batch's leaf tensors back in the space's dicts and tuples.
        segment: the pool's segment.

    Raises:
        CudaUnavailableError, CudaError: as :class:`ringenv._staging.GpuStaging`.
    """

    def __init__(self, device: Any, arrays: List[List[np.ndarray]], tree: Callable[[List[Any]], Any], segment: Any):
        self.device = device
        self._num_leaves = len(arrays[0]) - 3
        self._tree = tree
        self.staging = GpuStaging(device, arrays, segment)

    def _split(self, tensors: List["torch.Tensor"]) -> Tuple[Any, List["torch.Tensor"]]:
        """The observation batch (one tensor, or dicts and tuples of them) and the other tensors."""
        k = self._num_leaves
        return self._tree(tensors[:k]), tensors[k:]

    def before_reuse(self, slots: Iterable[int]) -> None:
        """Blocks until the last copies of ``slots`` finished (at once in a depth-2 pipeline)."""
        for slot in set(slots):
            self.staging.before_reuse(slot)

    def batch(self, pieces: List[Tuple[int, int, int]], copy: bool) -> Tuple[Any, Any, Any, Any]:
        """``(observations, rewards, terminations, truncations)`` as tensors on the device, for the
        rows ``start:stop`` of slot ``slot`` of each ``(slot, start, stop)`` piece, in order:
        observations of the space's dtype and shape ``(rows, ...)``, rewards ``float64``, the flags
        ``bool``. With ``copy=False`` the observations and flags are the staging's reused tensors
        and the rewards a new tensor (on the CPU path too, rewards are always new)."""
        if copy or len(pieces) > 1:
            # New tensors copied straight from the host: no clone, no torch.cat.
            obs, (reward, terminated, truncated) = self._split(self.staging.stage_new(pieces))
            return obs, reward, terminated, truncated
        slot, start, stop = pieces[0]
        obs, (reward, terminated, truncated) = self._split(self.staging.stage(slot, slice(start, stop)))
        return obs, reward.clone(), terminated, truncated

    def observations(self, slot: int, copy: bool) -> Any:
        """The observations of every env of slot ``slot`` (after a reset), as :meth:`batch`."""
        return self.batch([(slot, 0, self.staging.num_envs)], copy)[0]

    def close(self) -> None:
        """Waits for the copies in flight and unpins the segment."""
        self.staging.close()


def host_actions(actions: Any, staging: Optional[DeviceBatches]) -> Any:
    """``actions`` as a NumPy array of the same dtype when it is a torch tensor (bfloat16 and
    float8 widened to float32, complex32 to complex64); anything else as it is.

    Raises:
        ValueError: a tensor on the ``meta`` device (it holds no values).
    """
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(actions, torch.Tensor):
        return actions
    if actions.device.type == "meta":
        raise ValueError(f"actions are a tensor on the meta device, which holds no values (shape {tuple(actions.shape)})")
    if actions.is_floating_point() and actions.dtype not in (torch.float16, torch.float32, torch.float64):
        actions = actions.to(torch.float32)
    elif actions.dtype == torch.complex32:
        actions = actions.to(torch.complex64)
    if actions.device.type == "cuda" and staging is not None and actions.device == staging.device:
        host = np.empty(tuple(actions.shape), dtype=_numpy_dtype(actions.dtype))
        staging.staging.actions_to_host(actions, host)
        return host
    return actions.detach().cpu().numpy()
