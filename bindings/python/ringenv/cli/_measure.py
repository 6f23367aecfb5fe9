"""ringenv's one measurement loop: ``ringenv tune``, ``scripts/demo.sh`` and ``benches/`` all
measure with :func:`measure`, so a figure means the same thing wherever it is printed. It times
every vector step and reads the CPU time of the main process and every worker over exactly the
timed window.

Example (a null env in this process, so no worker CPU)::

    >>> import gymnasium as gym
    >>> m = measure(lambda: gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2),
    ...             num_envs=2, seconds=0.05, seed=0)
    >>> m.env_steps == 2 * m.vector_steps and m.steps_per_s > 0
    True
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional

import numpy as np
import psutil

from ringenv._allocator import settle_allocator

ACTION_BATCHES = 256  # distinct pre-generated action batches, used in turn

#: The warm-up when none is given: ``min(WARMUP_MAX_S, seconds * WARMUP_FRACTION)``, and at least
#: ``WARMUP_MIN_STEPS`` vector steps.
WARMUP_MAX_S = 0.5
WARMUP_FRACTION = 0.2
WARMUP_MIN_STEPS = 8
WARMUP_TEXT = (f"min({WARMUP_MAX_S:g} s, {WARMUP_FRACTION:g} x seconds), at least {WARMUP_MIN_STEPS} vector steps")


def processes(pids: Iterable[int]) -> List[psutil.Process]:
    """A :class:`psutil.Process` for each pid still alive (it remembers its start time: a reused
    pid is not mistaken for it)."""
    out = []
    for pid in pids:
        try:
            out.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    return out


def cpu_seconds(procs: Iterable[psutil.Process]) -> Dict[int, float]:
    """user + system CPU seconds (all threads) of each process still alive, by pid."""
    out = {}
    for p in procs:
        try:
            t = p.cpu_times()
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
        out[p.pid] = t.user + t.system
    return out


def descendants(root: Optional[int] = None) -> List[int]:
    """The pids of every live process below ``root`` (default: this process), children first."""
    try:
        return [p.pid for p in psutil.Process(root).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []



@dataclass
class Measurement:
    """Raw figures of one run (times in seconds). A vector step is one ``step()`` of all
    ``num_envs`` envs, or with async batches one ``recv()``/``send()`` cycle of ``batch_size``."""

    num_envs: int
    vector_steps: int
    wall_s: float
    startup_s: float
    warmup_steps: int
    latencies_s: np.ndarray  # one per vector step, float64, shape (vector_steps,)
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
        """Every figure, for the JSON reports and the tables (cores = CPU seconds per wall second)."""
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
    """``count`` seeded batches of random actions of ``num_envs`` rows each."""
    from gymnasium.vector.utils import batch_space

    space = batch_space(single_action_space, num_envs)
    space.seed(seed)
    return [np.asarray(space.sample()) for _ in range(count)]


def default_worker_pids(envs) -> List[int]:
    """The worker processes of a vector env: ringenv's pool, Gymnasium's ``processes``, or every
    process below this one."""
    pool = getattr(envs, "_pool", None)
    if pool is not None and hasattr(pool, "worker_pids"):
        return list(pool.worker_pids())
    procs = getattr(envs, "processes", None)
    if procs is not None:
        return [p.pid for p in procs if p.pid is not None]
    return descendants()


def busy_wait(seconds: float) -> None:
    """Keeps this thread's core busy for ``seconds`` of wall time."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _stepper(envs, batch_size: int, num_envs: int, policy_s: float = 0.0) -> Callable[[np.ndarray], None]:
    """One vector step: ``envs.step(actions)``, or with async batches ``recv()`` then ``send()``,
    after ``policy_s`` of :func:`busy_wait`. The last results are held until the next step
    returns, as a policy loop holds the observations it acts on."""
    held: List[Any] = [None]
    if batch_size >= num_envs:
        def step(actions: np.ndarray) -> None:
            if policy_s:
                busy_wait(policy_s)
            held[0] = envs.step(actions)

        return step

    def cycle(actions: np.ndarray) -> None:
        held[0] = results = envs.recv()
        if policy_s:
            busy_wait(policy_s)
        envs.send(actions, results[4]["env_id"])

    return cycle


