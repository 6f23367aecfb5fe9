"""Vector envs against the main process's threads: workers live as long as the main *process*,
not the thread that started them. A pool built in a thread that then ends, and a worker restarted
(``on_worker_failure="restart"``) from another short-lived thread, keep working. (Before, the
kernel's parent-death signal, which fires when the forking *thread* exits, killed them:
``WorkerDiedError ... killed by signal 9``.)"""

from __future__ import annotations

import os
import signal
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

import ringenv
from helper_envs import FaultEnv
from vec_asserts import pid_exists


def _in_thread(fn):
    """Runs ``fn()`` in a new thread, joins it, and returns its result (or raises its error)."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # re-raised in the caller
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert not t.is_alive()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _settle():
    # Gives a parent-death signal (the bug) time to land; the assertions below do not depend on it.
    time.sleep(0.3)


def test_a_rust_env_built_in_a_thread_works_after_the_thread_ends(closing):
    envs = closing(_in_thread(lambda: ringenv.make_vec("CartPole-v1", 4, vector_kwargs={"num_workers": 2})))
    _settle()
    assert all(pid_exists(p) for p in envs._pool.worker_pids())
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (4, 4)
    for _ in range(5):
        obs, *_ = envs.step(np.ones(4, dtype=np.int64))
    assert obs.shape == (4, 4)


@pytest.mark.parametrize("num_workers", [2, 0])  # 0: the pool with no worker process
def test_a_python_env_built_in_a_thread_works_after_the_thread_ends(closing, num_workers):
    make = lambda: ringenv.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4, num_workers=num_workers)  # noqa: E731
    envs = closing(_in_thread(make))
    _settle()
    obs, _ = envs.reset(seed=0)
    for _ in range(5):
        obs, *_ = envs.step(np.ones(4, dtype=np.int64))
    assert obs.shape == (4, 4)


def test_a_worker_restarted_from_another_thread_lives_after_that_thread_ends(closing):
    envs = closing(_in_thread(
        lambda: ringenv.AsyncVectorEnv([FaultEnv] * 4, num_workers=2, on_worker_failure="restart")))
    envs.reset(seed=0)
    old = envs._pool.worker_pids()
    os.kill(old[1], signal.SIGKILL)
    ones = np.ones(4, dtype=np.int64)
    # The step that notices the death restarts worker 1: from this short-lived thread.
    infos = _in_thread(lambda: envs.step(ones)[4])
    assert infos["worker_restarted"].tolist() == [False, False, True, True]
    new = envs._pool.worker_pids()
    assert new[0] == old[0] and new[1] != old[1]
    _settle()
    assert pid_exists(new[1]), "the restarted worker died with the thread that restarted it"
    obs, rewards, *_ = envs.step(ones)
    assert obs[:, 0].tolist() == [2.0, 2.0, 1.0, 1.0] and rewards.tolist() == [1.0] * 4


_DAEMON_AT_EXIT = r"""
import sys, threading, time
import gymnasium as gym
import numpy as np
import ringenv
from ringenv import _native

if sys.argv[2] == "unguarded":  # what ringenv did before: no atexit handler
    import atexit
    atexit.unregister(_native.hold_inline_calls_at_exit)

stepping = threading.Event()

class SleepyEnv(gym.Env):
    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        marker = getattr(sys.modules["__main__"], "stepping", None)  # (None in a worker process)
        if marker is not None:
            marker.set()
        time.sleep(0.05)  # hands the GIL over inside the share's step
        return 0, 0.0, False, False, {}

    def close(self):
        marker = getattr(sys.modules["__main__"], "stepping", None)
        if marker is not None:
            marker.set()
        time.sleep(0.3)  # hands the GIL over inside the share's close; a worker's keeps close waiting

layout = {"in-process": dict(num_workers=0), "default": dict(num_workers=1, inline=True)}[sys.argv[1]]
envs = ringenv.AsyncVectorEnv([SleepyEnv] * 2, **layout)
envs.reset(seed=0)

def loop():
    if sys.argv[3] == "close":
        envs.close()
        return
    while True:
        envs.step(np.zeros(2, dtype=np.int64))

threading.Thread(target=loop, daemon=True).start()
stepping.wait(60)

class Linger:
    # collected while the interpreter finalizes (a cycle, with the collector off until then): its
    # sleep hands the GIL to the daemon thread, which then asks for it back and is ended
    def __del__(self, sleep=time.sleep):  # (the module's globals may be gone by then)
        sleep(0.5)

import gc
gc.disable()
linger = Linger()
linger.cycle = linger
del linger
print("main done", flush=True)
"""


@pytest.mark.parametrize("layout", ["in-process", "default"])
@pytest.mark.parametrize("call", ["step", "close"])
def test_a_daemon_thread_stepping_envs_in_this_process_does_not_abort_the_interpreters_exit(layout, call):
    """A daemon thread inside the share's step (or its envs' ``close``) when the interpreter
    exits: CPython ends such a thread when it asks for the GIL back, an unwind that aborted the
    process (status 134, no message) when it met ringenv's native frames; an atexit handler lets
    the call under way finish and parks the thread after it (``bindings/src/exit_guard.rs``). The
    script's last object sleeps while the interpreter finalizes, so the thread asks for the GIL
    then."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _DAEMON_AT_EXIT, layout, "guarded", call], capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "main done\n"), done.stderr


class _HeldEnv(gym.Env):
    """Steps only when the module's ``release`` event is set, after setting ``inside``."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)
    inside = threading.Event()
    release = threading.Event()

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        if os.getpid() == _HeldEnv.creator:  # (the share in this process; a worker never waits)
            _HeldEnv.inside.set()
            _HeldEnv.release.wait(60)
        return 0, 0.0, False, False, {}


def test_a_forked_child_does_not_wait_at_its_exit_for_the_parents_thread_inside_the_share(closing):
    """A child made with ``os.fork()`` while another thread of the parent is inside the share's step,
    which then exits through the interpreter, has only the forking thread: its exit must not wait for the
    parent's thread (``_native.exit_guard_after_fork``). The child asks the exit handler directly,
    without waiting: whether nothing of its own is under way."""
    from ringenv import _native

    _HeldEnv.creator = os.getpid()
    _HeldEnv.inside.clear()
    _HeldEnv.release.clear()
    envs = closing(ringenv.AsyncVectorEnv([_HeldEnv] * 2, num_workers=0))
    envs.reset(seed=0)
    stepper = threading.Thread(target=envs.step, args=(np.zeros(2, dtype=np.int64),), daemon=True)
    stepper.start()
    try:
        assert _HeldEnv.inside.wait(60)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, then leave without running the parent's test machinery
            try:
                os.write(write, b"1" if _native.hold_inline_calls_at_exit(0.0) else b"0")
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as f:
            answer = f.read()
        os.waitpid(pid, 0)
        assert answer == b"1", "the child counted the parent's thread as its own call under way"
    finally:
        _HeldEnv.release.set()
        stepper.join(60)
