#!/usr/bin/env python3
"""Soak test: run ringenv for many env steps and check that nothing leaks or goes astray.

For each variant (the built-in Rust ``CartPole-v1`` through ``ringenv.make_vec``, and a Python
counter env through ``ringenv.AsyncVectorEnv``) it steps ``--steps`` env steps and checks, for the
main process and every worker, that resident memory (within max(8 MiB, 5%)) and open file
descriptors stay flat from after a warm-up to the end; that no step is lost or duplicated (the
counter env's observation is checked against a model of Gymnasium's next-step autoreset); and that
closing gives back every file descriptor. Exits 1 when any check fails.

Usage::

    .venv/bin/python scripts/soak.py                      # 200,000 steps per variant (CI)
    .venv/bin/python scripts/soak.py --steps 10000000     # the full soak
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import sys
from typing import Callable, List, Optional, Tuple

import gymnasium as gym
import numpy as np

import ringenv

MIB = 1 << 20
RSS_TOLERANCE = 8 * MIB


def usage(pid: int) -> Tuple[int, int]:
    """Resident set size in bytes (``VmRSS``) and open file descriptors of ``pid``."""
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


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
    did not advance (lost), advanced more than once (duplicated) or are wrong in another way
    (index, reward, flags), then resynchronises."""

    def __init__(self, episode_lens: np.ndarray, first_obs: np.ndarray):
        n = len(episode_lens)
        self.index, self.lens = np.arange(n), episode_lens
        self.t = np.zeros(n, dtype=np.int64)
        self.episode = np.zeros(n, dtype=np.int64)
        self.done = np.zeros(n, dtype=bool)
        self.lost = self.duplicated = 0
        self.other = int(np.count_nonzero(first_obs[:, 1] != 0) + np.count_nonzero(first_obs[:, 0] != self.index))

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
    rows = lambda t, ep: np.array([[0, t[0], ep[0]], [1, t[1], ep[1]]], dtype=np.int64)
    model = CounterModel(np.array([3, 3]), rows([0, 0], [0, 0]))
    ones, no = np.ones(2), np.zeros(2, dtype=bool)
    model.step(rows([1, 1], [0, 0]), ones, no, no)
    model.step(rows([1, 3], [0, 0]), ones, np.array([False, True]), no)  # env 0 stalls, env 1 skips one
    assert (model.lost, model.duplicated) == (1, 1), (model.lost, model.duplicated)
    model.step(rows([2, 0], [0, 1]), np.array([1.0, 0.0]), no, no)  # env 1 autoresets: fine
    assert (model.lost, model.duplicated, model.other) == (1, 1, 0), (model.lost, model.duplicated, model.other)


def soak(name: str, make: Callable[[], ringenv.AsyncVectorEnv], steps: int, num_envs: int,
         episode_lens: Optional[np.ndarray]) -> List[str]:
    """Steps ``make()``'s env ``steps`` env steps with random actions; prints what it measured and
    returns the failures (none: an empty list)."""
    gc.collect()
    main = os.getpid()
    fds_before = usage(main)[1]
    env = make()
    pids = [main, *env._pool.worker_pids()]  # the pool's worker processes (private, this package's own)
    vector_steps = max(2, steps // num_envs)
    warmup = max(1, vector_steps // 20)
    actions = np.random.default_rng(0).integers(0, 2, size=(1024, num_envs), dtype=np.int64)
    obs, _ = env.reset(seed=0)
    model = CounterModel(episode_lens, obs) if episode_lens is not None else None
    for k in range(vector_steps):
        if k == warmup:
            gc.collect()
            first = [usage(p) for p in pids]
        obs, rewards, terminated, truncated, _ = env.step(actions[k % 1024])
        if model is not None:
            model.step(obs, rewards, terminated, truncated)
    gc.collect()
    last = [usage(p) for p in pids]
    env.close()
    del env
    gc.collect()
    fds_after = usage(main)[1]
    failures = []
    print(f"{name}: {vector_steps * num_envs:,} env steps")
    for i, ((rss0, fd0), (rss1, fd1)) in enumerate(zip(first, last)):
        who = "main" if i == 0 else f"worker {i - 1}"
        print(f"  {who:9s} RSS {rss0 / MIB:7.1f} -> {rss1 / MIB:7.1f} MiB  fds {fd0} -> {fd1}")
        allowed = max(RSS_TOLERANCE, rss0 // 20)
        if rss1 - rss0 > allowed:
            failures.append(f"{who}: RSS grew {(rss1 - rss0) / MIB:.1f} MiB (allowed {allowed / MIB:.1f})")
        if fd1 != fd0:
            failures.append(f"{who}: {fd0} open descriptors after warm-up, {fd1} at the end")
    if fds_after != fds_before:
        failures.append(f"main: {fds_before} descriptors before the env, {fds_after} after close")
    if model is not None:
        print(f"  lost {model.lost}, duplicated {model.duplicated}, wrong rows {model.other}")
        failures += [f"{n} {what} step rows" for what, n in
                     (("lost", model.lost), ("duplicated", model.duplicated), ("wrong", model.other)) if n]
    print("  " + ("FAILED: " + "; ".join(failures) if failures else "ok"))
    return failures


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200_000, help="env steps per variant (default 200,000)")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--num-workers", type=int, default=2)
    args = parser.parse_args(argv)
    n, w = args.num_envs, args.num_workers
    check_the_checker()
    lens = np.array([50 + 7 * i for i in range(n)])
    failures = soak("CartPole-v1 (Rust, make_vec)",
                    lambda: ringenv.make_vec("CartPole-v1", num_envs=n, vector_kwargs={"num_workers": w}),
                    args.steps, n, None)
    failures += soak("counter env (Python, AsyncVectorEnv)",
                     lambda: ringenv.AsyncVectorEnv([functools.partial(CounterEnv, i, int(lens[i])) for i in range(n)],
                                                    num_workers=w),
                     args.steps, n, lens)
    print("soak " + ("FAILED" if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
