"""The main process's CPU per batch on the ``device="cuda"`` path, measured on any machine: a
pool's results staged through :class:`ringenv._staging.GpuStaging` against the stand-in driver
of ``tests/rust/support/fake_libcuda.c`` (built with ``cc``), which checks every driver call and
skips the copies (``FAKE_CUDA_SKIP_COPIES``: the copy engine idle), host tensors standing in for
the device's. Beside each row, the same batch on the CPU path (``device="cpu"``).

What this leaves out is the real driver's and PyTorch's own CPU per call (``cuMemcpyHtoDAsync``,
the CUDA caching allocator): those need a GPU, ``benches/device_rows.py``. Per row: µs per batch
of ``results`` (the median of ``--repeats`` timings of ``--batches`` calls), with ``copy=True``
(new tensors each batch, ``stage_new``) and ``copy=False`` (two sets of tensors reused,
``stage``), and the host-to-device copies each batch makes. Writes the ``staging_cost`` section
of ``benches/RESULTS.md``.

Usage::

    python benches/staging_cost.py              # ~20 s
    python benches/staging_cost.py --output -   # print only
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results_sections  # noqa: E402
import ringenv  # noqa: E402
from grid import GridEnv  # noqa: E402

FAKE_DRIVER = Path(__file__).resolve().parents[1] / "tests" / "rust" / "support" / "fake_libcuda.c"


def _grid(kind: str, n: int) -> Any:
    return ringenv.AsyncVectorEnv([functools.partial(GridEnv, 0.0, kind, "none")] * n, num_workers=1)


#: (env, num_envs, maker) of each row.
ROWS: List[tuple] = [
    ("Rust CartPole", 256, lambda: ringenv.make_vec("CartPole-v1", 256, vector_kwargs={"num_workers": 1})),
    ("16 floats", 16, lambda: _grid("16 floats", 16)),
    ("16 floats", 256, lambda: _grid("16 floats", 256)),
    ("Dict 148 KiB", 16, lambda: _grid("Dict 148 KiB", 16)),
]


def _timed(call: Callable[[], Any], batches: int, repeats: int) -> float:
    """The median over ``repeats`` of µs per call of ``batches`` calls of ``call``."""
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(batches):
            call()
        runs.append((time.perf_counter() - start) / batches * 1e6)
    return float(np.median(runs))


def measure(make: Callable[[], Any], batches: int, repeats: int) -> Dict[str, Any]:
    """One row: µs per batch of the CPU path and of the stand-in staging, for both ``copy``."""
    import torch

    from ringenv import _staging

    envs = make()
    try:
        envs.reset(seed=0)
        envs.step(envs.action_space.sample())
        slots = envs._slots
        out: Dict[str, Any] = {f"cpu_{copy}": _timed(lambda: slots.results(0, copy), batches, repeats)
                               for copy in (True, False)}
        _staging.parse_device = lambda device: torch.device("cpu", 0)  # host tensors for the device's
        slots.to_device(torch.device("cpu", 0), envs._pool.segment())
        staging = slots.device.staging
        staging._raw_stream = lambda index: 0  # the null stream; host tensors record no stream
        staging._streams.add(0)
        native, copies = staging._native, []

        class Counting:  # the copies of one batch, counted
            def __getattr__(self, name: str) -> Any:
                return getattr(native, name)

            def copy_to_device(self, slot: int, planned: list, stream: int) -> None:
                copies.append(len(planned))
                native.copy_to_device(slot, planned, stream)

        for copy in (True, False):
            staging._native = Counting()
            copies.clear()
            slots.results(0, copy)
            out[f"copies_{copy}"] = sum(copies)
            staging._native = native
            out[f"device_{copy}"] = _timed(lambda: slots.results(0, copy), batches, repeats)
        slots.device.close()
        slots.device = None
        return out
    finally:
        envs.close()


def section(report: Dict[str, Any]) -> List[str]:
    a = report["args"]
    lines = results_sections.section_head("staging_cost", "The CPU side of the GPU path", report) + [
        "",
        "µs of the main process per batch to hand out a pool's results (`results` of one slot), median "
        f"of {a.repeats} timings of {a.batches} batches: on the CPU path, and through `GpuStaging` against "
        "the stand-in driver (`tests/rust/support/fake_libcuda.c`, copies skipped: the copy engine idle; "
        "host tensors for the device's, so PyTorch's CUDA allocator and the real driver's CPU per call "
        "are not in these figures). `copy=True`: new tensors each batch (`stage_new`); `copy=False`: two "
        "sets reused (`stage`). Copies: host-to-device copies per batch.",
        "",
        "| env | envs | copy | CPU path µs | staging µs | copies |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in report["rows"]:
        for copy in (True, False):
            lines.append(f"| {r['env']} | {r['num_envs']} | {copy} | {r[f'cpu_{copy}']:.1f} | "
                         f"{r[f'device_{copy}']:.1f} | {r[f'copies_{copy}']} |")
    return lines + [results_sections.markers("staging_cost")[1]]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=2000, help="calls per timing (default 2000)")
    p.add_argument("--repeats", type=int, default=7, help="timings per figure; the median is kept (default 7)")
    results_sections.add_output_argument(p)
    a = p.parse_args(argv)
    if "FAKE_CUDA_SKIP_COPIES" not in os.environ:  # build the stand-in driver, then run against it
        cc = os.environ.get("CC", "cc")
        if shutil.which(cc) is None:
            p.error(f"no C compiler ({cc}) to build the stand-in driver {FAKE_DRIVER}")
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([cc, "-shared", "-fPIC", "-o", f"{tmp}/libcuda.so", str(FAKE_DRIVER)], check=True)
            env = {**os.environ, "LD_LIBRARY_PATH": tmp, "FAKE_CUDA_SKIP_COPIES": "1"}
            return subprocess.run([sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])],
                                  env=env).returncode
    report: Dict[str, Any] = {**results_sections.report_head(a), "rows": []}
    for env, n, make in ROWS:
        report["rows"].append({"env": env, "num_envs": n, **measure(make, a.batches, a.repeats)})
        print(f"  {env} x{n}: {report['rows'][-1]}", file=sys.stderr, flush=True)
    results_sections.publish("staging_cost", section(report), a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
