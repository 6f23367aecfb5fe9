"""A Ctrl-C at any point of a call: ``KeyboardInterrupt`` raised on the return of each native
(C or Rust) call the vector env makes inside ``step``, ``recv``, ``send``, ``async_reset`` or
``close``, and at the entry of each of its Python functions, one position per call, for every
position the call has. That is where CPython runs a signal handler (at the end of a call
instruction, at the start of a function; also at a loop's back edge, which ringenv's calls
reach only inside those), so these are the points where a real Ctrl-C lands, enumerated rather
than hit by chance: the test depends on no timing.

After each interrupt the program recovers as the docs say (``docs/RELIABILITY.md``, "Ctrl-C"):
``step_wait()`` collects an interrupted step (``NoAsyncCallError``: it was not sent, step again);
``recv()`` again after an interrupted ``recv``; the same ``send`` or ``async_reset`` again;
``close()`` again. Every step's results must then equal Gymnasium's ``SyncVectorEnv`` stepping the same
actions: nothing lost, nothing applied twice, and no call refused for ever (a Ctrl-C between
taking the call guard and the block that releases it used to leave it held: every later call
was refused as made "while another thread is sending a call")."""

from __future__ import annotations

import functools
import inspect
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import NoAsyncCallError
from helper_envs import CounterEnv
from vec_asserts import child_pids, wait_pids_gone

import ringenv

#: Hang guard for waits (seconds): never a timing assertion.
GUARD_S = 60.0
#: More positions than any call here has (each call's count is found by running out of them).
MAX_POSITIONS = 2000
RINGENV_DIR = ringenv.__file__.rsplit("/", 1)[0]


def _interrupted(position: int, call):
    """Runs ``call()`` with a ``KeyboardInterrupt`` raised at its ``position``-th point of
    ringenv's own code (not the envs') where CPython runs signal handlers: the return of a
    native call, or the entry of a Python function. ``(True, None)`` when it was raised (and
    ``call`` raised it), ``(False, value)`` when ``call`` returned first."""
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        # Not in a generator's frame: it also runs when the generator is finalized (all() stopping
        # early), where CPython ignores any exception, a real Ctrl-C's included.
        if (event in ("c_return", "call") and frame.f_code.co_filename.startswith(RINGENV_DIR)
                and not frame.f_code.co_flags & inspect.CO_GENERATOR):
            count += 1
            if count == position:
                raise KeyboardInterrupt

    sys.setprofile(profile)
    try:
        value = call()
    except KeyboardInterrupt:
        return True, None
    finally:
        sys.setprofile(None)
    assert count < position, "the interrupt was swallowed"
    return False, value


def _assert_step_equal(ours, ref):
    for got, want in zip(ours[:4], ref[:4]):
        np.testing.assert_array_equal(got, want)
    if "final_obs" in ref[4]:  # same-step autoreset
        np.testing.assert_array_equal(ours[4]["final_obs"].tolist(), ref[4]["final_obs"].tolist())


def _step_at_every_position(envs, ref) -> int:
    """Steps ``envs`` with a ``KeyboardInterrupt`` at position 1, 2, ... of each step in turn,
    until a step has no such position left, recovering as documented and checking each step
    against ``ref`` (a ``SyncVectorEnv`` of the same envs, which it closes); returns how many
    steps were interrupted."""
    envs.reset(seed=0), ref.reset(seed=0)
    rng = np.random.default_rng(0)
    interrupted = 0
    for position in range(1, MAX_POSITIONS):
        actions = rng.integers(0, 2, 4)
        raised, result = _interrupted(position, lambda: envs.step(actions))
        if raised:
            interrupted += 1
            try:
                result = envs.step_wait(timeout=GUARD_S)
            except NoAsyncCallError:  # the interrupt came before the step was sent
                result = envs.step(actions)
        _assert_step_equal(result, ref.step(actions))
        if not raised:
            break
    else:
        pytest.fail(f"step made {MAX_POSITIONS} native calls or more")
    _assert_step_equal(envs.step(np.ones(4, np.int64)), ref.step(np.ones(4, np.int64)))
    ref.close()
    return interrupted


