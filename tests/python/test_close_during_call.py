"""Closing a vector env, calling it, or pressing Ctrl-C, while a call is inside its pool: a
``step`` or ``recv`` waiting in another thread, a signal handler that closes the env in the middle
of the call it interrupted, and a Ctrl-C that lands in the envs the main process steps itself (the
inline share). The env never hangs, never leaves a worker behind, and every call gets a clear
error (docs/RELIABILITY.md, "Nothing blocks for ever").

No assertion depends on timing: each test waits for a marker file the worker writes once it is
inside its (blocking) ``step``; bounds on waits are hang guards only."""

from __future__ import annotations

import functools
import os
import signal
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from helper_envs import BlockingEnv, CounterEnv
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


def test_send_and_recv_from_a_second_thread_while_one_waits_in_recv_are_refused_by_name(tmp_path):
    """Thread A waits in ``recv`` for worker 0's block (its env blocks); the main thread's ``send``
    to worker 1's block, its ``recv``, its ``async_reset`` and a synchronous ``step`` raise
    ``AlreadyPendingCallError`` saying another thread is inside a call (``send`` used to write its actions, then fail with
    PyO3's bare "Already mutably borrowed"), and leave nothing sent. A's ``recv`` then returns
    worker 0's step, and the main thread's ``send``/``recv`` of worker 1's block work."""
    envs = _envs(tmp_path, num_workers=2, inline=False, batch_size=2, deterministic=True)
    envs.async_reset(seed=0)
    first, second = envs.recv()[4]["env_id"], envs.recv()[4]["env_id"]
    assert first.tolist() == [0, 1] and second.tolist() == [2, 3]
    envs.send(np.zeros(2, np.int64), first)
    thread, outcome = _waiting_in_a_thread(envs, tmp_path, lambda: envs.recv())
    try:
        with pytest.raises(AlreadyPendingCallError, match="`send` was called while another thread is inside"):
            envs.send(np.ones(2, np.int64), second)
        with pytest.raises(AlreadyPendingCallError, match="`recv` was called while another thread is inside"):
            envs.recv()
        with pytest.raises(AlreadyPendingCallError, match="`async_reset` was called while another thread"):
            envs.async_reset(seed=1)
        with pytest.raises(AlreadyPendingCallError, match="another thread is sending a call .* `recv`"):
            envs.step(np.ones(4, np.int64))
        assert envs._batches._sent == ["step", None]  # the refused send sent nothing
    finally:
        open(tmp_path / "release", "w").close()
        thread.join(GUARD_S)
    assert not thread.is_alive()
    assert "error" not in outcome, outcome
    assert outcome["value"][4]["env_id"].tolist() == [0, 1]
    np.testing.assert_array_equal(outcome["value"][0], np.ones((2, 1), np.float32))
    envs.send(np.ones(2, np.int64), second)
    obs, *_, infos = envs.recv()
    assert infos["env_id"].tolist() == [2, 3]
    np.testing.assert_array_equal(obs, np.ones((2, 1), np.float32))
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
    interrupted = r"KeyboardInterrupt in env 2 \(of envs \[2, 3\] in one process\): the envs after it were not stepped"
    with pytest.raises(RemoteEnvError, match=interrupted) as info:
        envs.step_wait(timeout=GUARD_S)
    assert info.value.env_id == 2  # the share's first env (envs 2 and 3)
    envs.close()


def test_ctrl_c_in_the_main_process_share_during_a_call_is_raised_before_the_workers_finish(tmp_path, closing):
    """As for a step: a ``KeyboardInterrupt`` while the main process's share runs its part of a
    ``call`` is raised at once (it used to wait for the worker processes, for ever with a hung
    one, and then come back as the call's error with the call marked not pending, so a program
    that called again ran it twice in the workers' envs); the call stays pending, and
    ``call_wait`` then raises ``RemoteEnvError`` saying the call's results are lost."""
    envs = closing(_envs(tmp_path, mode="interrupt", num_workers=1, inline=True))
    envs.reset(seed=0)
    try:
        with pytest.raises(KeyboardInterrupt):
            envs.call("work")
        _wait_for(tmp_path, "started-")
        assert not [n for n in os.listdir(tmp_path) if n.startswith("done-")], "the worker's call ended first"
    finally:
        open(tmp_path / "release", "w").close()
    with pytest.raises(RemoteEnvError, match=r"KeyboardInterrupt while env 2 \(of envs \[2, 3\] in one process\) ran "
                                             r"the call: it may have run on the envs before it") as info:
        envs.call_wait(timeout=GUARD_S)
    assert info.value.env_id == 2  # the env the interrupt landed in, the share's first
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


class _InterruptingPool:
    """An env's pool with a ``KeyboardInterrupt`` (what Ctrl-C raises) raised once around its
    method ``method``: ``"before"`` the real call, or ``"after"`` it returned, its result dropped
    (as CPython drops a call's return value when a signal handler raises at the next bytecode,
    which is where a Ctrl-C that arrived during a wait with the GIL released is raised). Every
    other attribute is the real pool's."""

    def __init__(self, pool, method: str, when: str):
        self._real, self._method, self._when = pool, method, when

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if name != self._method or self._when is None:
            return attr

        def interrupted(*args, **kwargs):
            when, self._when = self._when, None
            if when == "after":
                attr(*args, **kwargs)
            raise KeyboardInterrupt

        return interrupted


