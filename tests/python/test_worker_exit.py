"""What a Python worker process's exit keeps. ``close()`` waits for the workers to exit, and
the exit is quick because ``ringenv._worker.main`` freezes the objects its imports made
(``gc.freeze``: out of the exit's garbage collections); it is otherwise Python's own. Each test
has an env leave work to that exit (``__del__`` of an env in a reference cycle, a buffered file
never closed, an ``atexit`` handler, a non-daemon thread) and checks, after ``close()`` returned,
that the work was done.

Every env here runs in a worker process (``inline=False``) and does its part only there (the
vector env's probe of the spaces, made in the main process, does nothing). ``close(timeout=60)``
gives the workers all the time they need to exit, so no test depends on how fast the machine is.
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path

import gymnasium as gym
import numpy as np

import ringenv

#: Steps each test takes (and lines each env writes): few enough to stay in a file's buffer.
STEPS = 5

#: Files opened by :class:`GlobalFileEnv` in this module's global, as an env's module might keep
#: a log: in a worker, nothing but the interpreter's exit closes them.
_OPEN_FILES: dict = {}


class _WorkerEnv(gym.Env):
    """An env that does nothing; ``in_worker`` says whether it runs outside process ``main_pid``."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, path: str, main_pid: int):
        self.in_worker = os.getpid() != main_pid

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return 0, 0.0, False, False, {}


class _LineEnv(_WorkerEnv):
    """Writes ``"step\\n"`` to ``self.out`` at each step; its ``close`` leaves ``out`` open."""

    def step(self, action):
        self.out.write("step\n")
        return super().step(action)

    def close(self):
        if not self.in_worker:  # the probe's os.devnull
            self.out.close()


class CycleEnv(_WorkerEnv):
    """Keeps itself alive through a reference cycle, and its ``__del__`` writes ``"del\\n"`` to
    ``path``: only a garbage collection frees it once the worker dropped it. (Not a buffered file
    in the cycle: Python's collector may close a cycle's raw file before its buffer is flushed.)"""

    def __init__(self, path: str, main_pid: int):
        super().__init__(path, main_pid)
        self.me = self
        self.write = Path(path).write_text if self.in_worker else None

    def __del__(self):
        if self.write is not None:
            self.write("del\n")


class GlobalFileEnv(_LineEnv):
    """Keeps its buffered file in the module global :data:`_OPEN_FILES`: only the interpreter's
    release of module globals at exit flushes it."""

    def __init__(self, path: str, main_pid: int):
        super().__init__(path, main_pid)
        self.out = open(path, "w") if self.in_worker else open(os.devnull, "w")
        if self.in_worker:
            _OPEN_FILES[path] = self.out


class AtexitEnv(_WorkerEnv):
    """Registers an ``atexit`` handler writing ``"atexit\\n"`` to ``path``."""

    def __init__(self, path: str, main_pid: int):
        super().__init__(path, main_pid)
        if self.in_worker:
            atexit.register(Path(path).write_text, "atexit\n")


class ThreadEnv(_WorkerEnv):
    """Starts a non-daemon thread that, once the env's ``close`` ran and then a full second
    later, writes ``"thread\\n"`` to ``path``: an exit that did not wait for the thread would
    end the process first."""

    def __init__(self, path: str, main_pid: int):
        super().__init__(path, main_pid)
        self.closed = threading.Event()
        if not self.in_worker:
            return

        def work() -> None:
            self.closed.wait()
            threading.Event().wait(1.0)
            Path(path).write_text("thread\n")

        threading.Thread(target=work, daemon=False).start()

    def close(self):
        self.closed.set()


def _run(env_class, tmp_path: Path, num_envs: int = 4) -> list:
    paths = [str(tmp_path / f"env{i}.txt") for i in range(num_envs)]
    main = os.getpid()
    envs = ringenv.AsyncVectorEnv([lambda p=p: env_class(p, main) for p in paths], num_workers=2, inline=False)
    try:
        envs.reset(seed=0)
        for _ in range(STEPS):
            envs.step(np.zeros(num_envs, dtype=np.int64))
    finally:
        envs.close(timeout=60)
    return [Path(p).read_text() if Path(p).exists() else None for p in paths]


def test_an_env_kept_alive_by_a_reference_cycle_is_finalized_before_its_worker_exits(tmp_path):
    assert _run(CycleEnv, tmp_path) == ["del\n"] * 4


def test_a_file_left_open_in_a_module_global_is_flushed_when_its_worker_exits(tmp_path):
    assert _run(GlobalFileEnv, tmp_path) == ["step\n" * STEPS] * 4


def test_atexit_handlers_registered_in_a_worker_run_when_it_exits(tmp_path):
    assert _run(AtexitEnv, tmp_path) == ["atexit\n"] * 4


def test_a_worker_exits_only_after_the_non_daemon_threads_an_env_started(tmp_path):
    assert _run(ThreadEnv, tmp_path) == ["thread\n"] * 4
