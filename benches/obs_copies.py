"""How fast big structured observations move: a Dict of ~150 KB in 14 leaves (uint8, int16,
int64), as issue 12 item 3 describes it.

Measures, in bytes of observation per second:
- the worker's write path (one env's observation into its row of the segment): Gymnasium's
  ``write_to_shared_memory`` (two copies per leaf: ``flatten``, then ``copyto``) against
  ``ringenv._obs_writer`` (one ``copyto`` per leaf), in one process over a segment-like buffer;
- the main process's read path of a live ``ringenv.AsyncVectorEnv`` (``_slots.observations``, what
  ``step`` returns) with ``copy=True`` (one copy per leaf per batch) and ``copy=False`` (views);
- end to end, steps/s of the env (with infos on every step and ~160 us of work) in
  ``ringenv.AsyncVectorEnv`` with default settings and in Gymnasium's ``SyncVectorEnv``, and the
  env's own ``step`` time in each (the env times itself), for the investigation of why it ran
  slower inside a worker.

Usage: ``python benches/obs_copies.py [--seconds 2] [--envs 8] [--workers 2]``. Figures from a
shared machine are noisy; rerun on a quiet one before quoting them.
"""

from __future__ import annotations

import argparse
import os
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import create_shared_memory, write_to_shared_memory

LEAVES = (
    [(f"rgb{i}", (80, 80, 3), np.uint8) for i in range(5)]
    + [(f"map{i}", (48, 48), np.int16) for i in range(5)]
    + [(f"ids{i}", (1000,), np.int64) for i in range(4)]
)
SPACE = spaces.Dict({k: spaces.Box(0, 100, shape, dtype) for k, shape, dtype in LEAVES})
OBS_BYTES = sum(int(np.prod(s)) * np.dtype(d).itemsize for _, s, d in LEAVES)


class BigDictEnv(gym.Env):
    """Fresh arrays every step (as real envs return), infos every step, ~``work_us`` of Python
    work per step; ``step_seconds`` accumulates the wall time spent inside ``step`` and
    ``step_cpu_seconds`` the thread's CPU time there (wall well above CPU: the step was descheduled,
    for example by a spinning neighbour on a shared core; CPU time up too: cache or frequency)."""

    metadata = {"render_modes": []}

    def __init__(self, work_us: float = 120.0):
        self.observation_space = SPACE
        self.action_space = spaces.Discrete(4)
        self.work = max(1, int(work_us * 25))  # ~25 loop iterations per microsecond, roughly
        self.t = 0
        self.step_seconds = 0.0
        self.step_cpu_seconds = 0.0
        self.steps = 0
        self.base = {k: np.zeros(shape, dtype) for k, shape, dtype in LEAVES}

    def _obs(self):
        return {k: v + (self.t % 7) for k, v in self.base.items()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {"t": 0}

    def step(self, action):
        start, cpu = time.perf_counter(), time.thread_time()
        self.t += 1
        acc = 0
        for i in range(self.work):
            acc += i
        obs = self._obs()
        out = obs, 1.0, False, self.t % 200 == 0, {"t": self.t, "score": acc % 97, "ok": True}
        self.step_seconds += time.perf_counter() - start
        self.step_cpu_seconds += time.thread_time() - cpu
        self.steps += 1
        return out


def _rate(fn, seconds: float) -> float:
    """Calls per second of ``fn`` over about ``seconds``."""
    fn()
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(10):
            fn()
        n += 10
    return n / elapsed


def worker_write_path(seconds: float) -> dict:
    from ringenv import _layout, _obs_writer

    n = 8
    leaves = _layout.plan(SPACE, n)
    bufs = [np.zeros(_layout.leaf_bytes(leaf) * n, np.uint8) for leaf in leaves]
    mem = create_shared_memory(SPACE, n=n, ctx=_layout._BindContext(bufs))
    value = BigDictEnv()._obs()
    write = _obs_writer.writer(SPACE, 3, mem)
    return {
        "gymnasium write_to_shared_memory": _rate(lambda: write_to_shared_memory(SPACE, 3, value, mem), seconds),
        "ringenv _obs_writer": _rate(lambda: write(value), seconds),
    }


def main_read_path(seconds: float, envs: int, workers: int) -> dict:
    import ringenv

    out = {}
    for copy in (True, False):
        vec = ringenv.AsyncVectorEnv([BigDictEnv for _ in range(envs)], num_workers=workers, copy=copy)
        try:
            vec.reset(seed=0)
            out[f"copy={copy}"] = _rate(lambda: vec._slots.observations(0, vec.copy), seconds)
        finally:
            vec.close()
    return out


def end_to_end(seconds: float, envs: int, workers: int) -> dict:
    import ringenv

    out = {}
    makers = {"SyncVectorEnv": lambda: gym.vector.SyncVectorEnv([BigDictEnv for _ in range(envs)])}
    for w in sorted({1, workers}):
        for spin in (None, 0.0):
            makers[f"ringenv {w} workers spin_us={spin}"] = (
                lambda w=w, spin=spin: ringenv.AsyncVectorEnv([BigDictEnv for _ in range(envs)], num_workers=w,
                                                              spin_us=spin))
    for name, make in makers.items():
        vec = make()
        try:
            vec.reset(seed=0)
            actions = np.zeros(envs, np.int64)
            for _ in range(20):
                vec.step(actions)
            def totals():
                return [sum(vec.get_attr(a)) for a in ("step_seconds", "step_cpu_seconds", "steps")]

            s0, c0, n0 = totals()
            rate = _rate(lambda: vec.step(actions), seconds)
            s1, c1, n1 = totals()
            steps = max(1, n1 - n0)
            out[name] = (rate * envs, 1e6 * (s1 - s0) / steps, 1e6 * (c1 - c0) / steps)
        finally:
            vec.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    print(f"observation: Dict of {len(LEAVES)} leaves, {OBS_BYTES} bytes per env; {os.cpu_count()} cores")
    print("worker write path, one env's observation:")
    for name, rate in worker_write_path(args.seconds).items():
        print(f"  {name:36s} {rate:9.0f} obs/s  {rate * OBS_BYTES / 1e9:6.2f} GB/s")
    print(f"main process read path, a batch of {args.envs}:")
    for name, rate in main_read_path(args.seconds, args.envs, args.workers).items():
        print(f"  {name:36s} {rate:9.0f} batches/s  {rate * OBS_BYTES * args.envs / 1e9:6.2f} GB/s")
    print(f"end to end, {args.envs} envs, infos every step (env step time measured inside the env):")
    for name, (sps, step_us, cpu_us) in end_to_end(args.seconds, args.envs, args.workers).items():
        print(f"  {name:36s} {sps:9.0f} steps/s  env.step {step_us:6.1f} us wall, {cpu_us:6.1f} us CPU")


if __name__ == "__main__":
    main()
