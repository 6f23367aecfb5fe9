"""call / call_async / call_wait, get_attr, set_attr, render, exceptions raised by a called method,
close(terminate=..., timeout=...) and the protocol errors of calls: each as
gymnasium.vector.AsyncVectorEnv does, with results equal to gymnasium.vector.SyncVectorEnv's."""

from __future__ import annotations

import functools
import multiprocessing
import os
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError

import ringenv

from helper_envs import CallEnv, CloseMarkEnv, StepError
from vec_asserts import assert_identical, child_pids, notes_by_env, wait_new_children_gone
from vec_compare import assert_tree_identical, assert_vec_reset_identical, assert_step_identical, make_ours, make_ref

N = 4


def _call_envs(closing, shared_memory=True):
    fns = [functools.partial(CallEnv, i) for i in range(N)]
    ours = closing(make_ours(fns, shared_memory=shared_memory))
    ref = closing(make_ref(fns))
    return ours, ref


def _ones(n=N):
    return np.ones(n, dtype=np.int64)


# -- call -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "pickled"])
def test_call_returns_a_tuple_of_results_as_sync(closing, shared_memory):
    ours, ref = _call_envs(closing, shared_memory)
    assert_vec_reset_identical(ours.reset(seed=0), ref.reset(seed=0))
    for _ in range(3):
        assert_step_identical(ours.step(_ones()), ref.step(_ones()))

    result = ours.call("describe", "<", suffix=">")
    assert type(result) is tuple and len(result) == N
    assert result == ref.call("describe", "<", suffix=">") == tuple(f"<env{i}:3>" for i in range(N))

    # Results of any type: a dict holding an ndarray.
    stats = ours.call("stats")
    assert type(stats) is tuple
    assert_tree_identical(stats, ref.call("stats"), "stats")
    assert stats[2]["index"] == 2 and stats[2]["history"].dtype == np.int16

    # A name that is not callable gives its value.
    assert ours.call("label") == ref.call("label") == tuple(f"env{i}" for i in range(N))


def test_call_async_and_call_wait(closing):
    ours, ref = _call_envs(closing)
    ours.reset(seed=0)
    ref.reset(seed=0)
    ours.call_async("describe", "p-", suffix="!")
    result = ours.call_wait(timeout=10.0)
    assert type(result) is tuple
    assert result == ref.call("describe", "p-", suffix="!")
    # And once more, with no timeout.
    ours.call_async("sleep", 0.0)
    assert ours.call_wait() == tuple(range(N))


def test_call_wait_without_call_async_raises_no_async_call_error(closing):
    ours, _ = _call_envs(closing)
    ours.reset(seed=0)
    with pytest.raises(NoAsyncCallError):
        ours.call_wait()
    ours.step_async(_ones())
    with pytest.raises(NoAsyncCallError):
        ours.call_wait()  # a step is pending, not a call
    ours.step_wait()
    assert ours.call("label") == tuple(f"env{i}" for i in range(N))  # still usable


def test_call_async_while_pending_raises_already_pending_call_error(closing):
    ours, _ = _call_envs(closing)
    ours.reset(seed=0)
    ours.call_async("describe", "a")
    with pytest.raises(AlreadyPendingCallError):
        ours.call_async("describe", "b")
    with pytest.raises(AlreadyPendingCallError):
        ours.step_async(_ones())
    with pytest.raises(AlreadyPendingCallError):
        ours.reset_async()
    with pytest.raises(NoAsyncCallError):
        ours.step_wait()
    # The first call is still the pending one.
    assert ours.call_wait() == tuple(f"aenv{i}:0" for i in range(N))
    ours.step_async(_ones())
    with pytest.raises(AlreadyPendingCallError):
        ours.call_async("describe", "c")
    ours.step_wait()


def test_call_wait_timeout_raises_multiprocessing_timeout_error(closing):
    ours, _ = _call_envs(closing)
    ours.reset(seed=0)
    ours.call_async("sleep", 60.0)
    start = time.monotonic()
    with pytest.raises(multiprocessing.TimeoutError):
        ours.call_wait(timeout=0.05)
    # Not a timing bound: the call takes 60 s, so returning at all before it ends is the point.
    assert time.monotonic() - start < 30.0
    ours.close(terminate=True)
    ours.close(terminate=True)
    assert ours.closed


