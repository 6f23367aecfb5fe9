"""EnvPool-style asynchronous batches: ``async_reset`` / ``send`` / ``recv`` with
``batch_size < num_envs``: every env's result comes back exactly once with the right env ids,
results equal in-process envs stepped with the same actions (autoreset included),
``deterministic=True`` replays exactly, and misuse is refused before anything is sent."""

from __future__ import annotations

import functools
from copy import deepcopy
import os
import signal

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.error import AlreadyPendingCallError
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, iterate
from helper_envs import ColourSpace, JitterEnv, SpaceEnv
from vec_asserts import assert_tree_identical, child_pids

from ringenv import AsyncVectorEnv, make_vec
from ringenv._batches import default_async_workers

N, WORKERS, BATCH = 8, 4, 4  # 2 envs per worker, 2 workers per batch


def jitter(closing, **kwargs):
    kwargs.setdefault("num_workers", WORKERS)
    kwargs.setdefault("batch_size", BATCH)
    return closing(AsyncVectorEnv([JitterEnv] * N, **kwargs))


def action_of(env_id: int, count: int) -> int:
    return (env_id * 7 + count * 3) % 4


class Reference:
    """In-process JitterEnvs stepped with next-step autoreset, as a worker steps them."""

    def __init__(self, seed: int):
        self.envs = [JitterEnv() for _ in range(N)]
        self.first = [e.reset(seed=seed + i) for i, e in enumerate(self.envs)]
        self.done = [False] * N

    def step(self, i: int, action: int):
        if self.done[i]:
            self.done[i] = False
            obs, info = self.envs[i].reset()
            return obs, 0.0, False, False, info
        obs, reward, terminated, truncated, info = self.envs[i].step(action)
        self.done[i] = terminated or truncated
        return obs, reward, terminated, truncated, info


def run(env, rounds: int, seed: int = 10, reorder=None, recv=None, send=None):
    """Drives ``rounds`` recv/send rounds, checking every result against the reference; returns
    the sequence of batches' env ids. ``reorder(ids)`` gives the env ids each send names, with
    their actions in that order (default: the array recv returned); ``recv()`` and
    ``send(actions, ids)`` replace the env's own."""
    recv = recv or (lambda: env.recv(timeout=30))
    send = send or env.send
    ref = Reference(seed)
    env.async_reset(seed=seed)
    sent = {}  # env id -> the expected result of what was sent to it
    for i in range(N):
        obs, info = ref.first[i]
        sent[i] = (obs, 0.0, False, False, info)
    steps = np.zeros(N, int)
    order = []
    for _ in range(rounds):
        obs, rewards, terminated, truncated, infos = recv()
        ids = infos["env_id"]
        assert ids.dtype == np.int32 and ids.shape == (BATCH,)
        assert obs.shape == (BATCH, 4) and rewards.dtype == np.float64 and terminated.dtype == np.bool_
        order.append(tuple(int(i) for i in ids))
        for k, i in enumerate(ids):
            want_obs, want_reward, want_term, want_trunc, want_info = sent.pop(int(i))
            np.testing.assert_array_equal(obs[k], want_obs, err_msg=f"env {i}")
            assert (rewards[k], terminated[k], truncated[k]) == (want_reward, want_term, want_trunc), f"env {i}"
            assert infos["count"][k] == want_info["count"] and infos["_count"][k]
        actions = np.array([action_of(int(i), steps[i]) for i in ids])
        for i, a in zip(ids, actions):
            sent[int(i)] = ref.step(int(i), int(a))
            steps[i] += 1
        if reorder is None:
            send(actions, ids)
        else:
            by_id = dict(zip(ids.tolist(), actions.tolist()))
            send_ids = reorder(ids)
            send(np.array([by_id[int(i)] for i in send_ids]), send_ids)
    # Nothing lost, nothing twice: exactly the envs not returned by the last recv are in flight,
    # and receiving them drains the pool.
    rest = []
    while sent:
        _, _, _, _, infos = recv()
        for i in infos["env_id"]:
            assert int(i) in sent, f"env {i} came back twice"
            sent.pop(int(i))
            rest.append(int(i))
    assert sorted(rest) == list(range(N))
    return order


