"""Closing a vector env, calling it, or pressing Ctrl-C, while a call is inside its pool: a
``step`` or ``recv`` waiting in another thread, a signal handler that closes the env in the middle
of the call it interrupted, and a Ctrl-C that lands in the envs the main process steps itself (the
inline share). The env never hangs, never leaves a worker behind, and every call gets a clear
error (docs/RELIABILITY.md, "Closing while a call waits").

No assertion depends on timing: each test waits for a marker file the worker writes once it is
inside its (blocking) ``step``; bounds on waits are hang guards only."""

from __future__ import annotations

import functools
import os
import signal
import threading
import time

import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError
from helper_envs import BlockingEnv
from vec_asserts import wait_pids_gone

import ringenv
from ringenv.errors import RemoteEnvError

#: Hang guard on waits for a marker, a thread or processes (never a timing assertion).
GUARD_S = 60.0


def _envs(folder, mode="block", num_envs=4, **kwargs):
    fns = [functools.partial(BlockingEnv, os.getpid(), str(folder), mode)] * num_envs
    return ringenv.AsyncVectorEnv(fns, **kwargs)


def _wait_for(folder, prefix: str) -> None:
    deadline = time.monotonic() + GUARD_S
    while not any(name.startswith(prefix) for name in os.listdir(folder)):
        assert time.monotonic() < deadline, f"no {prefix}* file in {folder} after {GUARD_S} s"
        time.sleep(0.01)


def _waiting_in_a_thread(envs, folder, call):
    """Starts ``call()`` in thread A and returns ``(thread, outcome)`` once A is inside the pool's
    wait (a worker wrote its ``started-`` marker and ``PoolCloser.waiting`` is true: A is not
    between two calls); ``outcome`` gets ``"value"`` or ``"error"`` when the call ends."""
    outcome = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as e:
            outcome["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    _wait_for(folder, "started-")
    deadline = time.monotonic() + GUARD_S
    while not envs._closer.waiting:
        assert time.monotonic() < deadline and thread.is_alive(), f"thread A never waited: {outcome}"
        time.sleep(0.01)
    return thread, outcome


@pytest.mark.parametrize("layout", [
    {"num_workers": 2, "inline": False},
    {"num_workers": 1, "inline": True},
    {"num_workers": 2, "inline": False, "batch_size": 2, "deterministic": True},
], ids=["workers", "inline-share", "recv"])
def test_close_from_another_thread_ends_the_call_waiting_there(tmp_path, layout):
    """Thread A waits in ``step`` (or ``recv``) on workers blocked in their envs; the main thread
    closes the env. A's call raises ``ClosedEnvironmentError`` saying so, ``close()`` returns
    (it used to fail with PyO3's "Already borrowed" and leave the workers running), the workers
    are gone, and every later call raises ``ClosedEnvironmentError``."""
    envs = _envs(tmp_path, **layout)
    pids = envs._pool.worker_pids()
    batched = "batch_size" in layout
    if batched:
        envs.async_reset(seed=0)
        envs.recv()
        envs.send(np.zeros(2, np.int64), np.array([0, 1]))  # worker 0 blocks in its step
        envs.recv()  # worker 1's reset (deterministic: in send order); the next recv waits for worker 0
    else:
        envs.reset(seed=0)
    thread, outcome = _waiting_in_a_thread(envs, tmp_path, envs.recv if batched else
                                           lambda: envs.step(np.zeros(4, np.int64)))
    try:
        envs.close(timeout=0.5)
    finally:
        open(tmp_path / "release", "w").close()  # lets blocked envs go if the close failed
        thread.join(GUARD_S)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), ClosedEnvironmentError), outcome
    assert "closed" in str(outcome["error"]) and "while" in str(outcome["error"])
    assert envs.closed and envs._pool.closed
    assert wait_pids_gone(pids, GUARD_S) == []
    with pytest.raises(ClosedEnvironmentError):
        envs.reset(seed=0)
    envs.close()  # idempotent