def test_calls_after_close_raise_closed_environment_error():
    ours = make_ours([functools.partial(CallEnv, i) for i in range(2)])
    ours.close()
    with pytest.raises(ClosedEnvironmentError):
        ours.call("describe", "x")
    with pytest.raises(ClosedEnvironmentError):
        ours.call_async("describe", "x")
    with pytest.raises(ClosedEnvironmentError):
        ours.get_attr("label")
    with pytest.raises(ClosedEnvironmentError):
        ours.set_attr("scale", 2.0)


# -- get_attr / set_attr --------------------------------------------------------------------------


def test_get_attr_returns_a_tuple_as_sync(closing):
    ours, ref = _call_envs(closing)
    ours.reset(seed=0)
    ref.reset(seed=0)
    labels = ours.get_attr("label")
    assert type(labels) is tuple
    assert labels == ref.get_attr("label") == tuple(f"env{i}" for i in range(N))
    assert ours.get_attr("env_index") == tuple(range(N))
    spaces = ours.get_attr("observation_space")
    assert spaces == ref.get_attr("observation_space")
    assert all(s == ours.single_observation_space for s in spaces)


def test_get_attr_of_a_missing_attribute_raises_attribute_error(closing):
    ours, _ = _call_envs(closing)
    ours.reset(seed=0)
    with pytest.raises(AttributeError, match="no_such_attribute"):
        ours.get_attr("no_such_attribute")


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "pickled"])
def test_set_attr_one_value_for_all_envs(closing, shared_memory):
    ours, ref = _call_envs(closing, shared_memory)
    assert_vec_reset_identical(ours.reset(seed=0), ref.reset(seed=0))
    assert ours.set_attr("scale", 2.5) is None
    ref.set_attr("scale", 2.5)
    assert ours.get_attr("scale") == (2.5,) * N
    out = ours.step(_ones())
    assert_step_identical(out, ref.step(_ones()))
    assert_identical(out[1], np.full(N, 2.5))  # the envs use the new value


@pytest.mark.parametrize("container", [list, tuple])
def test_set_attr_one_value_per_env(closing, container):
    ours, ref = _call_envs(closing)
    assert_vec_reset_identical(ours.reset(seed=0), ref.reset(seed=0))
    values = container([0.5, 1.5, -2.0, 4.0])
    ours.set_attr("scale", values)
    ref.set_attr("scale", values)
    assert ours.get_attr("scale") == ref.get_attr("scale") == (0.5, 1.5, -2.0, 4.0)
    out = ours.step(_ones())
    assert_step_identical(out, ref.step(_ones()))
    assert_identical(out[1], np.array([0.5, 1.5, -2.0, 4.0]))
    # Values of any type, one per env; a new attribute.
    ours.set_attr("tag", [{"k": i} for i in range(N)])
    assert ours.get_attr("tag") == tuple({"k": i} for i in range(N))


@pytest.mark.parametrize("values", [[1.0, 2.0], (1.0, 2.0, 3.0, 4.0, 5.0), []], ids=["short", "long", "empty"])
def test_set_attr_wrong_number_of_values_raises_value_error(closing, values):
    ours, ref = _call_envs(closing)
    ours.reset(seed=0)
    with pytest.raises(ValueError):
        ref.set_attr("scale", values)
    with pytest.raises(ValueError):
        ours.set_attr("scale", values)
    assert ours.get_attr("scale") == (1.0,) * N  # nothing was set
    ours.step(_ones())  # still usable


