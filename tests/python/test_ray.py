"""``ringenv.ray`` on a simulated two-node Ray cluster (``ray.cluster_utils.Cluster``: two nodes of
one CPU each, on this machine), started once for the module and shut down at its end, leaving no
process behind.

Ray is a test dependency (the ``test`` extra installs it): without it these tests fail, they are
not skipped, unless ``RINGENV_SKIP_RAY=1`` says to skip them.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
import warnings

import gymnasium as gym
import numpy as np
import psutil
import pytest

if os.environ.get("RINGENV_SKIP_RAY") == "1":
    pytest.skip("RINGENV_SKIP_RAY=1", allow_module_level=True)

import ray  # noqa: E402  (a missing ray fails the module: CI installs it)
from ray.cluster_utils import Cluster  # noqa: E402

import ringenv  # noqa: E402
import ringenv.ray  # noqa: E402
from ray_envs import BrokenFactoryError, ExitEnv, RaisingEnv, SlowRebuildEnv, WalkEnv, broken_env  # noqa: E402
from ringenv.errors import ActorDiedError, SeedError  # noqa: E402
from vec_asserts import (assert_infos_equal, assert_step_identical, assert_tree_identical, notes_by_env,  # noqa: E402
                         wait_pids_gone)

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples")
#: Bound on waits for processes to go (a hang guard, never a timing assertion).
GONE_S = 45.0


def assert_actor_gone(handle) -> None:
    """Ray reports the actor of ``handle`` dead: a call to it raises ``RayActorError``.
    ``ray.kill`` is asynchronous (a call made just after it may still run), so a call that
    returns is made again, until ``GONE_S`` (a hang guard)."""
    deadline = time.monotonic() + GONE_S
    while True:
        try:
            ray.get(handle.describe.remote(), timeout=max(1.0, deadline - time.monotonic()))
        except ray.exceptions.RayActorError:
            return
        assert time.monotonic() < deadline, f"{handle} still answers calls {GONE_S} s after it was stopped"
        time.sleep(0.1)


def walk_fns(n: int):
    return [WalkEnv for _ in range(n)]


def descendants(pid: int) -> set:
    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def pool_processes(envs) -> set:
    """The actors' processes and their ringenv worker processes (the actors run on this machine)."""
    pids = set()
    for info in envs.actor_info:
        pids.add(info["pid"])
        pids |= descendants(info["pid"])
    return pids


def _is_ray_or_ringenv(pid: int) -> bool:
    """Whether process ``pid`` is one of Ray's (raylet, GCS, workers, actors) or a ringenv worker,
    not some other library's helper (a multiprocessing resource tracker lives as long as pytest)."""
    try:
        process = psutil.Process(pid)
        text = " ".join([process.name(), *process.cmdline()])
    except psutil.Error:
        return False
    return "ray" in text or "ringenv" in text


@pytest.fixture(scope="module")
def cluster():
    """A Ray cluster of two nodes with one CPU each; the driver connected to it. At the end, every
    process it started (raylets, GCS, workers, actors) must be gone."""
    old = os.environ.get("PYTHONPATH")
    # ray_envs and the examples' modules, importable by name in the actors
    os.environ["PYTHONPATH"] = os.pathsep.join([HERE, EXAMPLES] + ([old] if old else []))
    node = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
    before = descendants(os.getpid())
    c = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    try:
        c.add_node(**node)
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        yield c
    finally:
        started = {p for p in descendants(os.getpid()) - before if _is_ray_or_ringenv(p)}
        ray.shutdown()
        c.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
        left = wait_pids_gone(started, GONE_S)
        assert not left, f"processes of the Ray test cluster left behind: {left}"


def test_two_nodes_one_actor_each(cluster):
    envs = ringenv.ray.make_vec("ringenv/CartPole-v1", 6)  # the id ringenv registers in Gymnasium
    try:
        assert envs.num_actors == 2  # one per alive node by default
        assert [i["env_ids"] for i in envs.actor_info] == [(0, 1, 2), (3, 4, 5)]
        assert len({i["node_id"] for i in envs.actor_info}) == 2  # SPREAD: one per node
        # an actor of one CPU steps its envs itself: no worker process below it
        assert [i["num_workers"] for i in envs.actor_info] == [[0], [0]]
        assert all(not descendants(i["pid"]) for i in envs.actor_info)
        assert envs.observation_space.shape == (6, 4) and envs.action_space.shape == (6,)
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (6, 4) and obs.dtype == np.float32 and obs.flags.writeable
    finally:
        envs.close()


def test_id_registered_in_the_driver_only(cluster):
    """An id registered with ringenv.register in the driver (the actors never registered it): its
    registered env kwargs reach the envs, its registered vector options the actors' pools."""
    ringenv.register("raytest/Walk-v0", "ray_envs:WalkEnv", kwargs={"block_s": 5.0, "num_workers": 1})
    envs = ringenv.ray.make_vec("raytest/Walk-v0", 4, num_actors=2)
    try:
        assert envs.get_attr("block_s") == (5.0,) * 4
        assert [i["num_workers"] for i in envs.actor_info] == [[1], [1]]
        assert envs.reset(seed=0)[0]["pos"].shape == (4, 2)
    finally:
        envs.close()


def test_gymnasiums_module_id_form(cluster):
    """"minigrid:Id", as gymnasium.make_vec takes it: the driver imports minigrid (which registers
    the id) and its spec reaches the actors; the batches equal a local pool's."""
    ours = ringenv.ray.make_vec("minigrid:MiniGrid-Empty-5x5-v0", 4, num_actors=2)
    local = ringenv.make_vec("minigrid:MiniGrid-Empty-5x5-v0", 4)
    try:
        assert_tree_identical(ours.reset(seed=3)[0], local.reset(seed=3)[0], "reset obs")
        for t in range(20):
            actions = np.full(4, t % 3)
            assert_step_identical(ours.step(actions), local.step(actions), f"step {t}")
    finally:
        ours.close()
        local.close()


