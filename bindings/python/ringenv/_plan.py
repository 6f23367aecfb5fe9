"""How a vector env's envs are spread: how many worker processes, and whether the main process
steps a share of the envs itself (the *inline* share; see ``ringenv.AsyncVectorEnv``'s
``inline``). One rule, used by the vector env and by the benchmarks that label their rows.
"""

from __future__ import annotations

from typing import Optional, Tuple

from ringenv import _native
from ringenv._batches import default_async_workers

__all__ = ["usable_cores", "default_num_workers", "plan_workers"]


def usable_cores() -> int:
    """The cores this process may use, at least 1: its CPU affinity, capped by its cgroup's CPU
    quota (a container's ``--cpus``, a Kubernetes CPU limit; rounded down), which is what a
    process gets of the machine however many cores it may be scheduled on
    (``_native.available_cores``: Rust's ``std::thread::available_parallelism``, which reads
    both)."""
    return _native.available_cores()


def default_num_workers(num_envs: int, batch_size: int, max_concurrency: Optional[int],
                        cores: Optional[int] = None) -> int:
    """The default number of blocks of envs stepping at once (worker processes, with the inline
    share counted as one): one per core (``cores``; default :func:`usable_cores`), at most
    ``num_envs`` and ``max_concurrency``, for ``batch_size == num_envs``; else
    :func:`ringenv._batches.default_async_workers`."""
    cores = usable_cores() if cores is None else cores
    if batch_size < num_envs:
        return default_async_workers(num_envs, batch_size, cores)
    cap = num_envs if max_concurrency is None else min(num_envs, max_concurrency)
    return max(1, min(cap, cores))


def plan_workers(num_envs: int, num_workers: Optional[int], inline: Optional[bool], host: Optional[str],
                 batch_size: int, max_concurrency: Optional[int], cores: Optional[int] = None) -> Tuple[int, bool]:
    """``(worker processes, whether this process steps a share inline)`` for a vector env on
    ``cores`` cores (default: :func:`usable_cores`; ``ringenv.ray`` passes an actor's CPUs).

    The envs split into contiguous blocks (``numpy.array_split``'s rule), one per worker process,
    plus with the inline share one last block this process steps itself. ``inline=None`` takes
    the share only with ``num_workers=None``, when ``host`` (``"python"``, ``"rust"``; ``None``:
    envs only a worker program can run) allows it and the blocks fill the cores: the processes
    are then one fewer than the default block count (:func:`default_async_workers` for
    ``batch_size < num_envs``, which on two or more cores takes no share: docs/INLINE.md). With
    fewer blocks than cores (fewer envs, or ``max_concurrency``) every block gets a worker process
    and this process keeps a core of its own: a share would only add this process's own work per
    batch (``benches/main_cost.py``) to its block's step. On a single usable core the default is
    the share alone. An explicit ``num_workers`` means that many processes unless
    ``inline=True``; ``num_workers=0`` means this process steps every env.

    Raises:
        ValueError: ``inline=True`` (or ``num_workers=0``) where it cannot be (no Python or
            built-in Rust envs; no env left for a worker process: ``num_workers + 1 > num_envs``),
            naming the numbers.
    """
    n = num_envs
    if num_workers == 0:  # (with inline=False refused by ringenv._checks.check_options)
        inline = True
    if inline and host is None:
        raise ValueError("inline=True needs envs this process can step (Python envs or built-in Rust envs); the "
                         "envs of a worker binary run only in its worker processes"
                         + (" (num_workers=0 asks for no worker process)" if num_workers == 0 else ""))
    if num_workers is None:
        cores = usable_cores() if cores is None else cores
        blocks = default_num_workers(n, batch_size, max_concurrency, cores)
        if blocks == 1 and inline is None and host is not None and cores == 1:
            return 0, True  # one core: a worker process would only add wake-ups; this process steps all
        if inline is None and batch_size < n and cores >= 2:
            # Asynchronous batches: the caller works (its policy) between recv and send while the
            # processes step; a share could only step inside recv, in that work's time.
            return blocks, False
        if inline and blocks < 2:
            blocks = 2  # asked for: one process beside the share (n >= 2 is checked below)
        # By default only where the blocks fill the cores: else a core is left for this process.
        use = host is not None and blocks >= 2 and blocks <= n and (inline or (inline is None and blocks >= cores))
        return (blocks - 1 if use else blocks), use
    if inline and num_workers + 1 > n:
        raise ValueError(f"inline=True steps one share of the envs in this process beside num_workers "
                         f"({num_workers}) worker processes: that needs num_envs >= {num_workers + 1}, got {n}")
    return num_workers, bool(inline)