def test_set_attr_on_gymnasium_wrapped_env_reaches_the_base_env(closing):
    # gym.make wraps CartPole (TimeLimit, OrderEnforcing, PassiveEnvChecker): set_attr and
    # get_attr go through set_wrapper_attr / get_wrapper_attr to the base env.
    fn = functools.partial(gym.make, "CartPole-v1")
    ours, ref = closing(make_ours([fn] * 2)), closing(make_ref([fn] * 2))
    assert ours.get_attr("gravity") == ref.get_attr("gravity") == (9.8, 9.8)
    assert ours.get_attr("render_mode") == ref.get_attr("render_mode") == (None, None)
    for env in (ours, ref):
        env.set_attr("gravity", [9.8, 30.0])
        env.reset(seed=1)
    assert ours.get_attr("gravity") == (9.8, 30.0)
    for t in range(20):
        actions = np.array([t % 2, (t + 1) % 2])
        assert_step_identical(ours.step(actions), ref.step(actions), f"step {t}")


def test_np_random_seed_is_a_tuple_of_the_sub_env_seeds(closing):
    ours, ref = _call_envs(closing)
    ours.reset(seed=42)
    ref.reset(seed=42)
    assert ours.np_random_seed == ref.np_random_seed == (42, 43, 44, 45)


# -- render ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "pickled"])
def test_render_rgb_array_returns_a_tuple_of_frames_as_sync(closing, shared_memory):
    n = 3
    fn = functools.partial(gym.make, "CartPole-v1", render_mode="rgb_array")
    ours = closing(make_ours([fn] * n, shared_memory=shared_memory))
    ref = closing(make_ref([fn] * n))
    assert ours.render_mode == ref.render_mode == "rgb_array"
    assert ours.metadata == ref.metadata
    assert_vec_reset_identical(ours.reset(seed=9), ref.reset(seed=9))
    for t in range(5):
        frames = ours.render()
        ref_frames = ref.render()
        assert type(frames) is tuple and len(frames) == n
        for i, (frame, ref_frame) in enumerate(zip(frames, ref_frames)):
            assert frame.shape == (400, 600, 3) and frame.dtype == np.uint8
            assert_identical(frame, ref_frame, f"frame {i} at step {t}")
        assert not np.array_equal(frames[0], frames[1])  # different seeds, different carts
        actions = np.array([1, 0, 1])
        assert_step_identical(ours.step(actions), ref.step(actions), f"step {t}")


@pytest.mark.filterwarnings("ignore:.*render.*")
def test_render_without_render_mode_returns_none_per_env(closing):
    fn = functools.partial(gym.make, "CartPole-v1")  # render_mode None: render() warns, returns None
    ours, ref = closing(make_ours([fn] * 2)), closing(make_ref([fn] * 2))
    ours.reset(seed=0)
    ref.reset(seed=0)
    assert ours.render_mode is None
    assert ours.render() == ref.render() == (None, None)


# -- exceptions in called methods -----------------------------------------------------------------


def test_call_exception_is_reraised_with_its_type_and_message(closing):
    ours, ref = _call_envs(closing)
    ours.reset(seed=0)
    with pytest.raises(StepError, match=r"bad call \(env 1\)"):
        ref.call("fail_call", "bad call")
    with pytest.raises(StepError, match=r"bad call \(env \d\)") as info:
        ours.call("fail_call", "bad call")
    assert type(info.value) is StepError


@pytest.mark.parametrize("layout", [{"num_workers": 4, "inline": False}, {"num_workers": 3, "inline": True}],
                         ids=["workers", "inline-share"])
def test_a_call_in_which_several_envs_raised_names_each_env(closing, layout):
    """One env per process (the last one the main process's share): envs 1, 2 and 3 raise in the
    call. Env 1's error is raised, as ``SyncVectorEnv`` raises the first env's, naming env 1; the
    others are notes naming their envs (until 2026-12-05 a call's errors came back without their
    env, and the notes said "another env")."""
    fns = [functools.partial(CallEnv, i) for i in range(N)]
    envs = closing(ringenv.AsyncVectorEnv(fns, **layout))
    envs.reset(seed=0)
    with pytest.raises(StepError) as info:
        envs.call("fail_call", "bad call")
    assert str(info.value) == "bad call (env 1)" and info.value.env_id == 1
    notes = notes_by_env(info.value)
    assert sorted(notes) == [2, 3]
    for env_id, note in notes.items():
        assert note.rstrip().endswith(f"StepError: bad call (env {env_id})"), note
    assert envs.get_attr("env_index") == (0, 1, 2, 3)  # usable again, as after a step's error


