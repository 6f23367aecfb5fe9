"""One measurement: build a vector env, reset it with a seed, warm up, then step it with
pre-generated random actions for a fixed time, timing every vector step (or, with async batches,
every ``recv``/``send`` cycle) and reading the CPU time of the main process and of every worker
process."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional

import numpy as np

ACTION_BATCHES = 256  # distinct pre-generated action batches, used in turn


# -- CPU time -------------------------------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid: int) -> Optional[float]:
    """user + system CPU seconds of process ``pid`` (all its threads) from ``/proc/<pid>/stat``,
    or ``None`` when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
    return (int(fields[11]) + int(fields[12])) / _TICKS  # fields 14 and 15: utime, stime


def descendants(root: int) -> List[int]:
    """Every live process below ``root`` (children, their children, ...), from ``/proc``."""
    parents: Dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        parents[int(entry)] = int(data[data.rindex(b")") + 2:].split()[1])
    found, frontier = [], {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier}
        found.extend(sorted(frontier))
    return found


def _cpu_of(pids: Iterable[int]) -> Dict[int, float]:
    out = {}
    for pid in pids:
        t = process_cpu_seconds(pid)
        if t is not None:
            out[pid] = t
    return out


# -- the measurement ------------------------------------------------------------------------------


@dataclass
class Measurement:
    """Raw figures of one run (times in seconds). A vector step is one ``step()`` of all
    ``num_envs`` envs, or with async batches one ``recv()``/``send()`` cycle of ``batch_size``."""

    num_envs: int
    vector_steps: int
    wall_s: float
    startup_s: float
    warmup_steps: int
    latencies_s: np.ndarray  # one per vector step
    main_cpu_s: float  # the main (measuring) process, all its threads
    worker_cpu_s: float  # every worker process
    worker_processes: int
    batch_size: int = 0  # envs per vector step; 0 means num_envs

    @property
    def env_steps(self) -> int:
        return self.vector_steps * (self.batch_size or self.num_envs)

    @property
    def steps_per_s(self) -> float:
        return self.env_steps / self.wall_s

    @property
    def tree_cpu_s(self) -> float:
        return self.main_cpu_s + self.worker_cpu_s

    def figures(self) -> Dict[str, Any]:
        """Every figure, for the JSON report and the tables (µs per env step, ms per vector
        step, CPU as cores busy = CPU seconds per wall second)."""
        lat_ms = self.latencies_s * 1e3
        steps = self.env_steps
        return {
            "batch_size": self.batch_size or self.num_envs,
            "async": 0 < self.batch_size < self.num_envs,
            "vector_steps": self.vector_steps,
            "env_steps": steps,
            "wall_s": self.wall_s,
            "startup_s": self.startup_s,
            "warmup_vector_steps": self.warmup_steps,
            "steps_per_s": self.steps_per_s,
            "us_per_env_step": 1e6 * self.wall_s / steps,
            "batch_latency_ms": {
                "p50": float(np.percentile(lat_ms, 50)),
                "p99": float(np.percentile(lat_ms, 99)),
                "mean": float(lat_ms.mean()),
                "max": float(lat_ms.max()),
            },
            "cpu": {
                "tree_s": self.tree_cpu_s,
                "main_s": self.main_cpu_s,
                "workers_s": self.worker_cpu_s,
                "tree_cores": self.tree_cpu_s / self.wall_s,
                "main_cores": self.main_cpu_s / self.wall_s,
                "tree_us_per_env_step": 1e6 * self.tree_cpu_s / steps,
                "main_us_per_env_step": 1e6 * self.main_cpu_s / steps,
            },
            "worker_processes": self.worker_processes,
        }


def pregenerate_actions(single_action_space, num_envs: int, seed: int, count: int = ACTION_BATCHES) -> List[np.ndarray]:
    """``count`` batches of random actions sampled from the batched action space, seeded."""
    from gymnasium.vector.utils import batch_space

    space = batch_space(single_action_space, num_envs)
    space.seed(seed)
    return [np.asarray(space.sample()) for _ in range(count)]


