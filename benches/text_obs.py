"""Text observations: one ``Text(max_length=1024)`` row written and a batch read back, Gymnasium's
shared-memory helpers against ``ringenv._text`` and ``ringenv._layout.reader``; then steps/s of a
text env in Gymnasium's vector envs and ``ringenv.AsyncVectorEnv`` (default, ``num_workers=0``).
Writes its section of ``benches/RESULTS.md``.

Usage: ``python benches/text_obs.py [--chars 800] [--envs 8] [--cost-us 40] [--seconds 1] [--rounds 2] [--output RESULTS.md|-]``.
"""

from __future__ import annotations

import argparse
import functools
import string
import sys
import time
import timeit
from typing import Any, Dict, List, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

import results_sections

MAX_LENGTH = 1024
CHARSET = string.ascii_letters + string.digits + " .,"


def text(chars: int, t: int) -> str:
    """A room description of ``chars`` characters whose last four are the step."""
    return ("You are in a dark room. There is a door to the north. " * (chars // 50 + 1))[: chars - 4] + f"{t % 10000:04d}"


class TextWorldEnv(gym.Env):
    """Busy-waits ``cost_us`` µs per step and returns a ``chars``-character text; truncated every
    500 steps."""

    action_space = spaces.Discrete(4)
    observation_space = spaces.Text(MAX_LENGTH, charset=CHARSET)

    def __init__(self, chars: int, cost_us: float):
        self.chars, self.cost_s, self.t = chars, cost_us * 1e-6, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return text(self.chars, 0), {}

    def step(self, action):
        from ringenv.cli._measure import busy_wait

        self.t += 1
        if self.cost_s:
            busy_wait(self.cost_s)
        return text(self.chars, self.t), 0.0, False, self.t % 500 == 0, {}


def _best_s(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number


def codec_timings(chars: int, envs: int) -> Dict[str, float]:
    """Seconds per call: one value written, a batch of ``envs`` rows read; Gymnasium's and ringenv's."""
    from ringenv import _layout, _text

    space = TextWorldEnv.observation_space
    mem = create_shared_memory(space, n=envs)
    value = text(chars, 1)
    for i in range(envs):
        write_to_shared_memory(space, i, value, mem)
    write, read = _text.writer(space, 1, mem), _layout.reader(space, mem, envs)
    assert read() == read_from_shared_memory(space, mem, n=envs)
    return {
        "write gymnasium": _best_s(lambda: write_to_shared_memory(space, 1, value, mem), 200),
        "write ringenv": _best_s(lambda: write(value), 2000),
        "read gymnasium": _best_s(lambda: read_from_shared_memory(space, mem, n=envs), 20),
        "read ringenv": _best_s(read, 1000),
    }


RUNTIMES = ("gymnasium SyncVectorEnv", "gymnasium AsyncVectorEnv", "ringenv default", "ringenv num_workers=0")


def end_to_end(chars: int, envs: int, cost_us: float, seconds: float, rounds: int) -> Dict[str, List[float]]:
    import ringenv
    from ringenv.cli._measure import measure

    fns = [functools.partial(TextWorldEnv, chars, cost_us)] * envs
    makers = {
        "gymnasium SyncVectorEnv": lambda: gym.vector.SyncVectorEnv(fns),
        "gymnasium AsyncVectorEnv": lambda: gym.vector.AsyncVectorEnv(fns),
        "ringenv default": lambda: ringenv.AsyncVectorEnv(fns),
        "ringenv num_workers=0": lambda: ringenv.AsyncVectorEnv(fns, num_workers=0),
    }
    out: Dict[str, List[float]] = {name: [] for name in RUNTIMES}
    for _ in range(rounds):
        for name in RUNTIMES:
            m = measure(makers[name], num_envs=envs, seconds=seconds, seed=0)
            out[name].append(m.steps_per_s)
            print(f"  {name}: {m.steps_per_s:,.0f} steps/s", file=sys.stderr, flush=True)
    return out


def section(report: Dict[str, Any]) -> List[str]:
    a, t = report["args"], report["codec"]
    end = results_sections.markers("text_obs")[1]
    lines = results_sections.section_head("text_obs", "Text observations", report) + [
        f"A `Text(max_length={MAX_LENGTH})` value of {a.chars} characters; function timings are the best of 5 "
        "`timeit` runs.",
        "",
        "| path | Gymnasium µs | ringenv µs | Gymnasium / ringenv |",
        "|---|---:|---:|---:|",
        f"| one env's value written into its row | {t['write gymnasium'] * 1e6:,.1f} | {t['write ringenv'] * 1e6:,.1f} | "
        f"{t['write gymnasium'] / t['write ringenv']:.0f}x |",
        f"| a batch of {a.envs} rows read | {t['read gymnasium'] * 1e6:,.1f} | {t['read ringenv'] * 1e6:,.1f} | "
        f"{t['read gymnasium'] / t['read ringenv']:.0f}x |",
        "",
        f"End to end: {a.envs} envs busy-waiting {a.cost_us:g} µs per step and returning the text, "
        f"{a.seconds:g} s per row through the one measurement loop, {a.rounds} rounds in turn (each runtime's "
        "default settings; the figure is the median, the spread in brackets):",
        "",
        "| runtime | steps/s | x SyncVectorEnv |",
        "|---|---:|---:|",
    ]
    e2e = report["end_to_end"]
    sync = float(np.median(e2e["gymnasium SyncVectorEnv"]))
    for name in RUNTIMES:
        v = e2e[name]
        lines.append(f"| {name} | {results_sections.median_spread(v)} | {np.median(v) / sync:.2f}x |")
    return lines + [end]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--chars", type=int, default=800, help="characters per observation (at most 1024)")
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--cost-us", type=float, default=40.0, help="µs of busy work per env step")
    p.add_argument("--seconds", type=float, default=1.0, help="seconds per end-to-end row")
    p.add_argument("--rounds", type=int, default=2)
    results_sections.add_output_argument(p)
    a = p.parse_args(argv)
    if not 4 <= a.chars <= MAX_LENGTH:
        p.error(f"--chars must be between 4 and {MAX_LENGTH}, got {a.chars}")
    t0 = time.perf_counter()
    report: Dict[str, Any] = {
        **results_sections.report_head(a),
        "codec": codec_timings(a.chars, a.envs),
        "end_to_end": end_to_end(a.chars, a.envs, a.cost_us, a.seconds, a.rounds),
    }
    results_sections.publish("text_obs", section(report), a.output)
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
