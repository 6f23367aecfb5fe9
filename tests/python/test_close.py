"""What ``close()`` does: with the envs' own ``close``, with the OS resources of the vector env,
with a call still inside the pool, and with the workers' exit.

- The envs' ``close``: an env whose ``close`` raises is named in a ``RuntimeWarning`` (the others
  are closed all the same), wherever it runs, except a ``KeyboardInterrupt`` in the main process
  (a Ctrl-C), which ``close()`` raises once done; the worker processes are asked to close their
  envs (or, with ``terminate=True``, killed) before the main process closes its inline share's,
  so a slow ``close`` in the share neither holds the workers up nor adds to
  ``close(timeout=...)``.
- Resources: ``close()`` releases every OS resource at once, even while the env object is still
  referenced (the segment's memfd, the control sockets, the workers' pidfds; counted from
  ``/proc/self/fd`` and ``/proc/self/maps``). The mapping stays while an array the caller holds
  (an observation returned with ``copy=False``) points into it, and goes with the last one.
- A call inside the pool (docs/RELIABILITY.md, "Closing while a call waits"): a ``step`` or
  ``recv`` waiting in another thread, a signal handler that closes the env in the middle of the
  call it interrupted, a Ctrl-C that lands in the envs the main process steps itself: the env
  never hangs, never leaves a worker behind, and every call gets a clear error.
- The workers' exit: ``close()`` waits for the Python workers to exit, and their exit keeps what
  Python's does (``__del__`` of an env in a reference cycle, a buffered file never closed, an
  ``atexit`` handler, a non-daemon thread); ``ringenv._worker.main`` freezes its imports' objects
  (``gc.freeze``) so the exit is quick.

No test depends on timing: tests wait (at most a hang guard) for an event the code makes happen at
once, or for a marker file a worker writes once it is inside its (blocking) call.
"""

from __future__ import annotations

import atexit
import functools
import gc
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import psutil
import pytest
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError

import ringenv
from ringenv.errors import RemoteEnvError

from helper_envs import BlockingEnv, CounterEnv


from vec_asserts import wait_pids_gone

# -- env close ------------------------------------------------------------------------------


#: The longest an inline env's ``close`` waits for the worker side (only a regression waits it).
BOUND_S = 20.0


class RaisingCloseEnv(gym.Env):
    """``close`` raises ``RuntimeError("boom")`` once the env was reset (not the vector env's
    probe of the spaces, whose ``close`` raising fails the construction, as in Gymnasium)."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)
    used = False

    def reset(self, *, seed=None, options=None):
        self.used = True
        return 0, {}

    def step(self, action):
        return 0, 0.0, False, False, {}

    def close(self):
        if self.used:
            raise RuntimeError("boom")


@pytest.mark.parametrize("layout", [{"num_workers": 0}, {"num_workers": 1, "inline": True}], ids=["in-process", "default"])
def test_an_inline_env_whose_close_raises_is_named_in_a_warning_and_the_others_still_close(layout):
    envs = ringenv.AsyncVectorEnv([RaisingCloseEnv] * 4, **layout)
    envs.reset(seed=0)
    share = range(4) if layout["num_workers"] == 0 else range(2, 4)  # the last block is the share's
    with pytest.warns(RuntimeWarning) as caught:
        envs.close()
    named = sorted(str(w.message) for w in caught if "close() raised" in str(w.message))
    assert named == [f"env {i}'s close() raised RuntimeError: boom" for i in share]
    assert envs.closed


_WORKER_CLOSE_RAISES = r"""
import gymnasium as gym, ringenv

class RaisingCloseEnv(gym.Env):
    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)
    def step(self, action):
        return 0, 0.0, False, False, {}
    used = False
    def reset(self, *, seed=None, options=None):
        self.used = True
        return 0, {}
    def close(self):
        if self.used:
            raise RuntimeError("boom")

envs = ringenv.AsyncVectorEnv([RaisingCloseEnv] * 3, num_workers=1, inline=False)
envs.reset(seed=0)
envs.close(timeout=60)
print("closed", flush=True)
"""


def test_a_worker_process_env_whose_close_raises_is_named_on_the_workers_stderr():
    done = subprocess.run([sys.executable, "-c", _WORKER_CLOSE_RAISES], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "closed\n"), done.stderr
    for i in range(3):
        assert f"RuntimeWarning: env {i}'s close() raised RuntimeError: boom" in done.stderr, done.stderr


class OrderEnv(gym.Env):
    """In a worker process, ``close`` touches ``<marker>.<env id>``; in the main process (the
    inline share), ``close`` records in ``OrderEnv.seen`` whether the workers had closed their
    envs (``close()``) or were gone (``terminate=True``) within :data:`BOUND_S` seconds."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)
    seen: dict = {}

    def __init__(self, env_id: int, marker: str, creator: int, worker_ids: tuple, expect: str):
        self.env_id, self.marker, self.creator, self.worker_ids, self.expect = env_id, marker, creator, worker_ids, expect
        self.worker_pids: list = []

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        return 0, 0.0, False, False, {}

    def close(self):
        if os.getpid() != self.creator:  # a worker process's env
            open(f"{self.marker}.{self.env_id}", "w").close()
            return
        if not self.worker_pids:  # the vector env's probe of the spaces, closed at construction
            return
        deadline = time.monotonic() + BOUND_S
        while time.monotonic() < deadline:
            if self.expect == "closed":
                done = all(os.path.exists(f"{self.marker}.{i}") for i in self.worker_ids)
            else:
                done = not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                               for p in self.worker_pids)
            if done:
                break
            time.sleep(0.01)
        OrderEnv.seen[self.env_id] = done