def default_worker_pids(envs) -> List[int]:
    """The worker processes of a vector env: ringenv's pool, Gymnasium's processes, or else every
    process below this one that the env started."""
    pool = getattr(envs, "_pool", None)
    if pool is not None and hasattr(pool, "worker_pids"):
        return list(pool.worker_pids())
    processes = getattr(envs, "processes", None)
    if processes is not None:
        return [p.pid for p in processes if p.pid is not None]
    return [pid for pid in descendants(os.getpid())]


def _stepper(envs, batch_size: int, num_envs: int) -> Callable[[np.ndarray], None]:
    """One vector step: ``envs.step(actions)``; with async batches (``batch_size < num_envs``),
    ``recv()`` the next ready batch and ``send()`` it ``actions`` (shape ``(batch_size, ...)``)
    for its ``infos["env_id"]``."""
    if batch_size >= num_envs:
        return envs.step

    def cycle(actions: np.ndarray) -> None:
        infos = envs.recv()[4]
        envs.send(actions, infos["env_id"])

    return cycle


def measure(make: Callable[[], Any], *, num_envs: int, seconds: float, seed: int,
            batch_size: Optional[int] = None,
            actions: Optional[List[np.ndarray]] = None,
            worker_pids: Callable[[Any], List[int]] = default_worker_pids,
            on_phase: Callable[[str], None] = lambda phase: None,
            on_progress: Callable[[float, int], None] = lambda elapsed, steps: None,
            progress_every_s: float = 0.1) -> Measurement:
    """Builds the vector env with ``make()``, resets it with ``seed``, warms up for a short while
    (``min(0.5, seconds / 5)`` s, at least 8 vector steps), then steps it for ``seconds`` seconds.

    With ``batch_size < num_envs`` (async batches) the env is reset with ``async_reset(seed=seed)``
    and each vector step is one ``recv()`` of ``batch_size`` envs followed by a ``send()`` of their
    actions, so a recv's envs step while the next batch is received.
    ``actions`` defaults to batches (of ``batch_size`` envs) pre-generated from the env's action
    space with ``seed``.
    ``on_phase("warmup")`` / ``on_phase("measure")`` and ``on_progress(elapsed, vector_steps)``
    (at most every ``progress_every_s``) report progress. The env is always closed; CPU times
    are read before it is.
    """
    before = set(descendants(os.getpid()))  # processes that are not this env's workers
    on_phase("start")
    t0 = time.perf_counter()
    batch = num_envs if batch_size is None else batch_size
    envs = make()
    try:
        if batch < num_envs:
            envs.async_reset(seed=seed)
        else:
            envs.reset(seed=seed)
        startup_s = time.perf_counter() - t0
        if actions is None:
            actions = pregenerate_actions(envs.single_action_space, batch, seed)
        step = _stepper(envs, batch, num_envs)
        n_actions = len(actions)
        on_phase("warmup")
        warmup_s = min(0.5, seconds / 5)
        warm, start = 0, time.perf_counter()
        while warm < 8 or time.perf_counter() - start < warmup_s:
            step(actions[warm % n_actions])
            warm += 1
        pids = [p for p in worker_pids(envs) if p not in before]
        on_phase("measure")
        latencies: List[float] = []
        record = latencies.append
        cpu0 = _cpu_of(pids)
        main0 = time.process_time()
        start = time.perf_counter()
        next_report = start + progress_every_s
        i, last = 0, start
        while True:
            step(actions[i % n_actions])
            now = time.perf_counter()
            record(now - last)
            last = now
            i += 1
            if now - start >= seconds:
                break
            if now >= next_report:
                on_progress(now - start, i)
                next_report = now + progress_every_s
        main1 = time.process_time()
        cpu1 = _cpu_of(pids)
        wall = last - start
        on_progress(wall, i)
        worker_cpu = sum(cpu1[p] - cpu0[p] for p in cpu1 if p in cpu0)
        return Measurement(num_envs=num_envs, vector_steps=i, wall_s=wall, startup_s=startup_s, warmup_steps=warm,
                           latencies_s=np.asarray(latencies), main_cpu_s=main1 - main0, worker_cpu_s=worker_cpu,
                           worker_processes=len(pids), batch_size=batch)
    finally:
        on_phase("close")
        envs.close()