def test_rust_env_identical_to_local_pool(cluster):
    """Built-in Rust CartPole: every step bit-identical to one local pool with the same seeds."""
    ours = ringenv.ray.make_vec("CartPole-v1", 8, num_actors=2)
    local = ringenv.make_vec("CartPole-v1", 8, vector_kwargs={"num_workers": 2})
    try:
        assert_tree_identical(ours.reset(seed=7)[0], local.reset(seed=7)[0], "reset obs")
        rng = np.random.default_rng(0)
        ended = 0
        for t in range(120):
            actions = rng.integers(0, 2, 8)
            got, want = ours.step(actions), local.step(actions)
            assert_step_identical(got, want, f"step {t}")
            ended += int(got[2].sum() + got[3].sum())
        assert ended > 0  # autoreset ran
    finally:
        ours.close()
        local.close()


def test_python_dict_env_identical_to_local_pool(cluster):
    """A Python env with a Dict observation and infos that differ per env and step: observations,
    rewards, flags and vectorised infos identical to a local pool, reset with a seed list and a
    reset mask included."""
    ours = ringenv.ray.make_vec(walk_fns(6), num_actors=2)
    local = ringenv.AsyncVectorEnv(walk_fns(6), num_workers=2)
    try:
        seeds = [11, 3, 5, 8, 13, 21]
        got, want = ours.reset(seed=seeds), local.reset(seed=seeds)
        assert_tree_identical(got[0], want[0], "reset obs")
        assert_infos_equal(got[1], want[1], "reset infos")
        rng = np.random.default_rng(1)
        for t in range(60):
            actions = rng.integers(0, 2, 6)
            assert_step_identical(ours.step(actions), local.step(actions), f"step {t}")
        mask = np.array([False, True, False, False, False, False])  # only actor 0's env 1
        got = ours.reset(seed=5, options={"reset_mask": mask.copy()})
        want = local.reset(seed=5, options={"reset_mask": mask.copy()})
        assert_tree_identical(got[0], want[0], "masked reset obs")
        assert_infos_equal(got[1], want[1], "masked reset infos")
        actions = rng.integers(0, 2, 6)
        assert_step_identical(ours.step(actions), local.step(actions), "step after masked reset")
        assert ours.get_attr("block_s") == local.get_attr("block_s")
    finally:
        ours.close()
        local.close()


def test_seeds_are_checked_and_passed_as_by_a_local_pool(cluster):
    """A bad seed is refused before any actor is sent anything, naming its env's index in the
    whole vector env; seeds of 2**64 or more reach the Python envs as a local pool passes them."""
    ours = ringenv.ray.make_vec(walk_fns(4), num_actors=2)
    local = ringenv.AsyncVectorEnv(walk_fns(4), num_workers=2)
    try:
        with pytest.raises(SeedError, match="the seed of env 3") as e:
            ours.reset(seed=[0, 1, 2, -1])  # env 3 is actor 1's
        assert e.value.env_id == 3
        with pytest.raises(SeedError, match="seed of env 1 must be None or a non-negative integer"):
            ours.reset(seed=[0, 1.5, 2, 3])
        seeds = [2**64 - 2, 2**70, 2**128 + 5, 7]
        got, want = ours.reset(seed=seeds), local.reset(seed=seeds)
        assert_tree_identical(got[0], want[0], "reset obs")
        rng = np.random.default_rng(2)
        for t in range(5):
            actions = rng.integers(0, 2, 4)
            assert_step_identical(ours.step(actions), local.step(actions), f"step {t}")
    finally:
        ours.close()
        local.close()


def _policy(env_id: int, t: int) -> int:
    return (env_id * 7 + t * 3) % 2


def _per_env_reference(n: int, seed: int, steps_per_env: int):
    """Each env's results when every env takes ``steps_per_env`` steps with action
    ``_policy(env, t)``: one local pool stepped synchronously."""
    local = ringenv.AsyncVectorEnv(walk_fns(n), num_workers=2)
    try:
        obs, _ = local.reset(seed=seed)
        seq = {i: [(obs["pos"][i].copy(), 0.0, False, False)] for i in range(n)}
        for t in range(steps_per_env):
            obs, r, te, tr, _ = local.step(np.array([_policy(i, t) for i in range(n)]))
            for i in range(n):
                seq[i].append((obs["pos"][i].copy(), float(r[i]), bool(te[i]), bool(tr[i])))
        return seq
    finally:
        local.close()