@pytest.mark.parametrize("expect", ["closed", "terminated"])
def test_the_workers_close_or_are_killed_before_the_inline_shares_envs_close(tmp_path, expect):
    """Before: the share's envs were closed first, one after another, and only then were the
    workers told to close (or killed with ``terminate=True``)."""
    import functools

    OrderEnv.seen = {}
    marker = str(tmp_path / "closed")
    fns = [functools.partial(OrderEnv, i, marker, os.getpid(), (0, 1), expect) for i in range(4)]
    envs = ringenv.AsyncVectorEnv(fns, num_workers=1, inline=True)  # worker: envs 0, 1; share: 2, 3
    envs.reset(seed=0)
    envs.set_attr("worker_pids", [envs._pool.worker_pids()] * 4)  # (only the share's envs read them)
    if expect == "terminated":
        envs.close(terminate=True)
    else:
        envs.close(timeout=60)
    assert OrderEnv.seen == {2: True, 3: True}


class InterruptedCloseEnv(RaisingCloseEnv):
    """Once reset, ``close`` records the env's id in ``InterruptedCloseEnv.closed`` (in the main
    process: the inline share's envs), then raises what ``raises`` maps its id to: a
    ``KeyboardInterrupt`` stands for a Ctrl-C that lands while that env closes."""

    closed: list = []

    def __init__(self, env_id: int, raises: dict):
        self.env_id, self.raises = env_id, raises

    def close(self):
        if not self.used:  # the vector env's probe of the spaces
            return
        InterruptedCloseEnv.closed.append(self.env_id)
        if self.env_id in self.raises:
            raise self.raises[self.env_id]("boom")


_LAYOUTS = [({"num_workers": 0}, range(4)), ({"num_workers": 1, "inline": True}, range(2, 4))]


def _another_env_steps_without_an_interrupt():
    """No interrupt is left behind for a later call of another env in this thread to raise."""
    other = ringenv.AsyncVectorEnv([functools.partial(InterruptedCloseEnv, i, {}) for i in range(2)], num_workers=0)
    try:
        other.reset(seed=0)
        other.step(np.zeros(2, np.int64))
    finally:
        other.close(terminate=True)


@pytest.mark.parametrize("layout,share", _LAYOUTS, ids=["in-process", "default"])
def test_a_ctrl_c_in_an_inline_envs_close_is_raised_once_the_close_is_complete(layout, share):
    """Before: the ``KeyboardInterrupt`` was named in a ``RuntimeWarning`` like any close error and
    lost, so the program went on after its user pressed Ctrl-C. Gymnasium's ``SyncVectorEnv``
    raises it too (at once, leaving its other envs unclosed); here the close completes first."""
    from vec_asserts import wait_pids_gone

    def descriptors_and_mappings():  # as test_close_releases.py counts them
        with open("/proc/self/maps") as f:
            return set(os.listdir("/proc/self/fd")), [line for line in f if "/memfd:" in line]

    InterruptedCloseEnv.closed = []
    raises = {share[0]: KeyboardInterrupt, 3: RuntimeError}  # the share's first env, and its last
    gc.collect()
    before = descriptors_and_mappings()
    envs = ringenv.AsyncVectorEnv([functools.partial(InterruptedCloseEnv, i, raises) for i in range(4)], **layout)
    envs.reset(seed=0)
    pids = envs._pool.worker_pids()
    assert len(pids) == layout["num_workers"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(KeyboardInterrupt):
            envs.close()
    assert InterruptedCloseEnv.closed == list(share)  # the share's other envs were closed all the same
    assert [str(w.message) for w in caught if "close() raised" in str(w.message)] == [
        "env 3's close() raised RuntimeError: boom"]  # the Ctrl-C is not a warning; an env's error still is
    assert envs.closed and envs._pool.closed
    assert descriptors_and_mappings() == before  # the segment, sockets and pidfds released, the slots' views dropped
    assert wait_pids_gone(pids, 10.0) == []  # (a hang guard: the close waited for them)
    envs.close()  # a no-op: nothing closed again, nothing raised
    assert InterruptedCloseEnv.closed == list(share)
    _another_env_steps_without_an_interrupt()


@pytest.mark.parametrize("layout,share", _LAYOUTS, ids=["in-process", "default"])
def test_a_ctrl_c_in_an_inline_envs_close_as_the_env_is_freed_is_reported_and_not_kept(layout, share, monkeypatch):
    """Freed unclosed, the env is closed by ``__del__``, which cannot raise: the interrupt is
    reported as any exception there (``sys.unraisablehook``; before, a ``RuntimeWarning``), and
    not kept for a later call to raise."""
    from vec_asserts import wait_pids_gone

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_type))
    InterruptedCloseEnv.closed = []
    envs = ringenv.AsyncVectorEnv([functools.partial(InterruptedCloseEnv, i, {share[0]: KeyboardInterrupt})
                                   for i in range(4)], **layout)
    envs.reset(seed=0)
    pids = envs._pool.worker_pids()
    del envs
    gc.collect()
    assert InterruptedCloseEnv.closed == list(share)
    assert reported == [KeyboardInterrupt]
    assert wait_pids_gone(pids, 10.0) == []
    _another_env_steps_without_an_interrupt()


