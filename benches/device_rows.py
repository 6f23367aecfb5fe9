"""The rows behind docs/GPU.md's figures, for a 16-core machine with an NVIDIA GPU: each with
``device="cuda"`` and on the CPU, one row per call so that builds can alternate row by row
(``PYTHONPATH`` picks the build). Each row is one vector env measured by
``ringenv.cli._measure.measure``; prints ``ROW steps/s, main process cores, tree cores``.

Usage::

    python benches/device_rows.py py750x32_4w_cpu py750x32_4w_cuda cartpole256_4w_cuda
    python benches/device_rows.py --list
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Callable, Dict, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ringenv  # noqa: E402
from python_envs import make_env  # noqa: E402
from ringenv.cli._measure import measure  # noqa: E402


def _run(make: Callable[[], object], n: int, seconds: float, batch: Optional[int], cuda: bool) -> str:
    sync = None
    if cuda:
        import torch

        sync = torch.cuda.synchronize
    m = measure(make, num_envs=n, seconds=seconds, seed=0, batch_size=batch, warmup_s=0.3, synchronize=sync)
    return (f"{m.steps_per_s:12,.0f} steps/s  main CPU {m.main_cpu_s / m.wall_s:.2f}  "
            f"tree cores {(m.main_cpu_s + m.worker_cpu_s) / m.wall_s:.2f}")


def _python(workers: int, batch: Optional[int], device: str) -> Callable[[float], str]:
    """32 envs of a Python env of 750 µs per step (``benches/python_envs.py``)."""
    fns = [functools.partial(make_env, 750.0)] * 32
    return lambda seconds: _run(lambda: ringenv.AsyncVectorEnv(
        fns, num_workers=workers, batch_size=batch, copy=False, check_actions=False, device=device),
        32, seconds, batch, device == "cuda")


def _cartpole(workers: int, device: str) -> Callable[[float], str]:
    """256 envs of the built-in Rust CartPole-v1."""
    kwargs = {"num_workers": workers, "device": device}
    return lambda seconds: _run(lambda: ringenv.make_vec("CartPole-v1", 256, vector_kwargs=kwargs), 256, seconds,
                                None, device == "cuda")


ROWS: Dict[str, Callable[[float], str]] = {}
for _device in ("cpu", "cuda"):
    for _w in (1, 2, 4):
        ROWS[f"py750x32_{_w}w_{_device}"] = _python(_w, None, _device)
    ROWS[f"py750x32_16w_async8_{_device}"] = _python(16, 8, _device)
    for _w in (4, 16):
        ROWS[f"cartpole256_{_w}w_{_device}"] = _cartpole(_w, _device)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rows", nargs="*", help="row names (see --list)")
    parser.add_argument("--list", action="store_true", help="print the row names and exit")
    parser.add_argument("--seconds", type=float, default=1.5, help="measured seconds per row (default 1.5)")
    args = parser.parse_args()
    if args.list or not args.rows:
        print("\n".join(ROWS))
        return 0
    unknown = [r for r in args.rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; --list names them")
    for row in args.rows:
        print(f"{row:28s}", ROWS[row](args.seconds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