@pytest.mark.parametrize("deterministic", [False, True])
def test_async_batches_match_local_per_env(cluster, deterministic):
    """``batch_size`` half the envs: two blocks per actor, two calls in flight per actor; each
    batch is whole blocks named by ``infos["env_id"]``, and each env's own sequence of results
    is the one a local pool gives it."""
    n, steps = 8, 25
    envs = ringenv.ray.make_vec(walk_fns(n), num_actors=2, batch_size=4, deterministic=deterministic)
    try:
        assert envs.blocks_per_actor == 2
        envs.async_reset(seed=4)
        assert len(envs._inflight) == 4  # two calls in flight per actor
        seen = {i: [] for i in range(n)}
        t_of = {i: 0 for i in range(n)}
        sent_order = list(range(n))  # the blocks' order of sending
        while min(t_of.values()) <= steps:
            obs, r, te, tr, infos = envs.recv()
            ids = infos["env_id"]
            assert ids.dtype == np.int32 and ids.shape == (4,) and list(ids) == sorted(ids)
            assert sorted(set(i // 2 for i in ids)) == [ids[0] // 2, ids[-1] // 2]  # whole blocks of 2
            if deterministic:  # the earliest sent blocks
                assert sorted(int(i) for i in ids) == sorted(sent_order[:4])
            sent_order = sent_order[4:]
            assert obs["pos"].shape == (4, 2) and r.dtype == np.float64
            assert infos["steps" if "steps" in infos else "start"].shape == (4,)  # step or reset infos
            for row, i in enumerate(ids):
                seen[int(i)].append((obs["pos"][row].copy(), float(r[row]), bool(te[row]), bool(tr[row])))
            actions = np.array([_policy(int(i), t_of[int(i)]) for i in ids])
            for i in ids:
                t_of[int(i)] += 1
            # any order of ids is accepted: send them reversed
            envs.send(actions[::-1], ids[::-1])
            sent_order += sorted(int(i) for i in ids)
        with pytest.raises(ValueError, match="whole blocks"):
            envs.send(np.zeros(1, np.int64), [0])
    finally:
        envs.close()
    reference = _per_env_reference(n, 4, steps)
    for i in range(n):
        for t, (got, want) in enumerate(zip(seen[i][:steps + 1], reference[i])):
            assert np.array_equal(got[0], want[0]) and got[1:] == want[1:], f"env {i} step {t}: {got} != {want}"


def _kill_actor_mid_step(envs, actor: int):
    """Env 0 of ``actor``'s range blocks in its step (action 2); kills the actor's process while
    that call is in flight (it cannot have finished)."""
    actions = np.zeros(envs.num_envs, np.int64)
    actions[envs.actor_info[actor]["env_ids"][0]] = 2
    envs.step_async(actions)
    os.kill(envs.actor_info[actor]["pid"], signal.SIGKILL)


def test_actor_killed_mid_step_raises_typed_error(cluster):
    envs = ringenv.ray.make_vec(walk_fns(4), num_actors=2, vector_kwargs={"num_workers": 1})
    envs.reset(seed=0)
    info = dict(envs.actor_info[1])
    processes = pool_processes(envs)
    assert len(processes) >= 4  # two actors, each with its worker process
    _kill_actor_mid_step(envs, 1)
    with pytest.raises(ActorDiedError) as caught:
        envs.step_wait(timeout=40)
    e = caught.value
    assert isinstance(e, ringenv.errors.WorkerDiedError)
    assert (e.worker, e.env_ids, e.pid, e.node_id, e.node_ip) == (1, (2, 3), info["pid"], info["node_id"],
                                                                  info["node_ip"])
    assert f"pid {info['pid']}" in str(e) and "envs [2, 3]" in str(e)
    assert envs.closed
    with pytest.raises(gym.error.ClosedEnvironmentError):
        envs.step(np.zeros(4, np.int64))
    # the other actor was stopped too, and every worker process died with its actor
    assert not wait_pids_gone(processes, GONE_S)


def test_node_removed_mid_step_raises_typed_error(cluster):
    """A third node joins, an actor is placed on it (a custom resource only it has), and the node
    is removed while the actor's step is in flight: ActorDiedError naming that node."""
    # No CPU on it: no other test's actor can land there (nor on it while Ray still thinks it alive).
    node = cluster.add_node(num_cpus=0, resources={"victim": 1}, object_store_memory=80 * 2**20)
    node_id = node.node_id
    try:
        cluster.wait_for_nodes()
        envs = ringenv.ray.make_vec(walk_fns(2), num_actors=1,
                                    actor_options={"num_cpus": 0, "resources": {"victim": 1}})
        envs.reset(seed=0)
        assert envs.actor_info[0]["node_id"] == node.node_id
        envs.step_async(np.array([2, 0]))  # env 0 blocks in its step
        cluster.remove_node(node, allow_graceful=False)
        node = None
        with pytest.raises(ActorDiedError) as caught:
            envs.step_wait(timeout=55)
        assert caught.value.node_id == node_id and caught.value.env_ids == (0, 1)
        assert node_id[:12] in str(caught.value)
        assert envs.closed
    finally:
        if node is not None:
            cluster.remove_node(node)
        deadline = time.monotonic() + GONE_S  # until Ray has marked it dead (a hang guard)
        while time.monotonic() < deadline and any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes()):
            time.sleep(0.2)


def test_actor_killed_mid_step_is_restarted(cluster):
    envs = ringenv.ray.make_vec(walk_fns(4), num_actors=2, on_actor_failure="restart")
    try:
        envs.reset(seed=0)
        old_pid = envs.actor_info[0]["pid"]
        _kill_actor_mid_step(envs, 0)
        with pytest.warns(UserWarning, match="restarted"):
            obs, r, te, tr, infos = envs.step_wait(timeout=60)
        assert tr.tolist() == [True, True, False, False] and not te[:2].any()
        assert r[:2].tolist() == [0.0, 0.0]
        assert infos["actor_restarted"].tolist() == [True, True, False, False]
        assert infos["_actor_restarted"].tolist() == [True, True, False, False]
        assert obs["steps"][:2].tolist() == [0, 0] and obs["steps"][2:].tolist() == [1, 1]  # reset / stepped
        assert envs.actor_info[0]["pid"] != old_pid
        for _ in range(3):  # and the run goes on
            obs, r, te, tr, infos = envs.step(np.ones(4, np.int64))
            assert "actor_restarted" not in infos and obs["steps"].shape == (4,)
    finally:
        envs.close()


def _time_out_until_the_restart(wait, actor: int):
    """Calls ``wait(timeout=0.5)`` (each must raise ``multiprocessing.TimeoutError``) until one
    says that ``actor`` is being restarted (the rebuild's sleep starts once Ray has seen the
    death), at most 120 times."""
    messages = []
    for _ in range(120):
        with pytest.raises(multiprocessing.TimeoutError) as caught:
            wait(timeout=0.5)
        messages.append(str(caught.value))
        if "being restarted" in messages[-1]:
            break
    assert "being restarted" in messages[-1] and f"actor {actor}" in messages[-1], messages


def test_a_wait_shorter_than_an_actors_restart_times_out_and_the_step_stays_pending(cluster, tmp_path):
    """Under ``on_actor_failure="restart"`` the caller's ``timeout`` bounds the wait for a
    restarted actor too: while actor 0 is rebuilt (its envs' construction sleeps 8 s once it is
    restarted), ``step_wait(timeout=0.5)`` raises ``multiprocessing.TimeoutError`` saying so and
    the step stays pending; a later wait returns it, actor 0's envs reset and truncated, actor 1's
    stepped once."""
    marker = tmp_path / "rebuild-slowly"
    fns = [functools.partial(SlowRebuildEnv, str(marker), 8.0) for _ in range(4)]
    envs = ringenv.ray.make_vec(fns, num_actors=2, on_actor_failure="restart")
    try:
        envs.reset(seed=0)
        marker.touch()  # from now on, a rebuilt actor takes 8 s to come back
        _kill_actor_mid_step(envs, 0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the restart's warning
            _time_out_until_the_restart(envs.step_wait, 0)
            obs, r, te, tr, infos = envs.step_wait(timeout=60)
        assert tr.tolist() == [True, True, False, False] and not te[:2].any()
        assert infos["actor_restarted"].tolist() == [True, True, False, False]
        assert obs["steps"][:2].tolist() == [0, 0] and obs["steps"][2:].tolist() == [1, 1]
        obs, *_ = envs.step(np.ones(4, np.int64))  # and the run goes on
        assert obs["steps"][:2].tolist() == [1, 1]
    finally:
        envs.close()


@pytest.mark.parametrize("max_restarts", [0, 1])
def test_actor_restarts_used_up_raise_typed_error(cluster, max_restarts):
    """``on_actor_failure="restart"`` with ``max_actor_restarts=N``: the first N deaths of actor 0
    are survived (its envs reset, reported truncated); death N + 1, more than Ray grants, ends
    the step in ActorDiedError naming the actor, its node and its env ids, within the caller's
    timeout (never a hang), and the vector env is closed; close() again leaves no actor or worker
    process behind."""
    envs = ringenv.ray.make_vec(walk_fns(4), num_actors=2, on_actor_failure="restart",
                                max_actor_restarts=max_restarts)
    handles = list(envs._actors)
    try:
        envs.reset(seed=0)
        processes = pool_processes(envs)
        for restart in range(max_restarts):
            old_pid = envs.actor_info[0]["pid"]
            _kill_actor_mid_step(envs, 0)
            with pytest.warns(UserWarning, match="restarted"):
                tr = envs.step_wait(timeout=60)[3]
            assert tr.tolist() == [True, True, False, False], f"restart {restart}"
            assert envs.actor_info[0]["pid"] != old_pid
            processes |= pool_processes(envs)  # the new actor and its worker
        info = dict(envs.actor_info[0])
        _kill_actor_mid_step(envs, 0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "died and is restarted": Ray is asked, and refuses
            with pytest.raises(ActorDiedError) as caught:
                envs.step_wait(timeout=60)
        e = caught.value
        assert (e.worker, e.env_ids, e.pid, e.actor_id, e.node_id, e.node_ip) == (
            0, (0, 1), info["pid"], info["actor_id"], info["node_id"], info["node_ip"])
        assert "could not be restarted" in str(e) and "envs [0, 1]" in str(e) and info["node_id"][:12] in str(e)
        assert envs.closed
        with pytest.raises(gym.error.ClosedEnvironmentError):
            envs.step(np.zeros(4, np.int64))
    finally:
        envs.close()
    assert not wait_pids_gone(processes, GONE_S)  # both actors (each incarnation) and their workers
    for handle in handles:  # dead in Ray's view, not waiting for a restart
        assert_actor_gone(handle)


def test_actor_killed_with_async_batches_is_restarted(cluster):
    """Asynchronous batches under ``"restart"``: actor 0 is killed while its two blocks are in
    flight (one blocked in a step). Each of its envs is reported reset (truncated, with
    ``actor_restarted``) exactly once, on the recv of a failed block or, for a block whose results
    had come back, on the recv after its next send; actor 1's envs never are."""
    envs = ringenv.ray.make_vec(walk_fns(8), num_actors=2, batch_size=4, deterministic=True,
                                on_actor_failure="restart")
    try:
        envs.async_reset(seed=0)
        restarted = {i: 0 for i in range(8)}
        ids = envs.recv()[4]["env_id"]
        assert ids.tolist() == [0, 1, 2, 3]  # actor 0's blocks (deterministic: the earliest sent)
        actions = np.zeros(4, np.int64)
        actions[0] = 2  # env 0 blocks in its step
        envs.send(actions, ids)
        os.kill(envs.actor_info[0]["pid"], signal.SIGKILL)
        for _ in range(6):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the restart's warning, on whichever recv sees it
                obs, r, te, tr, infos = envs.recv(timeout=60)
            ids = infos["env_id"]
            if "actor_restarted" in infos:
                for row, i in enumerate(ids):
                    if infos["actor_restarted"][row]:
                        restarted[int(i)] += 1
                        assert tr[row] and not te[row] and r[row] == 0.0 and obs["steps"][row] == 0
            envs.send(np.zeros(len(ids), np.int64), ids)
        assert restarted == {0: 1, 1: 1, 2: 1, 3: 1, 4: 0, 5: 0, 6: 0, 7: 0}
    finally:
        envs.close()


def test_a_recv_shorter_than_an_actors_restart_times_out_and_keeps_the_batch(cluster, tmp_path):
    """Asynchronous batches: ``recv(timeout=...)`` keeps to the caller's timeout while an actor is
    restarted. Actor 0 (blocks 0 and 1, one env each) is killed mid-step and takes 8 s to come
    back; a ``recv(timeout=0.5)`` that takes its blocks raises ``multiprocessing.TimeoutError``
    naming the restart, nothing is lost: a later ``recv`` returns envs 0 and 1 reset and
    truncated, and the run goes on."""
    marker = tmp_path / "rebuild-slowly"
    fns = [functools.partial(SlowRebuildEnv, str(marker), 8.0) for _ in range(4)]
    envs = ringenv.ray.make_vec(fns, num_actors=2, batch_size=2, deterministic=True, on_actor_failure="restart")
    try:
        envs.async_reset(seed=0)
        assert envs.recv(timeout=60)[4]["env_id"].tolist() == [0, 1]
        assert envs.recv(timeout=60)[4]["env_id"].tolist() == [2, 3]
        marker.touch()  # from now on, a rebuilt actor takes 8 s to come back
        envs.send(np.array([2, 0]), [0, 1])  # env 0 blocks in its step
        os.kill(envs.actor_info[0]["pid"], signal.SIGKILL)
        envs.send(np.zeros(2, np.int64), [2, 3])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the restart's warning
            _time_out_until_the_restart(envs.recv, 0)  # deterministic: blocks 0 and 1 come first
            with pytest.raises(gym.error.AlreadyPendingCallError):
                envs.step(np.zeros(4, np.int64))  # the batch is still in flight
            obs, r, te, tr, infos = envs.recv(timeout=60)
        assert infos["env_id"].tolist() == [0, 1]
        assert tr.tolist() == [True, True] and not te.any() and r.tolist() == [0.0, 0.0]
        assert infos["actor_restarted"].tolist() == [True, True] and obs["steps"].tolist() == [0, 0]
        obs, r, te, tr, infos = envs.recv(timeout=60)  # actor 1's, stepped once
        assert infos["env_id"].tolist() == [2, 3] and obs["steps"].tolist() == [1, 1]
        envs.send(np.ones(2, np.int64), [0, 1])
        obs, *_, infos = envs.recv(timeout=60)
        assert infos["env_id"].tolist() == [0, 1] and obs["steps"].tolist() == [1, 1]
    finally:
        envs.close()


@pytest.mark.parametrize("how", ["copy.copy", "copy.deepcopy", "pickle.dumps"])
def test_copies_are_refused_and_the_env_keeps_working(cluster, how):
    import copy
    import pickle

    envs = ringenv.ray.make_vec(walk_fns(2), num_actors=1, vector_kwargs={"num_workers": 1})
    try:
        envs.reset(seed=0)
        with pytest.raises(TypeError, match="RayVectorEnv cannot be copied or pickled"):
            {"copy.copy": copy.copy, "copy.deepcopy": copy.deepcopy, "pickle.dumps": pickle.dumps}[how](envs)
        envs.step(np.zeros(2, np.int64))
    finally:
        envs.close()


def test_close_leaves_no_actor_or_worker(cluster):
    envs = ringenv.ray.make_vec(walk_fns(4), num_actors=2, vector_kwargs={"num_workers": 1})
    envs.reset(seed=0)
    envs.step(np.zeros(4, np.int64))
    processes = pool_processes(envs)
    workers = processes - {i["pid"] for i in envs.actor_info}
    assert len(workers) >= 2  # each actor's ringenv worker
    handles = list(envs._actors)
    envs.close()
    assert envs.closed
    assert not wait_pids_gone(processes, GONE_S)
    for handle in handles:  # dead in Ray's view too
        assert_actor_gone(handle)
    with pytest.raises(gym.error.ClosedEnvironmentError):
        envs.reset()


@pytest.mark.parametrize("call", ["step", "recv"])
def test_close_from_another_thread_ends_a_call_waiting_there_as_closed(cluster, call):
    """Thread A waits on the actors (``step``, or ``recv``) while env 0's step blocks (action 2);
    the main thread closes the env. A's call raises ``ClosedEnvironmentError``, as a local vector
    env's does (it used to fail with the ``KeyError`` or ``IndexError`` of the state ``close``
    cleared, or the killed actor's error), and no actor or worker is left."""
    batched = call == "recv"
    # deterministic: recv returns blocks in send order, so which recv waits does not depend on timing
    envs = ringenv.ray.make_vec(walk_fns(4), num_actors=2, batch_size=2 if batched else None,
                                deterministic=batched, vector_kwargs={"num_workers": 1})
    processes = pool_processes(envs)
    actions = np.array([2, 0, 0, 0])  # env 0 (actor 0) blocks for 600 s
    if batched:
        envs.async_reset(seed=0)
        for _ in range(2):  # envs 0 and 1, then 2 and 3: each reset received, each sent a step
            _, _, _, _, infos = envs.recv(timeout=60)
            envs.send(actions[infos["env_id"]], infos["env_id"])
        # the next recv (thread A's) is of envs 0 and 1, and env 0's step blocks
    else:
        envs.reset(seed=0)
    outcome = {}

    def run():
        try:
            outcome["value"] = envs.recv() if batched else envs.step(actions)
        except BaseException as e:
            outcome["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    if not batched:
        deadline = time.monotonic() + GONE_S
        while envs._state != ringenv.vector.AsyncState.WAITING_STEP:  # A sent its step
            assert time.monotonic() < deadline and thread.is_alive(), outcome
            time.sleep(0.01)
    envs.close(timeout=0.5)
    thread.join(GONE_S)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), gym.error.ClosedEnvironmentError), outcome
    assert envs.closed
    assert not wait_pids_gone(processes, GONE_S)


@pytest.mark.parametrize("vector_kwargs, error, match", [
    ({"num_worker": 1}, TypeError, r"vector_kwargs\['num_worker'\].*did you mean 'num_workers'"),
    ({"num_workers": -1}, ValueError, r"num_workers must be an integer from 0 to num_envs \(4\), got -1"),
    ({"spin_us": -5}, ValueError, r"spin_us must be None or a number of microseconds .* got -5"),
])
def test_bad_vector_kwargs_are_refused_before_any_actor_starts(cluster, no_actor_may_start, vector_kwargs, error,
                                                                match):
    """The local pool's own checks of its options, with the caller's numbers (num_envs=4, not an
    actor's block of 2), in the driver: an actor never starts to refuse them (or, when it cannot
    be placed, to end as a startup timeout)."""
    with pytest.raises(error, match=match):
        ringenv.ray.make_vec("CartPole-v1", 4, num_actors=2, vector_kwargs=vector_kwargs)


def test_an_env_raising_in_a_batch_raises_once_and_the_next_recv_returns_the_next_batch(cluster):
    """Both envs of a batch (one block each, in two actors) raise in their step: ``recv`` raises the
    env's exception once and drops the batch, as a local pool does; the next ``recv`` returns the
    next batch, and the failed batch's envs can be sent actions again."""
    envs = ringenv.ray.make_vec([RaisingEnv] * 4, num_actors=2, batch_size=2, deterministic=True)
    try:
        envs.async_reset(seed=0)
        first = envs.recv(timeout=60)[4]["env_id"]
        second = envs.recv(timeout=60)[4]["env_id"]
        assert (first.tolist(), second.tolist()) == ([0, 1], [2, 3])  # deterministic: in send order
        envs.send(np.ones(2, np.int64), first)  # action 1: both envs raise
        envs.send(np.zeros(2, np.int64), second)
        with pytest.raises(ValueError, match="refuses action 1") as caught:
            envs.recv(timeout=60)
        assert caught.value.env_id == 0 and sorted(notes_by_env(caught.value)) == [1]  # env 1's error too
        assert envs.recv(timeout=60)[4]["env_id"].tolist() == [2, 3]
        envs.send(np.zeros(2, np.int64), first)
        assert envs.recv(timeout=60)[4]["env_id"].tolist() == [0, 1]
    finally:
        envs.close()


def test_ray_shutdown_while_open_closes_the_env_and_starts_no_ray(cluster):
    """``ray.shutdown()`` with a vector env open: its next call raises ``ClosedEnvironmentError``
    naming the shutdown, the env is closed, and neither that call nor ``close`` starts a new local
    Ray (an actor call would). The driver then reconnects to the test cluster."""
    envs = ringenv.ray.make_vec(walk_fns(4), num_actors=2)
    envs.reset(seed=0)
    processes = pool_processes(envs)
    ray.shutdown()
    try:
        with pytest.raises(gym.error.ClosedEnvironmentError, match=r"ray\.shutdown\(\)"):
            envs.step(np.zeros(4, np.int64))
        assert envs.closed and not ray.is_initialized()
        with pytest.raises(gym.error.ClosedEnvironmentError):
            envs.reset()
        envs.close()
        assert not ray.is_initialized()
        assert not wait_pids_gone(processes, GONE_S)  # the actors went with the driver's job
    finally:
        ray.shutdown()  # nothing to do, unless a call started a local Ray
        ray.init(address=cluster.address, log_to_driver=False)


def test_ray_shut_down_and_started_again_closes_the_env_with_its_error(cluster):
    """``ray.shutdown()`` then ``ray.init()`` again (to the same cluster: a new job) with a vector
    env open: its actors ended with the old job, so its next call raises ``ClosedEnvironmentError``
    naming the shutdown (before: Ray's bare ``Exception`` "Can't find actor"), and ``close``
    returns."""
    envs = ringenv.ray.make_vec(walk_fns(4), num_actors=2)
    envs.reset(seed=0)
    processes = pool_processes(envs)
    ray.shutdown()
    ray.init(address=cluster.address, log_to_driver=False)
    with pytest.raises(gym.error.ClosedEnvironmentError, match=r"ray\.shutdown\(\).*started again"):
        envs.step(np.zeros(4, np.int64))
    assert envs.closed
    envs.close()
    assert not wait_pids_gone(processes, GONE_S)
    fresh = ringenv.ray.make_vec(walk_fns(4), num_actors=2)  # the new job's actors work
    try:
        fresh.reset(seed=0)
        assert fresh.step(np.zeros(4, np.int64))[1].shape == (4,)
    finally:
        fresh.close()


def test_bad_arguments_are_refused_before_actors_start(cluster):
    with pytest.raises(ValueError, match="multiple of the envs per block"):
        ringenv.ray.make_vec("CartPole-v1", 8, num_actors=2, batch_size=3)
    with pytest.raises(ValueError, match="on_actor_failure"):
        ringenv.ray.make_vec("CartPole-v1", 4, on_actor_failure="ignore")
    with pytest.raises(gym.error.Error):
        ringenv.ray.make_vec("NoSuchEnv-v0", 4)


# -- device: NumPy results only; a GPU device is refused before any actor starts ------------------


@pytest.fixture
def no_actor_may_start(monkeypatch):
    """Makes creating the Ray vector env (where its actors start) fail the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("an actor was about to start although the arguments were refused")

    monkeypatch.setattr(ringenv.ray, "RayVectorEnv", refuse)


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "tpu"])
def test_a_device_other_than_cpu_is_refused_before_any_actor_starts(cluster, no_actor_may_start, device):
    with pytest.raises(ValueError, match=r"ringenv.ray returns NumPy batches; move them to the learner's device"):
        ringenv.ray.make_vec("CartPole-v1", 4, vector_kwargs={"device": device})


def test_device_cpu_is_numpy_and_torch_actions_are_accepted(cluster):
    """``device="cpu"``: NumPy results as without it; torch CPU tensors as actions give the
    results NumPy actions give."""
    torch = pytest.importorskip("torch", reason="torch is part of the test set-up (pip install .[test])")
    ours = ringenv.ray.make_vec("CartPole-v1", 8, num_actors=2, vector_kwargs={"device": "cpu"})
    local = ringenv.make_vec("CartPole-v1", 8, vector_kwargs={"num_workers": 2})
    try:
        assert_tree_identical(ours.reset(seed=2)[0], local.reset(seed=2)[0], "reset obs")
        for t in range(30):
            actions = np.array([(t + i) % 2 for i in range(8)])
            got = ours.step(torch.from_numpy(actions))
            assert isinstance(got[0], np.ndarray)
            assert_step_identical(got, local.step(actions), f"step {t}")
    finally:
        ours.close()
        local.close()


@pytest.mark.parametrize("vector_kwargs", [{}, {"num_workers": 1}])
def test_a_factory_raising_in_an_actor_is_a_startup_error_naming_the_actor_and_its_envs(cluster, vector_kwargs):
    """A factory that raises in actor 1 (envs 2 and 3), in the actor process itself (one CPU: no
    worker process) or in a worker process: ``WorkerStartupError`` as a local pool raises, naming
    the actor and the global env ids, the factory's own exception as ``__cause__``."""
    with pytest.raises(ringenv.errors.WorkerStartupError) as caught:
        ringenv.ray.make_vec([WalkEnv, WalkEnv, WalkEnv, broken_env], num_actors=2, vector_kwargs=vector_kwargs)
    error = caught.value
    assert (error.worker, error.env_ids) == (1, (2, 3))
    assert "ringenv.ray actor 1 (envs [2, 3]) failed to start" in str(error) and "always fails" in str(error)
    assert "envs [0, 1]" not in str(error)  # no block-local numbers
    assert isinstance(error.__cause__, BrokenFactoryError)
    assert "broken_env" in error.remote_traceback


def test_a_factory_whose_module_the_actors_cannot_import_is_a_startup_error_naming_it(cluster, tmp_path):
    """Env factories from a module the driver imports but the nodes cannot (not on their path):
    ``WorkerStartupError`` naming the module and saying it must be importable on every node, the
    ``ModuleNotFoundError`` as ``__cause__`` (it used to be Ray's own ``ActorDiedError``)."""
    (tmp_path / "ringenv_driver_only_envs.py").write_text("from ray_envs import WalkEnv\n\n\n"
                                                          "class DriverOnlyEnv(WalkEnv):\n    pass\n")
    sys.path.insert(0, str(tmp_path))  # the driver's path only: the actors' processes are started already
    try:
        import ringenv_driver_only_envs

        with pytest.raises(ringenv.errors.WorkerStartupError) as caught:
            ringenv.ray.make_vec([ringenv_driver_only_envs.DriverOnlyEnv] * 4, num_actors=2)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("ringenv_driver_only_envs", None)
    error = caught.value
    assert isinstance(error.__cause__, ModuleNotFoundError)
    assert "No module named 'ringenv_driver_only_envs'" in str(error)
    assert "importable on every node" in str(error)
    assert error.worker == 0 and error.env_ids == (0, 1)


def test_errors_of_envs_reach_the_caller_as_themselves(cluster):
    """An env that raises in a step: its own exception with the worker's traceback as __cause__,
    as locally."""
    envs = ringenv.ray.make_vec([RaisingEnv] * 4, num_actors=2)
    try:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="refuses action 1") as caught:
            envs.step(np.array([0, 0, 0, 1]))
        assert isinstance(caught.value.__cause__, ringenv.errors.RemoteTraceback)
        assert "RaisingEnv" in str(caught.value.__cause__)
    finally:
        envs.close()


def test_envs_raising_in_two_blocks_of_two_actors_raise_the_first_with_the_others_as_notes(cluster):
    """Envs 0, 2 and 3 raise in one step; each env is a block of its own, two blocks per actor. The
    lowest env id's error is raised, the others' are notes naming their global env ids (env 3's is
    a note of actor 1's error, made global there), and every block was waited for, so the vector
    env steps on, as a local one does after an env's error."""
    envs = ringenv.ray.make_vec([RaisingEnv] * 4, num_actors=2, blocks_per_actor=2,
                                vector_kwargs={"num_workers": 1})
    try:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="refuses action 1") as caught:
            envs.step(np.array([1, 0, 1, 1]))
        assert caught.value.env_id == 0
        notes = notes_by_env(caught.value)
        assert sorted(notes) == [2, 3]
        for note in notes.values():
            assert "Traceback (most recent call last)" in note and note.rstrip().endswith("refuses action 1"), note
        obs = envs.step(np.zeros(4, np.int64))[0]
        assert obs["steps"].tolist() == [1, 2, 1, 1] and not envs.closed  # env 1 had stepped in the failed call
    finally:
        envs.close()


