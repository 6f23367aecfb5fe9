"""The rows measured on a 16-core GPU machine (docs/WAKEUP.md, docs/GPU.md), one per call, so
builds can alternate row by row (``PYTHONPATH`` picks the build). Each row is one vector env
measured by ``ringenv.cli._measure.measure``; prints ``ROW steps/s, main process cores, tree cores``.

Usage::

    python benches/device_rows.py py750x32_16w py750x32_16w_spin2000 cartpole256_4w_cuda
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


def _run(make: Callable[[], object], n: int, seconds: float, batch: Optional[int] = None,
         cuda: bool = False) -> str:
    sync = None
    if cuda:
        import torch

        sync = torch.cuda.synchronize
    m = measure(make, num_envs=n, seconds=seconds, seed=0, batch_size=batch, warmup_s=0.3, synchronize=sync)
    return (f"{m.steps_per_s:12,.0f} steps/s  main CPU {m.main_cpu_s / m.wall_s:.2f}  "
            f"tree cores {(m.main_cpu_s + m.worker_cpu_s) / m.wall_s:.2f}")


def _python(cost_us: float, n: int, workers: int, batch: Optional[int] = None, spin_us: Optional[float] = None,
            device: Optional[str] = None) -> Callable[[float], str]:
    fns = [functools.partial(make_env, cost_us)] * n
    return lambda seconds: _run(lambda: ringenv.AsyncVectorEnv(
        fns, num_workers=workers, batch_size=batch, copy=False, check_actions=False, spin_us=spin_us, device=device),
        n, seconds, batch, device is not None)


def _default(cost_us: float, n: int, spin_us: Optional[float] = None) -> Callable[[float], str]:
    """A Python row with every setting at its default (the worker layout included) but ``spin_us``."""
    fns = [functools.partial(make_env, cost_us)] * n
    return lambda seconds: _run(lambda: ringenv.AsyncVectorEnv(fns, spin_us=spin_us), n, seconds)


def _cartpole(n: int, workers: Optional[int], device: Optional[str] = None) -> Callable[[float], str]:
    kwargs = {**({"num_workers": workers} if workers is not None else {}), **({"device": device} if device else {})}
    return lambda seconds: _run(lambda: ringenv.make_vec("CartPole-v1", n, vector_kwargs=kwargs), n, seconds,
                                cuda=device is not None)


def _grid(cost_us: float, obs: str, infos: str, n: int, batch: Optional[int] = None,
          device: Optional[str] = None) -> Callable[[float], str]:
    """A row of ``benches/grid.py``'s env (``obs``: "16 floats" or "Dict 148 KiB"; ``infos``:
    "none" or "3 scalars") with every setting at its default but ``batch_size`` and ``device``."""
    from grid import GridEnv

    fns = [functools.partial(GridEnv, cost_us, obs, infos)] * n
    return lambda seconds: _run(lambda: ringenv.AsyncVectorEnv(fns, batch_size=batch, device=device), n, seconds,
                                batch, device is not None)


ROWS: Dict[str, Callable[[float], str]] = {
    "py750x32_16w": _python(750.0, 32, 16),
    "py750x32_16w_spin2000": _python(750.0, 32, 16, spin_us=2000),
    "py200x32_16w": _python(200.0, 32, 16),
    "py200x32_16w_spin400": _python(200.0, 32, 16, spin_us=400),
    "py750x64_16w": _python(750.0, 64, 16),
    "py750x64_16w_spin2000": _python(750.0, 64, 16, spin_us=2000),
    "py750x32_8w": _python(750.0, 32, 8),
    "py40x32_16w": _python(40.0, 32, 16),
    "py750x32_16w_async8": _python(750.0, 32, 16, batch=8),
    "py750x32_16w_async8_cuda": _python(750.0, 32, 16, batch=8, device="cuda"),
    "py750x32_def": _default(750.0, 32),
    "py750x32_def_spin2000": _default(750.0, 32, spin_us=2000),
    "py200x32_def": _default(200.0, 32),
    "py200x32_def_spin400": _default(200.0, 32, spin_us=400),
    "py40x32_def": _default(40.0, 32),
    "cartpole64_def": _cartpole(64, None),
    "cartpole256_4w_cpu": _cartpole(256, 4),
    "cartpole256_4w_cuda": _cartpole(256, 4, "cuda"),
    "cartpole256_16w_cpu": _cartpole(256, 16),
    "dict200x32_def": _grid(200.0, "Dict 148 KiB", "3 scalars", 32),
    "dict200x32_def_cuda": _grid(200.0, "Dict 148 KiB", "3 scalars", 32, device="cuda"),
    "floats40x8": _grid(40.0, "16 floats", "none", 8),
    "floats40x8_infos": _grid(40.0, "16 floats", "3 scalars", 8),
    "floats40x32_async16": _grid(40.0, "16 floats", "none", 32, batch=16),
    "floats40x32_infos_async16": _grid(40.0, "16 floats", "3 scalars", 32, batch=16),
    "floats200x32_async16": _grid(200.0, "16 floats", "none", 32, batch=16),
}


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