class SlowCloseEnv(RaisingCloseEnv):
    """A :class:`RaisingCloseEnv` whose ``close`` (once reset) writes ``<marker>.<env id>.start``,
    sleeps ``close_s`` seconds (a video or log being flushed), then writes ``<marker>.<env id>``,
    instead of raising."""

    def __init__(self, env_id: int, marker: str, close_s: float):
        self.env_id, self.marker, self.close_s = env_id, marker, close_s

    def close(self):
        if not self.used:
            return
        open(f"{self.marker}.{self.env_id}.start", "w").close()
        time.sleep(self.close_s)
        open(f"{self.marker}.{self.env_id}", "w").close()


def _slow_closing(tmp_path, close_s: float):
    marker = str(tmp_path / "closed")
    envs = ringenv.AsyncVectorEnv([functools.partial(SlowCloseEnv, i, marker, close_s) for i in range(2)],
                                  num_workers=2, inline=False)
    envs.reset(seed=0)
    return envs, marker, envs._pool.worker_pids()


def test_close_with_no_timeout_waits_for_every_envs_close_as_gymnasiums_does(tmp_path):
    """Gymnasium's ``close()`` waits for each env's ``close`` however long it takes. Before, ringenv
    gave the workers 1 s and killed them: an env that took 1.5 s to flush never finished, and
    nothing said so."""
    from vec_asserts import wait_pids_gone

    envs, marker, pids = _slow_closing(tmp_path, 1.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        envs.close()
    assert os.path.exists(f"{marker}.0") and os.path.exists(f"{marker}.1")
    assert not [w for w in caught if "close" in str(w.message)], [str(w.message) for w in caught]
    assert wait_pids_gone(pids, 10.0) == []


def test_a_close_timeout_shorter_than_the_envs_close_kills_the_workers_and_warns_naming_them(tmp_path):
    """``close(timeout=...)`` bounds the wait (a ringenv extension: Gymnasium's bounds only a
    pending call); the workers still closing then are killed, and a ``RuntimeWarning`` names each,
    with its envs, so that an env's lost ``close`` is not silent."""
    from vec_asserts import wait_pids_gone

    envs, marker, pids = _slow_closing(tmp_path, 600.0)
    with pytest.warns(RuntimeWarning) as caught:
        envs.close(timeout=0.2)
    texts = [str(w.message) for w in caught if str(w.message).startswith("close:")]
    assert len(texts) == 1, texts
    assert texts[0].startswith(f"close: workers 0 (pid {pids[0]}, envs [0]) and 1 (pid {pids[1]}, envs [1]) had not "
                               "closed their envs within 0.2 s (close's timeout) and were killed"), texts[0]
    assert wait_pids_gone(pids, 10.0) == []
    assert not os.path.exists(f"{marker}.0") and not os.path.exists(f"{marker}.1")


def test_a_ctrl_c_while_close_waits_for_the_envs_close_kills_the_workers_and_is_raised(tmp_path, python_sigint_handler):
    """With no timeout, ``close`` waits in slices between which signal handlers run: a Ctrl-C
    there (sent once both workers are inside their env's ``close``) ends the wait, the workers are
    killed, everything is released, and the ``KeyboardInterrupt`` is raised; a second ``close``
    does nothing."""
    import signal
    import threading

    from vec_asserts import wait_pids_gone

    envs, marker, pids = _slow_closing(tmp_path, 600.0)

    def interrupt_once_closing():
        deadline = time.monotonic() + 120.0  # a hang guard: the workers start closing at once
        while time.monotonic() < deadline:
            if all(os.path.exists(f"{marker}.{i}.start") for i in range(2)):
                break
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=interrupt_once_closing)
    sender.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            envs.close()
    finally:
        sender.join()
    assert envs.closed and envs._pool.closed
    assert wait_pids_gone(pids, 10.0) == []
    envs.close()