def test_worker_death_inside_an_actor_keeps_local_behaviour(cluster):
    """A ringenv worker process exiting inside actor 1 (local ``on_worker_failure="raise"``): the
    local WorkerDiedError reaches the caller, its env ids made global, and everything is closed."""
    envs = ringenv.ray.make_vec([ExitEnv] * 4, num_actors=2, vector_kwargs={"num_workers": 1})
    envs.reset(seed=0)
    processes = pool_processes(envs)
    with pytest.raises(ringenv.errors.WorkerDiedError) as caught:
        envs.step(np.array([0, 0, 0, 1]))
    assert not isinstance(caught.value, ActorDiedError)
    assert caught.value.env_ids == (2, 3) and caught.value.exitcode == 3
    # the message names the actor and the global env ids, as the attribute does
    assert str(caught.value).startswith(f"ringenv.ray actor 1 (pid {envs.actor_info[1]['pid']} "), str(caught.value)
    assert "envs [2, 3]) died" in str(caught.value), str(caught.value)
    assert envs.closed
    assert not wait_pids_gone(processes, GONE_S)


def test_an_env_ending_a_one_cpu_actors_process_is_that_actors_death(cluster):
    """By default an actor of one CPU steps its envs itself (no worker process): an env that ends
    the process (``os._exit``) ends the actor, which is an ActorDiedError naming it and its env ids,
    and everything is closed."""
    envs = ringenv.ray.make_vec([ExitEnv] * 4, num_actors=2)
    envs.reset(seed=0)
    info = dict(envs.actor_info[1])
    assert info["num_workers"] == [0]
    processes = pool_processes(envs)
    with pytest.raises(ActorDiedError) as caught:
        envs.step(np.array([0, 0, 0, 1]))
    assert (caught.value.worker, caught.value.env_ids, caught.value.pid) == (1, (2, 3), info["pid"])
    assert envs.closed
    assert not wait_pids_gone(processes, GONE_S)


