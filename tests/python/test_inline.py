"""The inline share: the main process steps the last block of envs itself, beside the worker
processes (``AsyncVectorEnv(..., inline=...)``, ``ringenv._plan.plan_workers``).

Results equal Gymnasium's and ringenv's all-process results; the share's envs are built,
closed and reported like a worker's; a timeout shorter than the share raises and keeps the call
pending; a forked child never touches the creator's inline envs; bad ``inline`` values are
refused before anything starts. With ``num_workers=0`` there is no worker process: the share is
every env, with the same results.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import time

import gymnasium as gym
import numpy as np
import psutil
import pytest

import ringenv
from ringenv._plan import plan_workers, usable_cores
from vec_asserts import assert_step_identical, wait_new_children_gone
from helper_envs import CloseMarkEnv, CounterEnv, InfoEnv, LogInfoEnv, RaisingEnv, SlowEnv, StepError, failing_factory
from vec_compare import assert_vec_reset_identical


def _info_fns(n):
    return [InfoEnv for _ in range(n)]


def _run(env, actions_seed: int, steps: int):
    """Reset with seed 11, then ``steps`` steps of seeded random actions: every result, infos too."""
    out = [env.reset(seed=11)]
    rng = np.random.default_rng(actions_seed)
    for _ in range(steps):
        out.append(env.step(rng.integers(0, 3, env.num_envs)))
    return out


def _assert_same(a, b):
    assert len(a) == len(b)
    assert_vec_reset_identical(a[0], b[0])
    for t, (x, y) in enumerate(zip(a[1:], b[1:])):
        assert_step_identical(x, y, what=f"step {t}")


@pytest.mark.parametrize("autoreset_mode", ["NextStep", "SameStep"])
def test_an_inline_share_gives_gymnasiums_results(closing, autoreset_mode):
    mode = gym.vector.AutoresetMode.NEXT_STEP if autoreset_mode == "NextStep" else gym.vector.AutoresetMode.SAME_STEP
    inline = closing(ringenv.AsyncVectorEnv(_info_fns(5), num_workers=2, inline=True, autoreset_mode=mode))
    assert (inline.num_workers, inline.inline) == (2, True)
    assert len(inline._pool.worker_pids()) == 2, "two processes; the third block is this process's"
    assert inline._pool.inline_worker == 2
    sync = closing(gym.vector.SyncVectorEnv(_info_fns(5), autoreset_mode=mode))
    _assert_same(_run(inline, 4, 60), _run(sync, 4, 60))


def test_inline_and_all_process_pools_give_the_same_results(closing):
    inline = closing(ringenv.AsyncVectorEnv(_info_fns(4), num_workers=1, inline=True))
    processes = closing(ringenv.AsyncVectorEnv(_info_fns(4), num_workers=2, inline=False))
    assert (processes.num_workers, processes.inline) == (2, False)
    _assert_same(_run(inline, 9, 50), _run(processes, 9, 50))


@pytest.mark.parametrize("autoreset_mode", ["NextStep", "SameStep"])
def test_num_workers_0_steps_every_env_in_this_process_with_gymnasiums_results(closing, autoreset_mode):
    mode = gym.vector.AutoresetMode.NEXT_STEP if autoreset_mode == "NextStep" else gym.vector.AutoresetMode.SAME_STEP
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    alone = closing(ringenv.AsyncVectorEnv(_info_fns(5), num_workers=0, autoreset_mode=mode))
    assert (alone.num_workers, alone.inline) == (0, True)
    assert alone._pool.worker_pids() == [] and alone._pool.inline_worker == 0
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before, "no worker process started"
    sync = closing(gym.vector.SyncVectorEnv(_info_fns(5), autoreset_mode=mode))
    _assert_same(_run(alone, 4, 60), _run(sync, 4, 60))


@pytest.mark.parametrize("num_workers", [0, 1])
def test_the_inline_shares_infos_are_its_envs_own_objects_as_in_sync_vector_env(closing, num_workers):
    # The share's infos never leave this process, so they are not pickled on the way: an info
    # value an env keeps returning is that same object at every step, as SyncVectorEnv gives it.
    # A worker process's arrive as copies. 4 envs: with 1 worker, envs 2 and 3 are the share's.
    envs = closing(ringenv.AsyncVectorEnv([LogInfoEnv] * 4, num_workers=num_workers, inline=True))
    sync = closing(gym.vector.SyncVectorEnv([LogInfoEnv] * 4))
    shared = [k >= 2 * num_workers for k in range(4)]
    for vec in (envs, sync):
        vec.reset(seed=0)
        first = vec.step(np.zeros(4, np.int64))[4]["log"]
        second = vec.step(np.zeros(4, np.int64))[4]["log"]
        expected = shared if vec is envs else [True] * 4
        assert [a is b for a, b in zip(first, second)] == expected, type(vec).__name__
        assert [list(v) for v in second] == [[1, 2]] * 4


def test_builtin_rust_envs_with_num_workers_0_step_as_in_worker_processes(closing):
    alone = closing(ringenv.make_vec("CartPole-v1", 6, vector_kwargs={"num_workers": 0}))
    processes = closing(ringenv.make_vec("CartPole-v1", 6, vector_kwargs={"num_workers": 2, "inline": False}))
    assert (alone.num_workers, alone.inline) == (0, True) and alone._pool.worker_pids() == []
    np.testing.assert_array_equal(alone.reset(seed=5)[0], processes.reset(seed=5)[0])
    rng = np.random.default_rng(1)
    for t in range(300):
        actions = rng.integers(0, 2, 6)
        for u, v in zip(alone.step(actions)[:4], processes.step(actions)[:4]):
            np.testing.assert_array_equal(u, v, err_msg=f"step {t}")


def test_num_workers_0_refuses_what_needs_a_process_before_anything_starts():
    with pytest.raises(ValueError, match="num_workers=0 means no worker process.*inline=False"):
        ringenv.AsyncVectorEnv([_never_built] * 2, num_workers=0, inline=False)
    with pytest.raises(ValueError, match=r"num_workers=0 means no worker process: .* batch_size=2 < num_envs=4 "
                                         r"needs worker processes"):
        ringenv.AsyncVectorEnv([CounterEnv] * 4, num_workers=0, batch_size=2)
    # with the share, the blocks are named as such, not as a worker count never given
    with pytest.raises(ValueError, match=r"num_envs \(8\) is not a multiple of 5 blocks \(4 worker processes \+ "
                                         r"the inline share\)"):
        ringenv.AsyncVectorEnv([CounterEnv] * 8, num_workers=4, inline=True, batch_size=4)
    with pytest.raises(ValueError, match=r"num_workers must be an integer from 0 to num_envs"):
        ringenv.AsyncVectorEnv([_never_built] * 2, num_workers=-1)


def test_builtin_rust_envs_step_inline_as_in_worker_processes(closing):
    inline = closing(ringenv.make_vec("CartPole-v1", 6, vector_kwargs={"num_workers": 1, "inline": True}))
    processes = closing(ringenv.make_vec("CartPole-v1", 6, vector_kwargs={"num_workers": 2, "inline": False}))
    assert inline.inline and not processes.inline
    a, b = inline.reset(seed=5), processes.reset(seed=5)
    np.testing.assert_array_equal(a[0], b[0])
    rng = np.random.default_rng(0)
    for t in range(300):
        actions = rng.integers(0, 2, 6)
        for u, v in zip(inline.step(actions)[:4], processes.step(actions)[:4]):
            np.testing.assert_array_equal(u, v, err_msg=f"step {t}")


def test_async_batches_with_an_inline_share_return_every_env_once_per_round(closing):
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(CounterEnv, i) for i in range(6)], num_workers=2,
                                          inline=True, batch_size=2, deterministic=True))
    envs.async_reset(seed=0)
    counts = np.zeros(6, int)
    for round_ in range(30):
        seen = []
        for _ in range(3):
            obs, rewards, terminated, truncated, infos = envs.recv()
            ids = infos["env_id"]
            np.testing.assert_array_equal(obs[:, 0], ids)  # each row is its own env's
            np.testing.assert_array_equal(obs[:, 1], counts[ids])
            seen.extend(ids.tolist())
            counts[ids] += 1
            envs.send(np.ones(len(ids), np.int64), ids)
        assert seen == list(range(6)), f"round {round_}: first in, first out"
    assert set(counts) == {30}


def test_in_arrival_order_the_inline_share_never_runs_ahead_of_the_worker_processes(closing):
    # The share is stepped only on its turn in send order, however fast it is: between two of its
    # batches every worker process's block came back once (it is never more than one batch ahead).
    # How far it may fall behind depends on the scheduling (beside a busy process the worker
    # processes' batches arrive before it runs, and arrival order returns them first), so only
    # the bound ahead is asserted.
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(CounterEnv, i) for i in range(6)], num_workers=2,
                                          inline=True, batch_size=2))
    envs.async_reset(seed=0)
    counts = np.zeros(6, int)
    for _ in range(90):
        obs, rewards, terminated, truncated, infos = envs.recv()
        ids = infos["env_id"]
        np.testing.assert_array_equal(obs[:, 1], counts[ids])
        counts[ids] += 1
        assert counts[4] <= counts[:4].min() + 1, counts
        envs.send(np.ones(len(ids), np.int64), ids)
    assert counts[4] == counts[5] and counts.sum() == 180 and counts[4] >= 1, counts


def test_an_inline_envs_exception_is_raised_as_a_workers_and_the_env_goes_on(closing):
    # env 3 is in the inline share (the last block of 4 envs over 1 process + this one)
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(RaisingEnv, i, 3, 2) for i in range(4)],
                                          num_workers=1, inline=True))
    envs.reset(seed=0)
    envs.step(np.zeros(4, np.int64))
    with pytest.raises(StepError, match="boom in env 3 at step 2"):
        envs.step(np.zeros(4, np.int64))
    obs, *_ = envs.step(np.zeros(4, np.int64))
    np.testing.assert_array_equal(obs[:, 0], [0, 1, 2, 3])


def test_close_closes_the_inline_envs_in_this_process(tmp_path):
    envs = ringenv.AsyncVectorEnv([functools.partial(CloseMarkEnv, i, str(tmp_path)) for i in range(4)],
                                  num_workers=1, inline=True)
    for marker in tmp_path.iterdir():
        marker.unlink()  # the spaces were read from one env built and closed here at construction
    envs.reset(seed=0)
    envs.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"closed-{i}" for i in range(4)]


def _child_closes_its_copy(envs, queue):
    envs.close()  # a fork's copy: must not close the creator's inline envs nor its workers
    queue.put("closed")


@pytest.mark.parametrize("num_workers", [1, 0])
def test_a_forked_child_never_closes_the_creators_inline_envs(closing, tmp_path, num_workers):
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(CloseMarkEnv, i, str(tmp_path)) for i in range(4)],
                                          num_workers=num_workers, inline=True))
    for marker in tmp_path.iterdir():
        marker.unlink()  # the spaces were read from one env built and closed here at construction
    envs.reset(seed=0)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_closes_its_copy, args=(envs, queue))
    child.start()
    assert queue.get(timeout=30) == "closed"
    child.join(30)
    assert child.exitcode == 0
    assert list(tmp_path.iterdir()) == [], "no env was closed by the child"
    obs, *_ = envs.step(np.zeros(4, np.int64))
    np.testing.assert_array_equal(obs[:, 1], [1, 1, 1, 1])


def test_a_timeout_shorter_than_the_inline_share_raises_and_the_step_stays_pending(closing):
    # The inline share (envs 2, 3) sleeps 0.3 s each: a 0.05 s timeout cannot be met.
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(SlowEnv, i, 0.3) for i in range(4)],
                                          num_workers=1, inline=True))
    envs.reset(seed=0)
    envs.step_async(np.ones(4, np.int64))
    with pytest.raises(multiprocessing.TimeoutError):
        envs.step_wait(timeout=0.05)
    obs, rewards, *_ = envs.step_wait()  # the share is not stepped twice
    np.testing.assert_array_equal(obs[:, 1], [1, 1, 1, 1])
    np.testing.assert_array_equal(rewards, [1, 1, 1, 1])


class NappingEnv(SlowEnv):
    """A :class:`SlowEnv` whose ``nap()`` sleeps its ``delay`` too (a slow ``call``)."""

    def nap(self):
        time.sleep(self.delay)


@pytest.mark.parametrize("call", ["step", "call"])
def test_a_timeout_names_the_callers_seconds_not_what_the_share_left_of_them(closing, call):
    """The worker's envs (0, 1) sleep 600 s, the share's (2, 3) 0.2 s each: the wait times out
    (or the share alone outlasts the timeout, under load) and the error names the 1 s the caller
    gave, not what was left of it after the share ran."""
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(NappingEnv, i, 600.0 if i < 2 else 0.2) for i in range(4)],
                                          num_workers=1, inline=True))
    envs.reset(seed=0)
    if call == "step":
        envs.step_async(np.ones(4, np.int64))
        wait = envs.step_wait
    else:
        envs.call_async("nap")
        wait = envs.call_wait
    with pytest.raises(multiprocessing.TimeoutError, match=r"^timed out after 1 s waiting for envs "
                                                           r"(\[0, 1\] \(worker 0\)$|\[2, 3\], which this process)"):
        wait(timeout=1.0)
    envs.close(terminate=True)


def _never_built():
    raise AssertionError("an env was built for arguments that cannot work")


def test_bad_inline_values_are_refused_before_anything_starts():
    with pytest.raises(TypeError, match="inline must be None, True or False"):
        ringenv.AsyncVectorEnv([_never_built] * 2, inline="yes")
    with pytest.raises(ValueError, match=r"num_envs >= 3, got 2"):
        ringenv.AsyncVectorEnv([CounterEnv] * 2, num_workers=2, inline=True)


def test_the_default_plan_follows_the_cores():
    cores = usable_cores()
    processes, inline = plan_workers(16, None, None, "python", 16, None)
    if cores > 16:  # fewer envs than cores: a process per env, and a core left for this one
        assert (processes, inline) == (16, False)
    elif cores >= 2:
        assert (processes, inline) == (cores - 1, True)
    else:
        assert (processes, inline) == (0, True)
    assert plan_workers(16, None, False, "python", 16, None) == (min(16, cores), False)
    # an explicit count is that many processes stepping every env, unless inline=True
    assert plan_workers(16, 1, None, "python", 16, None) == (1, False)
    assert plan_workers(16, 3, True, "python", 16, None) == (3, True)
    # envs only a worker binary can run never step inline
    assert plan_workers(16, None, None, None, 16, None)[1] is False
    with pytest.raises(ValueError, match="worker binary"):
        plan_workers(16, None, True, None, 16, None)
    # one env: no process would be left beside the share
    assert plan_workers(1, None, None, "python", 1, None) == (1, False)
    # asked for on a single core: one process beside it
    assert plan_workers(4, None, True, "python", 4, None)[1] is True
    # num_workers=0: no process, every env inline (never for envs only a worker binary can run)
    assert plan_workers(4, 0, None, "rust", 4, None) == (0, True)
    assert plan_workers(1, 0, True, "python", 1, None) == (0, True)
    with pytest.raises(ValueError, match="worker binary"):
        plan_workers(4, 0, None, None, 4, None)


def test_the_default_share_is_taken_only_where_the_blocks_fill_the_cores():
    # 8 envs on 16 cores: a worker process per env, and this process keeps a core of its own
    assert plan_workers(8, None, None, "python", 8, None, cores=16) == (8, False)
    assert plan_workers(8, None, None, "rust", 8, None, cores=16) == (8, False)
    assert plan_workers(15, None, None, "python", 15, None, cores=16) == (15, False)
    # envs enough to fill the cores: the last block is this process's
    assert plan_workers(16, None, None, "python", 16, None, cores=16) == (15, True)
    assert plan_workers(64, None, None, "rust", 64, None, cores=16) == (15, True)
    assert plan_workers(3, None, None, "python", 3, None, cores=2) == (1, True)
    # max_concurrency below the cores leaves cores free: a process per block, no share
    assert plan_workers(64, None, None, "python", 64, 4, cores=16) == (4, False)
    # asked for, the share is taken whatever the cores
    assert plan_workers(8, None, True, "python", 8, None, cores=16) == (7, True)
    assert plan_workers(64, None, True, "python", 64, 4, cores=16) == (3, True)


def test_asynchronous_batches_take_no_share_by_default_on_two_cores_or_more():
    # 8 envs in batches of 4: two blocks of 4, both worker processes (the caller's time between
    # recv and send is its own), whatever the cores beyond 2
    for cores in (2, 3, 4, 16):
        processes, inline = plan_workers(8, None, None, "python", 4, None, cores=cores)
        assert inline is False and processes >= 2 and 4 % (8 // processes) == 0, (cores, processes)
    assert plan_workers(8, None, None, "rust", 4, None, cores=2) == (2, False)
    # asked for: the share is one of the blocks, as before
    assert plan_workers(8, None, True, "python", 4, None, cores=2) == (1, True)
    # a single core keeps one process and the share (two processes would share the one core)
    assert plan_workers(8, None, None, "python", 4, None, cores=1) == (1, True)
    # stepping every env per call keeps the share
    assert plan_workers(8, None, None, "python", 8, None, cores=2) == (1, True)


def test_the_default_asynchronous_vector_env_steps_every_env_in_worker_processes(closing):
    if usable_cores() < 2:
        pytest.skip("one usable core: the default keeps the share there (checked by the plan test above)")
    env = closing(ringenv.AsyncVectorEnv([CounterEnv] * 4, batch_size=2, deterministic=True))
    assert (env.num_workers, env.inline) == (2, False)
    env.async_reset(seed=0)
    seen = []
    for _ in range(4):
        _, _, _, _, infos = env.recv()
        seen.extend(infos["env_id"].tolist())
        env.send(np.ones(2, dtype=np.int64), infos["env_id"])
    assert sorted(seen) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_on_one_core_the_default_steps_every_env_in_this_process(closing, monkeypatch):
    import ringenv._plan

    monkeypatch.setattr(ringenv._plan, "usable_cores", lambda: 1)
    assert plan_workers(16, None, None, "python", 16, None) == (0, True)
    assert plan_workers(16, None, None, "rust", 16, None) == (0, True)
    # not for a worker binary's envs, nor with inline=False, an explicit count or async batches
    assert plan_workers(16, None, None, None, 16, None) == (1, False)
    assert plan_workers(16, None, False, "python", 16, None) == (1, False)
    assert plan_workers(16, 1, None, "python", 16, None) == (1, False)
    assert plan_workers(16, None, None, "python", 8, None) == (1, True)
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(CounterEnv, i) for i in range(3)]))
    assert (envs.num_workers, envs.inline) == (0, True) and envs._pool.worker_pids() == []
    envs.reset(seed=0)
    obs, *_ = envs.step(np.ones(3, np.int64))
    np.testing.assert_array_equal(obs, [[0, 1], [1, 1], [2, 1]])


def test_the_default_vector_env_uses_the_plan(closing):
    envs = closing(ringenv.AsyncVectorEnv([CounterEnv] * 4))
    assert (envs.num_workers, envs.inline) == plan_workers(4, None, None, "python", 4, None)
    assert len(envs._pool.worker_pids()) == envs.num_workers
    assert os.getpid() not in envs._pool.worker_pids()


def test_a_partial_reset_keeps_the_last_observations_of_the_inline_envs_not_reset(closing):
    # Gymnasium's own test_partial_reset, whose last env is the inline share's: an env outside the
    # reset mask keeps the observation of its last step (it used to read the slot of an older one).
    mode = gym.vector.AutoresetMode.DISABLED
    fns = [lambda: gym.make("CartPole-v1") for _ in range(3)]
    ours = closing(ringenv.AsyncVectorEnv(fns, num_workers=1, inline=True, autoreset_mode=mode))
    ref = closing(gym.vector.SyncVectorEnv(fns, autoreset_mode=mode))
    for envs in (ours, ref):
        envs.reset(seed=[0, 1, 2])
    for actions in ([0, 1, 1], [1, 1, 0], [0, 0, 1]):
        assert_step_identical(ours.step(np.array(actions)), ref.step(np.array(actions)))
    def mask():  # a dict each: reset pops "reset_mask" from it, as Gymnasium's does
        return {"reset_mask": np.array([True, True, False])}

    assert_vec_reset_identical(ours.reset(seed=[0, 1, 0], options=mask()), ref.reset(seed=[0, 1, 0], options=mask()))


def test_a_factory_failing_in_the_inline_share_is_a_startup_error_naming_the_env_and_nothing_is_left():
    before = psutil.Process().children(recursive=True)
    with pytest.raises(ringenv.errors.WorkerStartupError, match="factory of env 3 refuses to build") as info:
        ringenv.AsyncVectorEnv([functools.partial(failing_factory, i, 3) for i in range(4)], num_workers=1,
                               inline=True)
    assert str(info.value).startswith("env 3 (worker 1) failed to start")
    assert info.value.env_id == 3 and info.value.env_ids == (2, 3)
    assert isinstance(info.value.__cause__, ValueError)
    assert wait_new_children_gone({p.pid for p in before}, timeout=30) == set()