@pytest.mark.parametrize("layout", [
    {"num_workers": 2, "inline": False},
    {"num_workers": 1, "inline": True},
    {"num_workers": 0},
], ids=["workers", "inline-share", "in-process"])
def test_a_ctrl_c_at_any_point_of_step_loses_no_step_and_applies_none_twice(closing, layout):
    fns = [functools.partial(CounterEnv, i) for i in range(4)]
    envs = closing(ringenv.AsyncVectorEnv(fns, **layout))
    ref = gym.vector.SyncVectorEnv(fns)
    assert _step_at_every_position(envs, ref) >= 5  # the step has that many points at least


class _EndingEnv(CounterEnv):
    """A :class:`CounterEnv` whose every step ends its episode: with a same-step autoreset each
    step then runs ringenv's own Python code (the final info's merge) after the env returned."""

    def step(self, action):
        obs, reward, _, truncated, info = super().step(action)
        return obs, reward, True, truncated, {"t": self.t}


@pytest.mark.parametrize("layout", [{"num_workers": 1, "inline": True}, {"num_workers": 0}],
                         ids=["inline-share", "in-process"])
def test_a_ctrl_c_after_an_env_of_the_share_returned_loses_none_of_its_results(closing, layout):
    # An interrupt in ringenv's code that follows an env's step in this process (the same-step
    # info, the observation's write) used to lose that env's step ("the results of this call are
    # lost"): the env had stepped, and stepping again applied two steps for one action.
    from gymnasium.vector import AutoresetMode

    fns = [functools.partial(_EndingEnv, i) for i in range(4)]
    envs = closing(ringenv.AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP, **layout))
    ref = gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    assert _step_at_every_position(envs, ref) >= 5


@pytest.mark.parametrize("interrupt", ["recv", "send"])
def test_a_ctrl_c_at_any_point_of_recv_or_send_loses_nothing(closing, interrupt):
    fns = [functools.partial(CounterEnv, i) for i in range(4)]
    envs = closing(ringenv.AsyncVectorEnv(fns, num_workers=2, batch_size=2, deterministic=True))
    refs = [CounterEnv(i) for i in range(4)]
    envs.async_reset(seed=0)
    for r in refs:
        r.reset(seed=0)
    rng = np.random.default_rng(0)
    interrupted = 0
    for position in range(1, MAX_POSITIONS):
        if interrupt == "recv":
            raised, batch = _interrupted(position, lambda: envs.recv(timeout=GUARD_S))
            if raised:
                interrupted += 1
                batch = envs.recv(timeout=GUARD_S)
        else:
            raised, batch = False, envs.recv(timeout=GUARD_S)
        obs, rewards, terminated, truncated, infos = batch
        ids = infos["env_id"]
        for row, i in enumerate(ids):  # each env's observation is its own step count: none lost or repeated
            np.testing.assert_array_equal(obs[row], refs[i]._obs())
        actions = rng.integers(0, 2, len(ids))
        if interrupt == "send":
            raised, _ = _interrupted(position, lambda: envs.send(actions, ids))
            if raised:
                interrupted += 1
                envs.send(actions, ids)  # the same send again: sent once either way
        else:
            envs.send(actions, ids)
        for a, i in zip(actions, ids):
            refs[i].step(int(a))
        if not raised:
            break
    else:
        pytest.fail(f"{interrupt} made {MAX_POSITIONS} native calls or more")
    assert interrupted >= 5, interrupted
    seen = set()
    for _ in range(4):  # every env still comes back (none was dropped from the rotation), each with its own count
        obs, *_, infos = envs.recv(timeout=GUARD_S)
        for row, i in enumerate(infos["env_id"]):
            np.testing.assert_array_equal(obs[row], refs[i]._obs())
        seen.update(infos["env_id"].tolist())
        envs.send(np.zeros(2, np.int64), infos["env_id"])
        for i in infos["env_id"]:
            refs[i].step(0)
    assert seen == {0, 1, 2, 3}