def test_every_result_comes_back_once_and_equals_the_in_process_env(closing):
    env = jitter(closing)
    order = run(env, rounds=150)
    for batch in order:  # whole workers: pairs (2w, 2w + 1), ascending
        assert list(batch) == sorted(batch)
        assert all(batch[j] % 2 == 0 and batch[j + 1] == batch[j] + 1 for j in range(0, BATCH, 2))
    # Episodes ended and were reset on the way (the reference asserts the reset rows).
    assert len(set(order)) > 1


@pytest.mark.parametrize("reorder", [lambda ids: ids.tolist(), lambda ids: ids[::-1].copy(),
                                     lambda ids: np.concatenate([ids[2:], ids[:2]])],
                         ids=["a new list in recv's order", "reversed", "workers swapped"])
def test_send_takes_the_env_ids_of_whole_workers_in_any_order(closing, reorder):
    """Each env gets the action given beside its id, whatever the order of the ids a send names
    (recv's own array, a copy of it, envs reversed within and across workers, workers swapped)."""
    run(jitter(closing), rounds=60, reorder=reorder)


def test_the_env_ids_array_written_in_place_is_read_for_its_values(closing):
    """A caller that reorders recv's own ``env_id`` array in place (or writes other envs into
    it) before ``send``: each env gets the action beside its id (send used to trust the array
    by identity and send the actions to the envs it held when recv returned it)."""
    def reverse_in_place(ids):
        ids[:] = ids[::-1].copy()
        return ids

    run(jitter(closing), rounds=60, reorder=reverse_in_place)


class _InterruptedAfter:
    """The native pool, with ``KeyboardInterrupt`` (what Ctrl-C raises) raised right after every
    ``every``-th call of ``method`` returned, its result dropped: where CPython raises a Ctrl-C
    pressed while the call waited with the GIL released."""

    def __init__(self, pool, method: str, every: int):
        self._real, self._method, self._every, self.calls = pool, method, every, 0

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if name != self._method:
            return attr

        def maybe_interrupted(*args, **kwargs):
            result = attr(*args, **kwargs)
            self.calls += 1
            if self.calls % self._every == 0:
                raise KeyboardInterrupt
            return result

        return maybe_interrupted


@pytest.mark.parametrize("method", ["recv", "send"])
@pytest.mark.parametrize("deterministic", [False, True], ids=["arrival", "deterministic"])
def test_ctrl_c_right_after_the_pools_recv_or_send_loses_nothing(closing, method, deterministic):
    """A Ctrl-C raised right after the pool's ``recv`` returned a batch (the batch used to be
    lost: ``recv`` then found nothing in flight, and ``send`` refused those envs as not received
    until ``async_reset``), or right after its ``send`` went out (it was not recorded: ``recv``
    could not take it): the program catches it and goes on, ``recv`` again after a ``recv``,
    nothing to redo after a ``send``; every env's result still comes back exactly once and
    equals the in-process env's."""
    env = jitter(closing, deterministic=deterministic)
    proxy = env._batches._pool = _InterruptedAfter(env._batches._pool, method, 3)

    def recv():
        while True:
            try:
                return env.recv(timeout=30)
            except KeyboardInterrupt:
                continue

    def send(actions, ids):
        try:
            env.send(actions, ids)
        except KeyboardInterrupt:
            pass  # it went out: the next recvs return it

    run(env, rounds=60, recv=recv, send=send)
    assert proxy.calls >= 60  # the interrupts happened, about one call in three


def test_deterministic_batches_replay_exactly_and_are_first_in_first_out(closing):
    first = run(jitter(closing, deterministic=True), rounds=80)
    second = run(jitter(closing, deterministic=True), rounds=80)
    assert first == second
    # First in, first out: workers come back in the rotation they were sent in.
    assert first[:4] == [(0, 1, 2, 3), (4, 5, 6, 7), (0, 1, 2, 3), (4, 5, 6, 7)]


def test_same_step_autoreset_reports_final_observations_per_batch(closing):
    env = closing(AsyncVectorEnv([JitterEnv] * 4, num_workers=2, batch_size=2,
                                 autoreset_mode=AutoresetMode.SAME_STEP))
    env.async_reset(seed=3)
    finals = 0
    for _ in range(60):
        obs, _, terminated, truncated, infos = env.recv(timeout=30)
        ended = terminated | truncated
        if ended.any():
            finals += int(ended.sum())
            assert infos["_final_obs"].shape == (2,)
            np.testing.assert_array_equal(infos["_final_obs"], ended)
            for k in np.flatnonzero(ended):
                assert infos["final_obs"][k][1] >= 5  # the last step's count; obs is the reset one
                assert obs[k][1] == 0
        env.send(np.ones(2, np.int64), infos["env_id"])
    assert finals > 3