def test_call_exception_cause_holds_the_remote_traceback(closing):
    ours, _ = _call_envs(closing)
    ours.reset(seed=0)
    with pytest.raises(StepError) as info:
        ours.call("fail_call", "traceback please")
    cause = info.value.__cause__
    assert cause is not None
    text = str(cause)
    assert "Traceback (most recent call last)" in text, text
    assert "helper_envs.py" in text and "_raise_in_call" in text, text
    assert "traceback please" in text


def test_get_attr_exception_cause_holds_the_remote_traceback(closing):
    ours, _ = _call_envs(closing)
    ours.reset(seed=0)
    with pytest.raises(AttributeError, match="missing_thing") as info:
        ours.get_attr("missing_thing")
    cause = info.value.__cause__
    assert cause is not None and "Traceback (most recent call last)" in str(cause)


# -- close ----------------------------------------------------------------------------------------


def _mark_envs(tmp_path, n=N, delay=0.0):
    return [functools.partial(CloseMarkEnv, i, str(tmp_path), delay) for i in range(n)]


def test_close_closes_every_sub_env(tmp_path):
    before = child_pids()
    ours = make_ours(_mark_envs(tmp_path))
    ours.reset(seed=0)
    ours.step(_ones())
    # The factory ran once in this process too (to read the spaces): clear its marker.
    for f in tmp_path.iterdir():
        f.unlink()
    ours.close()
    assert ours.closed
    assert sorted(os.listdir(tmp_path)) == [f"closed-{i}" for i in range(N)]
    assert not wait_new_children_gone(before, timeout=5.0), "worker processes left after close()"
    ours.close()  # closing twice is harmless


def test_close_terminate_stops_workers_at_once(tmp_path):
    before = child_pids()
    ours = make_ours(_mark_envs(tmp_path, delay=60.0))
    ours.reset(seed=0)
    ours.step_async(_ones())  # a step that takes 60 s is pending
    start = time.monotonic()
    ours.close(terminate=True)
    assert time.monotonic() - start < 30.0  # did not wait for the 60 s step (no timing bound)
    assert ours.closed
    assert not wait_new_children_gone(before, timeout=5.0), "worker processes left after close(terminate=True)"
    with pytest.raises(ClosedEnvironmentError):
        ours.step(_ones())


def test_close_timeout_gives_up_on_a_pending_step(tmp_path):
    before = child_pids()
    ours = make_ours(_mark_envs(tmp_path, delay=60.0))
    ours.reset(seed=0)
    ours.step_async(_ones())
    start = time.monotonic()
    ours.close(timeout=0.2)
    assert time.monotonic() - start < 30.0  # did not wait for the 60 s step (no timing bound)
    assert ours.closed
    assert not wait_new_children_gone(before, timeout=5.0), "worker processes left after close(timeout=...)"


def test_close_timeout_waits_for_a_short_pending_step(tmp_path):
    before = child_pids()
    ours = make_ours(_mark_envs(tmp_path, delay=0.3))
    ours.reset(seed=0)
    for f in tmp_path.iterdir():
        f.unlink()
    ours.step_async(_ones())
    ours.close(timeout=10.0)  # the step finishes, then the envs are closed
    assert ours.closed
    assert sorted(os.listdir(tmp_path)) == [f"closed-{i}" for i in range(N)]
    assert not wait_new_children_gone(before, timeout=5.0)


def test_apply_runs_a_function_on_the_chosen_envs_only(closing):
    from ringenv import AsyncVectorEnv

    env = closing(AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4, num_workers=2))

    def mark(e):
        e.unwrapped.marked = True
        return e.unwrapped.marked

    assert env._apply(mark, [3, 0]) == [True, True]
    assert env._apply(lambda e: getattr(e.unwrapped, "marked", False)) == [True, False, False, True]
    with pytest.raises(ValueError, match="env id 4 is outside"):
        env._apply(mark, [4])