def measure(make: Callable[[], Any], *, num_envs: int, seconds: float, seed: int,
            batch_size: Optional[int] = None,
            actions: Optional[List[np.ndarray]] = None,
            warmup_s: Optional[float] = None,
            worker_pids: Callable[[Any], List[int]] = default_worker_pids,
            synchronize: Optional[Callable[[], None]] = None,
            on_phase: Callable[[str], None] = lambda phase: None,
            on_progress: Callable[[float, int], None] = lambda elapsed, steps: None,
            progress_every_s: float = 0.1,
            policy_s: float = 0.0) -> Measurement:
    """Builds the vector env with ``make()``, resets it with ``seed``, warms up, then steps it for
    ``seconds`` seconds of wall time.

    Args:
        make: builds the vector env (``reset``/``step``/``close``, and ``async_reset``/``recv``/
            ``send`` for async batches).
        batch_size: envs per vector step (default ``num_envs``); below it each vector step is one
            ``recv()`` and a ``send()`` of that batch's actions.
        actions: the action batches to step with in turn; default :data:`ACTION_BATCHES` batches
            sampled with ``seed``.
        warmup_s: seconds of warm-up (default :data:`WARMUP_TEXT`).
        worker_pids: the env's worker processes; processes that existed before ``make()`` never count.
        synchronize: called after the last timed step, inside the timed window (e.g.
            ``torch.cuda.synchronize``).
        on_phase: called with ``"start"``, ``"warmup"``, ``"measure"`` and ``"close"``.
        on_progress: called with ``(elapsed seconds, vector steps)`` every ``progress_every_s``.
        policy_s: seconds of busy-waited work per vector step standing for a policy's forward pass.

    Returns:
        A :class:`Measurement`, its CPU times read before the env is closed. The env is always
        closed, at once (:func:`close_now`) when a step raises or a Ctrl-C interrupts it.
    """
    before = set(descendants())  # processes that are not this env's workers
    settle_allocator()
    on_phase("start")
    t0 = time.perf_counter()
    batch = num_envs if batch_size is None else batch_size
    envs = make()
    failed = False
    try:
        if batch < num_envs:
            envs.async_reset(seed=seed)
        else:
            envs.reset(seed=seed)
        startup_s = time.perf_counter() - t0
        if actions is None:
            actions = pregenerate_actions(envs.single_action_space, batch, seed)
        step = _stepper(envs, batch, num_envs, policy_s)
        n_actions = len(actions)
        on_phase("warmup")
        if warmup_s is None:
            warmup_s = min(WARMUP_MAX_S, seconds * WARMUP_FRACTION)
        warm, start = 0, time.perf_counter()
        while warm < WARMUP_MIN_STEPS or time.perf_counter() - start < warmup_s:
            step(actions[warm % n_actions])
            warm += 1
        main = psutil.Process()
        workers = processes(p for p in worker_pids(envs) if p not in before and p != main.pid)
        on_phase("measure")
        latencies: List[float] = []
        record = latencies.append
        cpu0 = cpu_seconds(workers)
        main0 = cpu_seconds([main])[main.pid]
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
        if synchronize is not None:
            synchronize()
            last = time.perf_counter()
        main1 = cpu_seconds([main])[main.pid]
        cpu1 = cpu_seconds(workers)
        wall = last - start
        on_progress(wall, i)
        worker_cpu = sum(cpu1[p] - cpu0[p] for p in cpu1 if p in cpu0)
        return Measurement(num_envs=num_envs, vector_steps=i, wall_s=wall, startup_s=startup_s, warmup_steps=warm,
                           latencies_s=np.asarray(latencies), main_cpu_s=main1 - main0, worker_cpu_s=worker_cpu,
                           worker_processes=len(workers), batch_size=batch)
    except BaseException:
        failed = True
        raise
    finally:
        on_phase("close")
        if failed:
            close_now(envs)
        else:
            envs.close()


def close_now(envs: Any) -> None:
    """Closes ``envs`` without waiting for a pending call (a plain close would wait for a step that
    may never return): ``close(terminate=True)``, or ``close()`` where it takes no ``terminate``.
    Errors and warnings are swallowed: the caller is raising its own."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            try:
                envs.close(terminate=True)
            except TypeError:  # a close() without terminate
                envs.close()
        except Exception:
            pass


def single_loop_steps_per_s(make_env: Callable[[], Any], seconds: float, action: Any = 0, seed: int = 0) -> float:
    """Steps/s of one env stepped by a plain ``env.step(action)`` loop in this process (a
    machine's ceiling is cores x this)."""
    env = make_env()
    try:
        env.reset(seed=seed)
        steps, t0 = 0, time.perf_counter()
        while True:
            for _ in range(16):
                _, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    env.reset()
            steps += 16
            wall = time.perf_counter() - t0
            if wall >= seconds:
                return steps / wall
    finally:
        env.close()