def test_rllib_path_vector_entry_point_in_an_actor(cluster):
    """What an RLlib env runner does with ``gym_env_vectorize_mode="vector_entry_point"``: in a
    Ray actor, ``gymnasium.make_vec`` of ringenv's registered id builds a local ringenv pool
    (RLlib itself is not installed by the test extra: it pins an older Gymnasium)."""

    @ray.remote(num_cpus=1)
    def runner():
        import gymnasium
        import ringenv  # noqa: F401  (registers ringenv/CartPole-v1, as the env runner's import does)

        envs = gymnasium.make_vec("ringenv/CartPole-v1", 4, vectorization_mode="vector_entry_point",
                                  num_workers=1)
        try:
            obs, _ = envs.reset(seed=3)
            obs2 = envs.step(np.ones(4, np.int64))[0]
            return type(envs).__module__ + "." + type(envs).__name__, obs, obs2
        finally:
            envs.close()

    kind, obs, obs2 = ray.get(runner.remote(), timeout=120)
    local = ringenv.make_vec("CartPole-v1", 4, vector_kwargs={"num_workers": 1})
    try:
        assert kind == "ringenv.vector.AsyncVectorEnv"
        assert np.array_equal(obs, local.reset(seed=3)[0])
        assert np.array_equal(obs2, local.step(np.ones(4, np.int64))[0])
    finally:
        local.close()