def test_a_call_from_a_second_thread_during_a_call_is_refused_by_name(tmp_path):
    """While thread A waits in ``step``, the main thread's ``step_wait`` raises Gymnasium's
    ``AlreadyPendingCallError`` saying that another thread is inside a call (not PyO3's bare
    "Already mutably borrowed"), and ``step_async`` the same error for the pending step; A's step
    then completes with its results."""
    envs = _envs(tmp_path, num_workers=2, inline=False)
    envs.reset(seed=0)
    thread, outcome = _waiting_in_a_thread(envs, tmp_path, lambda: envs.step(np.zeros(4, np.int64)))
    try:
        with pytest.raises(AlreadyPendingCallError, match="another thread is inside a call to this vector env"):
            envs.step_wait()
        with pytest.raises(AlreadyPendingCallError):  # the state says a step is pending
            envs.step_async(np.zeros(4, np.int64))
    finally:
        open(tmp_path / "release", "w").close()
        thread.join(GUARD_S)
    assert not thread.is_alive()
    assert "error" not in outcome, outcome
    np.testing.assert_array_equal(outcome["value"][0], np.ones((4, 1), np.float32))
    envs.close()


def test_a_signal_handler_that_closes_the_env_ends_the_step_it_interrupted(tmp_path):
    """A handler (SIGUSR1 here; a SIGTERM shutdown handler in practice) runs inside the call
    (raised by an env the main process steps, so it runs there and then, while the worker
    process's env blocks) and closes the env: the interrupted ``step`` raises
    ``ClosedEnvironmentError`` once the handler returns, and the workers are gone."""
    envs = _envs(tmp_path, mode="signal", num_workers=1, inline=True)
    pids = envs._pool.worker_pids()
    envs.reset(seed=0)
    seen = []

    def handler(signum, frame):
        seen.append(signum)
        envs.close(timeout=0.5)

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        with pytest.raises(ClosedEnvironmentError, match="signal handler"):
            envs.step(np.zeros(4, np.int64))
    finally:
        signal.signal(signal.SIGUSR1, previous)
        open(tmp_path / "release", "w").close()
    assert seen and envs.closed and envs._pool.closed
    assert wait_pids_gone(pids, GUARD_S) == []


def test_ctrl_c_in_the_main_process_share_is_raised_before_the_workers_finish(tmp_path, closing):
    """A ``KeyboardInterrupt`` in an env the main process steps (what Ctrl-C raises there) is
    raised by ``step`` at once, not after the worker processes finish (it used to wait for them,
    for ever with a hung one, and to come back as an env error). The step stays pending: once
    the workers finish, ``step_wait()`` raises an ordinary error naming the interrupted env, and
    ``close()`` raises nothing."""
    envs = closing(_envs(tmp_path, mode="interrupt", num_workers=1, inline=True))
    envs.reset(seed=0)
    try:
        with pytest.raises(KeyboardInterrupt):
            envs.step(np.zeros(4, np.int64))
        _wait_for(tmp_path, "started-")
        assert not [n for n in os.listdir(tmp_path) if n.startswith("done-")], "the worker's step ended first"
    finally:
        open(tmp_path / "release", "w").close()
    interrupted = r"KeyboardInterrupt in env 2 \(of envs 2..4 in one process\): the envs after it were not stepped"
    with pytest.raises(RemoteEnvError, match=interrupted) as info:
        envs.step_wait(timeout=GUARD_S)
    assert info.value.env_id == 2  # the share's first env (envs 2..4)
    envs.close()


def test_a_close_between_the_wait_and_the_read_of_the_results_is_closed_environment_error(tmp_path, monkeypatch):
    """The race a waiting call cannot see: another thread closes the env after the call's wait
    returned and before it read the results (the slots' views are dropped then). Made
    deterministic by closing right after the real wait: ``step_wait`` raises
    ``ClosedEnvironmentError``, not the failure of reading dropped views."""
    envs = _envs(tmp_path, num_workers=2, inline=False)
    envs.reset(seed=0)
    open(tmp_path / "release", "w").close()
    wait = envs._wait

    def wait_then_close(*args):
        out = wait(*args)
        envs.close()
        return out

    monkeypatch.setattr(envs, "_wait", wait_then_close)
    with pytest.raises(ClosedEnvironmentError, match="closed .* while `step_wait` ran; its results are lost") as info:
        envs.step(np.zeros(4, np.int64))
    assert info.value.__cause__ is not None
