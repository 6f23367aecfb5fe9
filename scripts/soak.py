#!/usr/bin/env python3
"""Soak test: run ringenv for millions of env steps and check that nothing leaks or goes astray.

For each variant (the built-in Rust ``CartPole-v1`` through ``ringenv.make_vec``, and a Python
counter env through ``ringenv.AsyncVectorEnv``) it steps ``--steps`` env steps and checks, for the
main process and every worker: resident memory and open file descriptors from after a warm-up to
the end; no lost or duplicated step (the counter env's observation is checked against a model of
Gymnasium's next-step autoreset, and the workers' own counters must match what was sent); and
that closing gives back every file descriptor. Exits 1 when any check fails.

Usage (CI runs the default, 200,000 steps per variant)::

    .venv/bin/python scripts/soak.py                      # the CI default
    .venv/bin/python scripts/soak.py --steps 10000000     # the full soak
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import gymnasium as gym
import numpy as np

import ringenv
from ringenv import _native

MIB = 1 << 20


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` in bytes (``VmRSS`` of ``/proc/<pid>/status``)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def open_fds(pid: int) -> int:
    """Number of open file descriptors of ``pid``."""
    return len(os.listdir(f"/proc/{pid}/fd"))


@dataclass
class Reading:
    """RSS (bytes) and open descriptors of the main process and of each worker, at one moment."""
    step: int
    main_rss: int
    main_fds: int
    worker_rss: List[int]
    worker_fds: List[int]


def read(step: int, worker_pids: Sequence[int]) -> Reading:
    pid = os.getpid()
    return Reading(step, rss_bytes(pid), open_fds(pid), [rss_bytes(p) for p in worker_pids],
                   [open_fds(p) for p in worker_pids])


def worker_counters(env: ringenv.AsyncVectorEnv) -> Optional[List[dict]]:
    """Each worker's own counters (commands and env steps completed), or None if this build
    cannot read them (the pool is found through the advert ``ringenv top`` uses)."""
    try:
        pools = [p for p in _native.list_pools() if p.get("pid") == os.getpid()]
        snapshots = [_native.pool_snapshot(os.getpid(), p["fd"]) for p in pools]
    except Exception:  # monitoring is optional; the soak's other checks still run
        return None
    pids = set(env._pool.worker_pids())
    for snap in snapshots:
        if {w["pid"] for w in snap["workers"]} == pids:
            return snap["workers"]
    return None


class CounterEnv(gym.Env):
    """Observation ``int64[3] = [index, steps since reset, episode number]``; reward 1 per step;
    terminates after ``episode_len`` steps."""

    def __init__(self, index: int, episode_len: int):
        self.index, self.episode_len = index, episode_len
        self.observation_space = gym.spaces.Box(0, np.iinfo(np.int64).max, shape=(3,), dtype=np.int64)
        self.action_space = gym.spaces.Discrete(2)
        self.t, self.episode = 0, -1

    def _obs(self) -> np.ndarray:
        return np.array([self.index, self.t, self.episode], dtype=np.int64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.episode = 0, self.episode + 1
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, self.t >= self.episode_len, False, {}


class CounterModel:
    """What each counter env's next row must be under next-step autoreset; counts rows that
    did not advance (lost) or advanced more than once (duplicated), then resynchronises."""

    def __init__(self, episode_lens: np.ndarray):
        n = len(episode_lens)
        self.index = np.arange(n)
        self.lens = episode_lens
        self.t = np.zeros(n, dtype=np.int64)
        self.episode = np.zeros(n, dtype=np.int64)
        self.done = np.zeros(n, dtype=bool)
        self.lost = 0
        self.duplicated = 0
        self.other = 0  # rows wrong in another way (index, reward, flags)

    def reset(self, obs: np.ndarray) -> None:
        self.episode = np.zeros_like(self.episode)
        self.t[:] = 0
        self.done[:] = False
        self.other += int(np.count_nonzero(obs[:, 1] != 0) + np.count_nonzero(obs[:, 0] != self.index))

    def step(self, obs: np.ndarray, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> None:
        exp_t = np.where(self.done, 0, self.t + 1)
        exp_ep = np.where(self.done, self.episode + 1, self.episode)
        # A position in the run: steps of all earlier episodes + this one's (episodes are equal-length per env).
        want = exp_ep * (self.lens + 1) + exp_t
        got = obs[:, 2] * (self.lens + 1) + obs[:, 1]
        self.lost += int(np.sum(np.clip(want - got, 0, None)))
        self.duplicated += int(np.sum(np.clip(got - want, 0, None)))
        exp_r = np.where(self.done, 0.0, 1.0)
        exp_term = ~self.done & (exp_t >= self.lens)
        bad = (obs[:, 0] != self.index) | ((got == want) & ((rewards != exp_r) | (terminated != exp_term))) | truncated
        self.other += int(np.count_nonzero(bad))
        self.t, self.episode, self.done = obs[:, 1].copy(), obs[:, 2].copy(), terminated.copy()


def check_the_checker() -> None:
    """The row check must see a lost and a duplicated step (run before every soak: microseconds)."""
    model = CounterModel(np.array([3, 3]))
    rows = lambda t, ep: np.array([[0, t[0], ep[0]], [1, t[1], ep[1]]], dtype=np.int64)
    model.reset(rows([0, 0], [0, 0]))
    ones, no = np.ones(2), np.zeros(2, dtype=bool)
    model.step(rows([1, 1], [0, 0]), ones, no, no)
    model.step(rows([1, 3], [0, 0]), ones, np.array([False, True]), no)  # env 0 stalls, env 1 skips one
    assert (model.lost, model.duplicated) == (1, 1), (model.lost, model.duplicated)
    model.step(rows([2, 0], [0, 1]), np.array([1.0, 0.0]), no, no)  # env 1 autoresets: fine
    assert (model.lost, model.duplicated, model.other) == (1, 1, 0), (model.lost, model.duplicated, model.other)


@dataclass
class Result:
    variant: str
    env_steps: int
    seconds: float
    lost: int = 0
    duplicated: int = 0
    wrong_rows: int = 0
    rows_checked: bool = False
    worker_accounting: str = "n/a"
    readings: List[Reading] = field(default_factory=list)
    fds_before: int = 0
    fds_after_close: int = 0
    failures: List[str] = field(default_factory=list)


def run_variant(name: str, make: Callable[[], ringenv.AsyncVectorEnv], steps: int, num_envs: int,
                model: Optional[CounterModel], rss_tolerance: int, samples: int) -> Result:
    gc.collect()
    fds_before = open_fds(os.getpid())
    env = make()
    pids = list(env._pool.worker_pids())  # the pool's worker processes (private, this package's own)
    vector_steps = max(1, steps // num_envs)
    warmup = max(1, vector_steps // 20)
    sample_every = max(1, (vector_steps - warmup) // max(1, samples))
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, size=(1024, num_envs), dtype=np.int64)
    obs, _ = env.reset(seed=0)
    if model is not None:
        model.reset(obs)
    readings: List[Reading] = []
    start = time.perf_counter()
    for k in range(vector_steps):
        if k == warmup:
            gc.collect()
            readings.append(read(k * num_envs, pids))
            start = time.perf_counter()
        obs, rewards, terminated, truncated, _ = env.step(actions[k % 1024])
        if model is not None:
            model.step(obs, rewards, terminated, truncated)
        if k > warmup and (k - warmup) % sample_every == 0:
            readings.append(read(k * num_envs, pids))
    seconds = time.perf_counter() - start
    gc.collect()
    readings.append(read(vector_steps * num_envs, pids))
    result = Result(name, vector_steps * num_envs, seconds, readings=readings, fds_before=fds_before)
    counters = worker_counters(env)
    if counters is not None:
        commands = vector_steps + 1  # the steps and the one reset
        bad = [f"worker {i}: {w['commands']} commands, {w['env_steps']} env steps"
               for i, w in enumerate(counters)
               if w["commands"] != commands or w["env_steps"] != commands * len(w["env_ids"])]
        result.worker_accounting = "exact" if not bad else "; ".join(bad)
        if bad:
            result.failures.append(f"workers' counters disagree with the {commands} commands sent: {result.worker_accounting}")
    env.close()
    del env
    gc.collect()
    result.fds_after_close = open_fds(os.getpid())
    if model is not None:
        result.rows_checked = True
        result.lost, result.duplicated, result.wrong_rows = model.lost, model.duplicated, model.other
        for what, n in (("lost", model.lost), ("duplicated", model.duplicated), ("wrong", model.other)):
            if n:
                result.failures.append(f"{n} {what} step rows")
    first, last = readings[0], readings[-1]
    procs = [("main", first.main_rss, last.main_rss, first.main_fds, last.main_fds)]
    procs += [(f"worker {i}", first.worker_rss[i], last.worker_rss[i], first.worker_fds[i], last.worker_fds[i])
              for i in range(len(pids))]
    for who, rss0, rss1, fd0, fd1 in procs:
        allowed = max(rss_tolerance, rss0 // 20)
        if rss1 - rss0 > allowed:
            result.failures.append(f"{who}: RSS grew {(rss1 - rss0) / MIB:.1f} MiB (allowed {allowed / MIB:.1f})")
        if fd1 != fd0:
            result.failures.append(f"{who}: {fd0} open descriptors after warm-up, {fd1} at the end")
    if result.fds_after_close != fds_before:
        result.failures.append(f"main: {fds_before} descriptors before the env, {result.fds_after_close} after close")
    return result


def report(results: Sequence[Result], num_envs: int, num_workers: int, rss_tolerance: int) -> None:
    print(f"soak: {num_envs} envs over {num_workers} workers; RSS tolerance max({rss_tolerance / MIB:.0f} MiB, 5%)")
    for r in results:
        first, last = r.readings[0], r.readings[-1]
        rate = (last.step - first.step) / r.seconds if r.seconds > 0 else float("nan")
        print(f"\n{r.variant}: {r.env_steps:,} env steps, {rate:,.0f} steps/s after warm-up")
        rows = (f"lost {r.lost}, duplicated {r.duplicated}, wrong rows {r.wrong_rows}" if r.rows_checked
                else "rows not checkable (no counter in the observation)")
        print(f"  {rows}; workers' own counters: {r.worker_accounting}")
        growth = (last.main_rss - first.main_rss) / max(1, last.step - first.step)
        print(f"  main     RSS {first.main_rss / MIB:7.1f} -> {last.main_rss / MIB:7.1f} MiB "
              f"({growth:+.3f} B/step)  fds {first.main_fds} -> {last.main_fds} "
              f"(before env {r.fds_before}, after close {r.fds_after_close})")
        for i in range(len(first.worker_rss)):
            print(f"  worker {i} RSS {first.worker_rss[i] / MIB:7.1f} -> {last.worker_rss[i] / MIB:7.1f} MiB"
                  f"  fds {first.worker_fds[i]} -> {last.worker_fds[i]}")
        samples = " ".join(f"{x.main_rss / MIB:.1f}" for x in r.readings)
        print(f"  main RSS samples (MiB): {samples}")
        print("  " + ("FAILED: " + "; ".join(r.failures) if r.failures else "ok"))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200_000, help="env steps per variant (default 200,000)")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--variants", default="rust,python", help="comma-separated: rust, python")
    parser.add_argument("--rss-tolerance-mib", type=float, default=8.0,
                        help="RSS growth allowed per process after warm-up (or 5%% of its RSS if larger)")
    parser.add_argument("--samples", type=int, default=8, help="RSS samples between start and end")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    n, w = args.num_envs, args.num_workers
    tolerance = int(args.rss_tolerance_mib * MIB)
    variants: Dict[str, Callable[[], Result]] = {
        "rust": lambda: run_variant(
            "CartPole-v1 (Rust, make_vec)",
            lambda: ringenv.make_vec("CartPole-v1", num_envs=n, vector_kwargs={"num_workers": w}),
            args.steps, n, None, tolerance, args.samples),
        "python": lambda: run_variant(
            "counter env (Python, AsyncVectorEnv)",
            lambda: ringenv.AsyncVectorEnv(
                [functools.partial(CounterEnv, i, 50 + 7 * i) for i in range(n)], num_workers=w),
            args.steps, n, CounterModel(np.array([50 + 7 * i for i in range(n)])), tolerance, args.samples),
    }
    check_the_checker()
    chosen = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in variants]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {sorted(variants)}")
    results = [variants[v]() for v in chosen]
    report(results, n, w, tolerance)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=2)
    failed = [r for r in results if r.failures]
    print("\nsoak " + ("FAILED" if failed else "passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