def test_import_ringenv_does_not_import_ray():
    code = "import sys, ringenv, ringenv.registration, ringenv.vector; assert 'ray' not in sys.modules, 'ray imported'; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_torchrl_ray_collector_with_ringenv_parallel_env(cluster):
    """examples/ray_torchrl_collector.py: TorchRL's RayCollector, two remote collectors (one per
    node), each stepping a ringenv.torchrl.ParallelEnv."""
    sys.path.insert(0, EXAMPLES)
    try:
        import ray_torchrl_collector
    finally:
        sys.path.remove(EXAMPLES)
    assert ray_torchrl_collector.main(num_collectors=2, frames_per_batch=32, total_frames=64) == 64


def test_module_docstring_example_runs():
    """ringenv.ray's docstring example, which starts (and stops) its own local Ray, in a fresh
    interpreter (this module's cluster is connected here)."""
    code = ("import doctest, ringenv.ray; r = doctest.testmod(ringenv.ray); "
            "print(r.attempted, r.failed); assert r.attempted and not r.failed")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "RAY_ADDRESS": "local"})  # a new local Ray, not the test cluster
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.parametrize("cpus, can_inline, given, expected", [
    (16, True, {}, (15, True)),  # N CPUs: N - 1 worker processes and the actor's own block
    (1, True, {}, (0, True)),  # one CPU: no worker process
    (16, False, {}, (16, False)),  # a worker binary's envs: processes only
    (1, False, {}, (1, False)),
    (16, True, {"inline": False}, (16, False)),
    (16, True, {"num_workers": 3}, (3, None)),  # an explicit count is kept as given
])
def test_an_actors_pools_are_planned_as_a_local_default_pool_on_its_cpus(monkeypatch, cpus, can_inline, given,
                                                                         expected):
    import ringenv.ray._build as build

    monkeypatch.setattr(build, "workers_here", lambda num_envs, share: min(num_envs, cpus))
    opts = build._options(given, 32, 1, can_inline)
    assert (opts["num_workers"], opts.get("inline")) == expected