def _counters(num_envs=4, **kwargs):
    fns = [functools.partial(CounterEnv, i) for i in range(num_envs)]
    return ringenv.AsyncVectorEnv(fns, **kwargs), gym.vector.SyncVectorEnv(fns)


def _assert_step_equal(ours, ref):
    for got, want in zip(ours[:4], ref[:4]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("layout", [{"num_workers": 2, "inline": False}, {"num_workers": 1, "inline": True}],
                         ids=["workers", "inline-share"])
@pytest.mark.parametrize("method,when", [("submit", "before"), ("submit", "after"), ("wait", "after")])
def test_ctrl_c_around_the_pools_submit_or_wait_leaves_a_consistent_env(closing, layout, method, when):
    """A Ctrl-C raised right before the pool takes a step, right after it took it, or right after
    its wait returned the results (before the vector env recorded either): the env's state is the
    pool's. Not sent: no call pending, ``step`` works. Sent or answered: the step stays pending and
    ``step_wait`` returns its results (they used to be lost, with ``step_wait`` saying no call was
    pending while every other call said one was, until ``close``)."""
    envs, ref = _counters(**layout)
    closing(envs)
    try:
        envs.reset(seed=0), ref.reset(seed=0)
        ones = np.ones(4, np.int64)
        _assert_step_equal(envs.step(ones), ref.step(ones))
        real = envs._pool
        envs._pool = _InterruptingPool(real, method, when)
        actions = np.array([0, 1, 1, 0])
        with pytest.raises(KeyboardInterrupt):
            envs.step(actions)
        envs._pool = real
        if (method, when) == ("submit", "before"):
            with pytest.raises(NoAsyncCallError):
                envs.step_wait()
            result = envs.step(actions)
        else:
            with pytest.raises(AlreadyPendingCallError, match="waiting for a pending call to `step`"):
                envs.step(actions)
            result = envs.step_wait(timeout=GUARD_S)
        _assert_step_equal(result, ref.step(actions))  # that step's results, once: t counts every step
        _assert_step_equal(envs.step(ones), ref.step(ones))
        with pytest.raises(NoAsyncCallError):  # collected: nothing is returned twice
            envs.step_wait()
    finally:
        ref.close()


def test_a_call_from_a_second_thread_while_one_is_being_sent_is_refused(closing):
    """Thread A is inside ``step`` between its checks and the pool's ``submit`` (held there);
    the main thread's ``step`` and ``reset`` raise ``AlreadyPendingCallError`` saying another
    thread is sending a call (they used to pass the same checks, then write their actions into
    the slot A was filling, or fail with PyO3's bare "Already borrowed"); A's step then returns
    the results of A's actions, and the main thread steps on."""
    envs, ref = _counters(num_workers=2, inline=False)
    closing(envs)
    envs.reset(seed=0), ref.reset(seed=0)
    real, entered, release = envs._pool, threading.Event(), threading.Event()

    class HeldPool:
        def __getattr__(self, name):
            attr = getattr(real, name)
            if name != "submit":
                return attr

            def held(*args, **kwargs):
                entered.set()
                assert release.wait(GUARD_S), "never released"
                return attr(*args, **kwargs)

            return held

    envs._pool = HeldPool()
    outcome = {}
    a_actions = np.array([1, 0, 1, 0])

    def run():
        try:
            outcome["value"] = envs.step(a_actions)
        except BaseException as e:
            outcome["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert entered.wait(GUARD_S), "thread A never reached submit"
        with pytest.raises(AlreadyPendingCallError, match="another thread is sending a call to this env"):
            envs.step(np.zeros(4, np.int64))
        with pytest.raises(AlreadyPendingCallError, match="another thread is sending a call to this env"):
            envs.reset(seed=1)
    finally:
        release.set()
        thread.join(GUARD_S)
    envs._pool = real
    assert not thread.is_alive() and "error" not in outcome, outcome
    _assert_step_equal(outcome["value"], ref.step(a_actions))
    _assert_step_equal(envs.step(np.ones(4, np.int64)), ref.step(np.ones(4, np.int64)))
    ref.close()


def test_a_fork_child_closes_its_copy_while_a_parent_thread_waits_in_a_call(tmp_path):
    """The DataLoader pattern: a thread steps while the main thread forks. The child inherits the
    pool held by that thread's call (the thread itself does not exist there); its ``close()``
    returns at once without error (it used to wait 10 s for the missing thread and raise
    ``RingenvError``), and the parent's step completes with its results."""
    envs = _envs(tmp_path, num_workers=2, inline=False)
    envs.reset(seed=0)
    thread, outcome = _waiting_in_a_thread(envs, tmp_path, lambda: envs.step(np.zeros(4, np.int64)))
    try:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                envs.close()
                report = f"closed {envs.closed}"
            except BaseException as e:  # reported, never falling through into the parent's code
                report = f"{type(e).__name__}: {e}"
            os.write(write, report.encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as child_out:
            report = child_out.read().decode()
        os.waitpid(pid, 0)
        assert report == "closed True", report
    finally:
        open(tmp_path / "release", "w").close()
        thread.join(GUARD_S)
    assert not thread.is_alive() and "error" not in outcome, outcome
    np.testing.assert_array_equal(outcome["value"][0], np.ones((4, 1), np.float32))
    envs.close()