@pytest.mark.parametrize("deterministic", [False, True])
def test_rust_env_batches_are_whole_workers(closing, deterministic):
    env = closing(make_vec("CartPole-v1", num_envs=12,
                           vector_kwargs={"batch_size": 6, "num_workers": 4, "deterministic": deterministic}))
    env.async_reset(seed=0)
    seen = np.zeros(12, int)
    for _ in range(40):
        obs, rewards, terminated, truncated, infos = env.recv(timeout=30)
        assert obs.shape == (6, 4) and obs.dtype == np.float32
        ids = np.sort(infos["env_id"])
        # Two whole workers' blocks of 3 envs each.
        assert ids[0] % 3 == 0 and ids[3] % 3 == 0 and (ids[:3] == ids[0] + np.arange(3)).all()
        assert (ids[3:] == ids[3] + np.arange(3)).all() and ids[0] != ids[3]
        seen[infos["env_id"]] += 1
        env.send(np.zeros(6, np.int64), infos["env_id"])
    assert seen.sum() == 240
    if deterministic:  # strict rotation: every worker in turn, whatever the scheduling
        assert (seen == 20).all(), seen


def test_a_default_layout_of_one_process_per_env_is_refused_naming_the_count_and_the_fix():
    """67 envs (a prime) in batches of 16: only 67 one-env blocks make up a batch. The default
    refuses to start 67 worker processes unasked (it did, on 2 cores, until 2026-12-05) and says
    what to pass; a count that fits the cores is still the default."""
    before = set(child_pids())
    with pytest.raises(ValueError, match=r"num_envs \(67\) in batches of batch_size \(16\): the fewest worker "
                                         r"processes .* is 67 \(blocks of 1 env\).*pass num_workers=67"):
        AsyncVectorEnv([JitterEnv] * 67, batch_size=16)
    assert set(child_pids()) == before  # refused before any process started
    assert default_async_workers(4096, 1024, 2) == 4
    assert default_async_workers(64, 16, 16) == 16
    with pytest.raises(ValueError, match="is 1009"):
        default_async_workers(1009, 500, 16)


def test_misuse_is_refused_with_a_clear_error_before_anything_is_sent(closing):
    with pytest.raises(ValueError, match=r"batch_size \(3\) must be a multiple of the envs per worker"):
        AsyncVectorEnv([JitterEnv] * N, num_workers=4, batch_size=3)
    with pytest.raises(ValueError, match="num_envs \\(8\\) is not a multiple of num_workers \\(3\\)"):
        AsyncVectorEnv([JitterEnv] * N, num_workers=3, batch_size=4)
    with pytest.raises(ValueError, match="needs an autoreset mode"):
        AsyncVectorEnv([JitterEnv] * N, batch_size=4, autoreset_mode=AutoresetMode.DISABLED)
    with pytest.raises(ValueError, match="batch_size must be an integer from 1 to num_envs"):
        AsyncVectorEnv([JitterEnv] * N, batch_size=9)
    env = jitter(closing, check_actions=True)
    with pytest.raises(ValueError, match="recv waits for 2 workers but 0"):
        env.recv()
    env.async_reset(seed=0)
    with pytest.raises(AlreadyPendingCallError, match="recv"):
        env.step(np.zeros(N, np.int64))
    with pytest.raises(AlreadyPendingCallError):
        env.async_reset()
    _, _, _, _, infos = env.recv(timeout=30)
    ids = infos["env_id"]
    other = [i for i in range(N) if i not in ids][:2]
    with pytest.raises(ValueError, match="were sent actions whose results were not received yet"):
        env.send(np.zeros(2, np.int64), other)
    with pytest.raises(ValueError, match="do not make up whole workers"):
        env.send(np.zeros(1, np.int64), ids[:1])
    with pytest.raises(ValueError, match="env id 8 is outside"):
        env.send(np.zeros(2, np.int64), [0, 8])
    with pytest.raises(ValueError, match="repeat an env"):
        env.send(np.zeros(4, np.int64), [ids[0], ids[0], ids[1], ids[2]])
    with pytest.raises(ValueError, match="actions have shape"):
        env.send(np.zeros(3, np.int64), ids)
    with pytest.raises(ValueError, match="outside Discrete"):
        env.send(np.full(BATCH, 9), ids)
    env.send(np.zeros(BATCH, np.int64), list(ids))  # a plain list works too
    # Drain, then synchronous use works again.
    env.recv(timeout=30)
    env.recv(timeout=30)
    obs, _ = env.reset(seed=1)
    assert obs.shape == (N, 4)