def test_close_with_no_timeout_kills_a_worker_that_never_takes_its_close_command(tmp_path):
    """A stopped worker (SIGSTOP) cannot take its ``Close`` command: ``close()`` does not wait
    for it as for an env's slow ``close``; after the 1 s it always had, it is killed and named
    in a ``RuntimeWarning``. (The same holds for a worker whose command ring is unusable:
    ``test_corrupt_memory.py``.)"""
    import signal

    from vec_asserts import wait_pids_gone

    envs, marker, pids = _slow_closing(tmp_path, 0.0)
    os.kill(pids[1], signal.SIGSTOP)
    try:
        with pytest.warns(RuntimeWarning) as caught:
            envs.close()
    finally:
        if wait_pids_gone([pids[1]], 10.0):
            os.kill(pids[1], signal.SIGKILL)
    texts = [str(w.message) for w in caught if "had not taken" in str(w.message)]
    assert len(texts) == 1 and f"1 (pid {pids[1]}, envs [1]) had not taken" in texts[0], texts
    assert "Close command within 1 s" in texts[0]
    assert wait_pids_gone(pids, 10.0) == []
    if f"0 (pid {pids[0]}" not in texts[0]:  # (named too only if a loaded machine kept it from its Close for 1 s)
        assert os.path.exists(f"{marker}.0")  # the worker that took its Close closed its env

# -- close releases -------------------------------------------------------------------------


def _fds() -> set:
    return set(os.listdir("/proc/self/fd"))


def _memfd_maps() -> list:
    with open("/proc/self/maps") as f:
        return [line for line in f if "/memfd:" in line]


def _make(copy: bool = True):
    return ringenv.AsyncVectorEnv([functools.partial(CounterEnv, i) for i in range(2)], num_workers=2, copy=copy)


def test_ten_closed_envs_kept_in_a_list_hold_no_descriptor_and_no_mapping():
    gc.collect()
    fds_before, maps_before = _fds(), _memfd_maps()
    envs = [_make() for _ in range(10)]
    for env in envs:
        env.reset(seed=0)
        env.step(np.ones(2, np.int64))
    assert len(_fds() - fds_before) >= 10 * 5, "each open env holds a memfd, sockets and pidfds"
    assert len(_memfd_maps()) >= len(maps_before) + 10
    for env in envs:
        env.close()
    # The envs are still referenced (the list), closed.
    assert all(env.closed for env in envs)
    assert _fds() - fds_before == set(), f"descriptors left open: {sorted(_fds() - fds_before)}"
    # (Compared as new lines: a mapping of an earlier test's env may go meanwhile.)
    assert [m for m in _memfd_maps() if m not in maps_before] == [], "the closed envs' segments are still mapped"
    with pytest.raises(ringenv.errors.ClosedEnvironmentError):
        envs[0].step(np.ones(2, np.int64))


def test_a_view_the_caller_holds_keeps_the_mapping_alone_and_valid_until_it_dies():
    gc.collect()
    fds_before, maps_before = _fds(), _memfd_maps()
    env = _make(copy=False)
    env.reset(seed=0)
    obs, *_ = env.step(np.ones(2, np.int64))
    assert obs.tolist() == [[0.0, 1.0], [1.0, 1.0]]
    env.close()
    # Descriptors are gone at once; the view still reads the last values from the mapping.
    assert _fds() - fds_before == set(), f"descriptors left open: {sorted(_fds() - fds_before)}"
    assert len(_memfd_maps()) == len(maps_before) + 1, "the caller's view keeps the mapping"
    assert obs.tolist() == [[0.0, 1.0], [1.0, 1.0]]
    del obs
    gc.collect()
    assert _memfd_maps() == maps_before, "the mapping goes with the last view"


def test_a_worker_death_releases_the_descriptors_of_the_closed_env():
    from helper_envs import ExitEnv

    gc.collect()
    fds_before, maps_before = _fds(), _memfd_maps()
    env = ringenv.AsyncVectorEnv([functools.partial(ExitEnv, 0, 0, 1, 3), functools.partial(CounterEnv, 1)],
                                 num_workers=2)
    env.reset(seed=0)
    with pytest.raises(ringenv.errors.WorkerDiedError):
        env.step(np.ones(2, np.int64))
    assert env.closed
    assert _fds() - fds_before == set(), f"descriptors left open: {sorted(_fds() - fds_before)}"
    assert _memfd_maps() == maps_before

# -- close during call ----------------------------------------------------------------------


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

# -- worker exit ----------------------------------------------------------------------------


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