def test_a_ctrl_c_at_any_point_of_async_reset_is_recovered_by_making_it_again(closing):
    """The same ``async_reset`` again after an interrupt: sent once either way, so every env's
    first ``recv`` is its reset observation and every env comes back."""
    fns = [functools.partial(CounterEnv, i) for i in range(4)]
    for position in range(1, MAX_POSITIONS):
        envs = ringenv.AsyncVectorEnv(fns, num_workers=2, batch_size=2, deterministic=True)
        try:
            raised, _ = _interrupted(position, lambda: envs.async_reset(seed=0))
            if raised:
                envs.async_reset(seed=0)
            seen = set()
            for _ in range(2):
                obs, rewards, *_, infos = envs.recv(timeout=GUARD_S)
                assert (obs[:, 1] == 0).all() and (rewards == 0).all()  # reset observations, once
                seen.update(infos["env_id"].tolist())
            assert seen == {0, 1, 2, 3}
        finally:
            envs.close(terminate=True)
        if not raised:
            break
    else:
        pytest.fail(f"async_reset made {MAX_POSITIONS} native calls or more")
    assert position > 5


def test_a_ctrl_c_at_any_point_of_close_is_finished_by_closing_again():
    """``close()`` again after an interrupted close stops the workers (an interrupt after the env
    was marked closed, before its pool was, left them running: Gymnasium's ``close`` returned at
    once from then on)."""
    from vec_asserts import wait_pids_gone

    for position in range(1, MAX_POSITIONS):
        envs = ringenv.make_vec("CartPole-v1", 2, vector_kwargs={"num_workers": 1})
        envs.reset(seed=0)
        pids = envs._pool.worker_pids()
        raised, _ = _interrupted(position, lambda: envs.close())
        if raised:
            envs.close()
        assert envs.closed and envs._pool.closed, position
        assert wait_pids_gone(pids, GUARD_S) == [], f"workers left after an interrupt at position {position}"
        if not raised:
            break
    else:
        pytest.fail(f"close made {MAX_POSITIONS} native calls or more")
    assert position > 3


def test_a_ctrl_c_at_any_point_of_init_after_the_pool_started_leaves_no_worker_running():
    # The traceback of an exception out of __init__ holds the half-made env (a REPL keeps it in
    # sys.last_traceback until the next error): its workers must stop when the exception is raised.
    # A Rust env's worker starts in milliseconds; what follows the pool's start is the same code.
    before = child_pids()
    interrupted = 0
    for position in range(1, MAX_POSITIONS):
        count, armed = 0, False

        def profile(frame, event, arg):
            nonlocal count, armed
            if event == "c_call" and getattr(arg, "__name__", "") == "closer":
                armed = True  # the pool has started: its closer is the first call after it
            if armed and event in ("c_return", "call") and frame.f_code.co_filename.startswith(RINGENV_DIR):
                count += 1
                if count == position:
                    raise KeyboardInterrupt

        held = None
        sys.setprofile(profile)
        try:
            envs = ringenv.make_vec("CartPole-v1", 2, vector_kwargs={"num_workers": 1, "inline": False})
        except KeyboardInterrupt as e:
            held = e  # keeps the traceback, and with it the half-made env, alive
        finally:
            sys.setprofile(None)
        assert armed
        if held is None:
            assert count < position, "the interrupt was swallowed"
            envs.close()
            break
        interrupted += 1
        left = wait_pids_gone(child_pids() - before, timeout=3)
        assert left == [], (position, [open(f"/proc/{p}/cmdline").read()[:80] + open(f"/proc/{p}/stat").read()[:60] for p in left])
        del held
    else:
        pytest.fail(f"__init__ made {MAX_POSITIONS} calls or more after the pool started")
    assert interrupted >= 3, interrupted