def test_a_worker_killed_between_send_and_recv_is_restarted_and_its_envs_read_truncated(closing):
    env = jitter(closing, on_worker_failure="restart")
    env.async_reset(seed=0)
    _, _, _, _, infos = env.recv(timeout=30)
    ids = infos["env_id"]
    victim = int(ids[0]) // 2
    env.send(np.zeros(BATCH, np.int64), ids)
    os.kill(env._pool.worker_pids()[victim], signal.SIGKILL)
    back = {}
    with pytest.warns(UserWarning, match=f"worker {victim} .* was restarted"):
        for _ in range(2):
            _, rewards, terminated, truncated, infos = env.recv(timeout=30)
            for k, i in enumerate(infos["env_id"]):
                back[int(i)] = (rewards[k], terminated[k], truncated[k], infos.get("worker_restarted", [False] * 4)[k])
    assert sorted(back) == list(range(N))
    for i in (2 * victim, 2 * victim + 1):
        assert back[i] == (0.0, False, True, True), back[i]


def test_num_workers_default_makes_batches_of_whole_workers(closing):
    env = closing(AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 32, batch_size=16))
    assert env.num_envs % env._pool.num_workers == 0
    assert 16 % (32 // env._pool.num_workers) == 0 and env._pool.num_workers >= 2


def test_send_recv_without_batch_size_return_every_env_even_with_uneven_worker_blocks(closing):
    # 5 envs on 2 workers (blocks of 3 and 2): batch_size defaults to num_envs, so each recv
    # waits for every worker, and the env ids follow the workers' real blocks.
    env = closing(AsyncVectorEnv([JitterEnv] * 5, num_workers=2))
    env.async_reset(seed=0)
    for t in range(20):
        obs, rewards, _, _, infos = env.recv(timeout=30)
        assert infos["env_id"].tolist() == [0, 1, 2, 3, 4]
        np.testing.assert_array_equal(obs[:, 0], np.arange(5))  # the seed each env was reset with
        env.send(np.full(5, t % 4), infos["env_id"])
    env.recv(timeout=30)
    with pytest.raises(ValueError, match=r"do not make up whole workers: the workers step the envs \[\(0, 3\), \(3, 5\)\]"):
        env.send(np.zeros(2, np.int64), [3, 2])


@pytest.mark.parametrize("space", [
    spaces.Dict({"frame": spaces.Box(0, 255, (3, 2), np.uint8),
                 "nested": spaces.Tuple((spaces.Discrete(5, start=-2), spaces.MultiBinary(3))),
                 "grid": spaces.MultiDiscrete([[2, 3], [4, 5]])}),
    spaces.Tuple((spaces.Box(-1.0, 1.0, (2,), np.float64), spaces.Dict({"k": spaces.Discrete(4)}))),
], ids=["dict", "tuple"])
def test_recv_gathers_nested_rows_leaf_by_leaf_as_gymnasium_concatenates_them(space):
    # recv's rows of Dict/Tuple observations: one copy per leaf and run (ringenv._slots._gather)
    # equal, in values, dtypes and container types, to Gymnasium's env-by-env iterate + concatenate.
    from gymnasium.vector.utils import concatenate, create_empty_array, iterate

    from ringenv._slots import array_tree, _gather

    n = 6
    batched = batch_space(space, n)
    batched.seed(3)
    first, second = batched.sample(), batched.sample()
    parts = [(first, 1, 3), (second, 0, 2), (first, 4, 6)]
    items = [item for batch, a, b in parts for item in list(iterate(batched, batch))[a:b]]
    expected = concatenate(space, items, create_empty_array(space, n=len(items), fn=np.zeros))
    assert array_tree(space)
    got = _gather(space, parts)
    assert_tree_identical(got, expected)
    assert type(got) is type(expected)


#: A Dict of array leaves and a Tuple; a Dict split by ringenv._layout.observation_layout (a
#: custom value beside arrays, in an unsorted key order: MiniGrid's form).
RECV_DICT_SPACES = {
    "arrays": spaces.Dict({"a": spaces.Box(-5.0, 5.0, (3,), np.float32),
                           "b": spaces.Tuple((spaces.Discrete(4), spaces.MultiBinary(2)))}),
    "split": spaces.Dict({"image": spaces.Box(0, 255, (3, 3, 3), np.uint8), "mission": ColourSpace(),
                          "direction": spaces.Discrete(4)}, sort_keys=False),
}


@pytest.mark.parametrize("space_id", RECV_DICT_SPACES)
def test_recv_of_a_dict_env_equals_stepping_each_env_alone(closing, space_id):
    space = RECV_DICT_SPACES[space_id]
    fns = [functools.partial(SpaceEnv, space) for _ in range(6)]
    env = closing(AsyncVectorEnv(fns, num_workers=2, inline=True, batch_size=2, deterministic=True))
    refs = [fn() for fn in fns]
    env.async_reset(seed=10)
    want = [ref.reset(seed=10 + i)[0] for i, ref in enumerate(refs)]
    done = [False] * 6
    for round_ in range(36):
        obs, rewards, terminated, truncated, infos = env.recv()
        ids = infos["env_id"].tolist()
        assert list(obs) == list(space.spaces)  # the space's key order
        for i, got in zip(ids, iterate(batch_space(space, len(ids)), obs)):
            # (iterate walks a batch_space, whose Dicts sort their keys; a Tuple's items come as a tuple)
            assert_tree_identical({key: got[key] for key in want[i]}, dict(want[i]), what=f"round {round_}, env {i}")
        actions = np.array([(round_ + i) % 3 for i in ids], dtype=np.int64)
        env.send(actions, infos["env_id"])
        for k, i in enumerate(ids):
            if done[i]:
                want[i], done[i] = refs[i].reset()[0], False
            else:
                o, _, te, tr, _ = refs[i].step(actions[k])
                want[i], done[i] = o, te or tr


@pytest.mark.parametrize("space", [
    spaces.OneOf((spaces.Discrete(3), spaces.Box(-1.0, 1.0, (2,), np.float32))),
    spaces.Dict({"choice": spaces.OneOf((spaces.Discrete(3), spaces.Box(-1.0, 1.0, (2,), np.float32))),
                 "word": spaces.Text(3)}),
], ids=["oneof", "dict-of-oneof"])
def test_held_recv_batches_of_values_read_from_the_slot_stay_as_returned(closing, space):
    # copy=True: a OneOf's value read from a slot is a tuple holding views of it; a recv batch
    # must hold copies, or the workers' later writes show through.
    fns = [functools.partial(SpaceEnv, space) for _ in range(4)]
    env = closing(AsyncVectorEnv(fns, num_workers=2, inline=False, batch_size=2, deterministic=True))
    env.async_reset(seed=3)
    held = []
    for r in range(12):  # past every slot of the pool, several times
        obs, *_, infos = env.recv()
        held.append((obs, deepcopy(obs)))
        env.send(np.array([(r + i) % 3 for i in infos["env_id"]]), infos["env_id"])
    for t, (obs, snapshot) in enumerate(held):
        assert_tree_identical(obs, snapshot, what=f"batch {t}")


@pytest.mark.parametrize("copy", [False, True])
def test_dict_observations_come_in_new_containers_each_step(closing, copy):
    # The slots' Dict views are built once (ringenv._slots.Slots.obs_views); what a step returns
    # must still be the caller's own dict: replacing a key, or (copy=True) writing into an array,
    # changes nothing the next step returns. With copy=False the arrays are views of the segment.
    space = spaces.Dict({"a": spaces.Box(-5.0, 5.0, (3,), np.float32),
                         "b": spaces.Tuple((spaces.Discrete(4), spaces.MultiBinary(2)))})
    fns = [functools.partial(SpaceEnv, space) for _ in range(4)]
    env = closing(AsyncVectorEnv(fns, num_workers=2, copy=copy, deterministic=True))
    ref = closing(gym.vector.SyncVectorEnv(fns))
    obs, _ = env.reset(seed=5)
    want, _ = ref.reset(seed=5)
    assert_tree_identical(obs, want)
    first = obs
    first["a"] = "replaced by the caller"
    if copy:
        first["b"][1][:] = 7  # writing into a returned array
    for t in range(3):  # past every slot of the pool
        actions = np.array([(t + i) % 3 for i in range(4)])
        obs, *_ = env.step(actions)
        want, *_ = ref.step(actions)
        assert obs is not first and obs["b"] is not first["b"]
        assert_tree_identical(obs, want, what=f"step {t}")
    assert all(leaf.flags.owndata is copy for leaf in (obs["a"], obs["b"][0], obs["b"][1])), \
        "copy=False: views of shared memory; copy=True: arrays of the caller's own"


@pytest.mark.parametrize("batch_size", [2, 4], ids=["one-worker-per-recv", "two-workers-per-recv"])
def test_a_recv_after_async_reset_has_zero_rewards_and_no_ends_though_the_slot_held_a_step(closing, batch_size):
    # The slots still hold the last step's rewards (1.0 each) when the reset's results arrive.
    from helper_envs import CounterEnv

    env = closing(AsyncVectorEnv([functools.partial(CounterEnv, i) for i in range(4)], num_workers=2,
                                 batch_size=batch_size))
    env.async_reset(seed=0)
    for _ in range(6):  # both slots of every worker hold steps of reward 1.0
        _, rewards, _, _, infos = env.recv()
        env.send(np.ones(batch_size, np.int64), infos["env_id"])
    for _ in range(4 // batch_size):
        env.recv()
    env.async_reset(seed=1)
    seen = []
    for _ in range(4 // batch_size):
        obs, rewards, terminated, truncated, infos = env.recv()
        assert rewards.tolist() == [0.0] * batch_size and not terminated.any() and not truncated.any()
        assert obs[:, 1].tolist() == [0.0] * batch_size  # step count 0: reset observations
        seen += infos["env_id"].tolist()
    assert sorted(seen) == [0, 1, 2, 3]


def test_the_env_ids_a_recv_returns_are_the_callers_own(closing):
    from helper_envs import CounterEnv

    env = closing(AsyncVectorEnv([functools.partial(CounterEnv, i) for i in range(4)], num_workers=2, batch_size=2,
                                 deterministic=True))
    env.async_reset(seed=0)
    kept = []
    for _ in range(6):
        obs, _, _, _, infos = env.recv()
        ids = infos["env_id"]
        kept.append((ids, ids.copy()))
        env.send(np.zeros(2, np.int64), ids)
        ids[:] = -1  # the caller reuses the array once sent
    for _ in range(2):
        obs, _, _, _, infos = env.recv()
        assert infos["env_id"].tolist() == obs[:, 0].astype(int).tolist()  # CounterEnv: [env_index, t]
    assert all((ids == -1).all() for ids, _ in kept)
    assert [c.tolist() for _, c in kept] == [[0, 1], [2, 3]] * 3


def test_a_contiguous_dict_recv_batch_with_copy_false_is_views_of_the_segment(closing):
    # As for a flat space: one run of rows comes as views (valid until those envs step again),
    # equal to what the envs returned; a batch of rows of two slots is gathered into new arrays.
    space = spaces.Dict({"a": spaces.Box(-5.0, 5.0, (3,), np.float32), "b": spaces.MultiBinary(2)})
    fns = [functools.partial(SpaceEnv, space) for _ in range(4)]
    env = closing(AsyncVectorEnv(fns, num_workers=2, copy=False, batch_size=2, deterministic=True))
    ref = closing(gym.vector.SyncVectorEnv(fns))
    env.async_reset(seed=5)
    want, _ = ref.reset(seed=5)
    segment = env._pool.segment()
    for _ in range(2):
        obs, _, _, _, info = env.recv()
        ids = info["env_id"]
        assert all(np.shares_memory(obs[k], segment) for k in ("a", "b"))
        for k in ("a", "b"):
            np.testing.assert_array_equal(obs[k], want[k][ids])
