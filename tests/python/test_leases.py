"""``copy=True`` observations of a large batch are lent, not copied (``ringenv/_leases.py``): the
caller gets views of the slot the workers wrote, and no command writes a slot while the caller
holds any array of it. What must hold whatever the caller keeps: every batch equals
``SyncVectorEnv``'s, and no array the caller holds ever changes, across steps, resets (masked
too), asynchronous batches, ``close`` and forks. Nothing here depends on timing."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError

import ringenv
from ringenv._leases import LEASE_MIN_BYTES, LENDING_DEPTH
from helper_envs import CounterEnv, FrameEnv

HERE = os.path.dirname(os.path.abspath(__file__))
N = 8


def fns(length: int = 7):
    return [functools.partial(FrameEnv, i, length) for i in range(N)]


def snapshot(obs):
    return {k: v.copy() for k, v in obs.items()}


def equal(a, b) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def in_segment(envs, array) -> bool:
    """Whether ``array``'s memory lies in the pool's shared segment (a lent view)."""
    return np.shares_memory(array, envs._pool.segment())


def actions(t: int) -> np.ndarray:
    return np.array([(t + i) % 3 for i in range(N)], np.int64)


def test_a_large_batch_gets_a_third_slot_and_small_or_copy_false_batches_do_not():
    assert N * (64 * 64 * 3 + 4 * 8) >= LEASE_MIN_BYTES  # the premise of FrameEnv
    big = ringenv.AsyncVectorEnv(fns(), num_workers=2)
    small = ringenv.AsyncVectorEnv([functools.partial(CounterEnv, i) for i in range(N)], num_workers=2)
    views = ringenv.AsyncVectorEnv(fns(), num_workers=2, copy=False)
    disabled = ringenv.AsyncVectorEnv(fns(), num_workers=2, autoreset_mode=gym.vector.AutoresetMode.DISABLED)
    try:
        assert big._pool.depth == LENDING_DEPTH and big._slots.leases is not None
        assert small._pool.depth == 2 and small._slots.leases is None
        assert views._pool.depth == 2 and views._slots.leases is None
        assert disabled._pool.depth == 2 and disabled._slots.leases is None  # reset by masked resets
        obs, _ = small.reset(seed=0)
        assert not in_segment(small, obs)  # a small batch is a copy, as before
        obs, _ = disabled.reset(seed=0)
        assert not in_segment(disabled, obs)
    finally:
        big.close(), small.close(), views.close(), disabled.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_masked_reset_after_the_caller_edited_its_batch_in_place_keeps_the_envs_observations(num_workers):
    """Autoreset DISABLED: the caller normalises the step's batch in place, then resets some envs;
    the other envs' rows are their own last observations, as ``SyncVectorEnv`` returns them,
    not what the caller wrote."""
    disabled = gym.vector.AutoresetMode.DISABLED
    envs = ringenv.AsyncVectorEnv(fns(length=1000), num_workers=num_workers, autoreset_mode=disabled)
    ref = gym.vector.SyncVectorEnv(fns(length=1000), autoreset_mode=disabled)
    try:
        envs.reset(seed=1), ref.reset(seed=1)
        for obs in (envs.step(actions(0))[0], ref.step(actions(0))[0]):
            for leaf in (obs.values() if isinstance(obs, dict) else [obs]):
                leaf[...] = 0  # the caller's own edit, in place
        mask = np.array([i % 3 == 0 for i in range(N)])
        obs, _ = envs.reset(seed=9, options={"reset_mask": mask})
        want, _ = ref.reset(seed=9, options={"reset_mask": mask})
        assert equal(obs, want)
        assert any(np.any(leaf != 0) for leaf in (want.values() if isinstance(want, dict) else [want]))
    finally:
        envs.close()
        ref.close()


@pytest.mark.parametrize("num_workers", [0, 1, 2])
@pytest.mark.parametrize("keep", [0, 1, 2, 3, 50])
def test_batches_equal_sync_and_no_array_held_ever_changes(num_workers, keep):
    """The caller keeps the last ``keep`` batches (each leaf, and a slice of one leaf): every one
    still holds what it held when returned, over 40 steps with autoresets every 7."""
    envs = ringenv.AsyncVectorEnv(fns(), num_workers=num_workers)
    ref = gym.vector.SyncVectorEnv(fns())
    try:
        obs, info = envs.reset(seed=3)
        want, want_info = ref.reset(seed=3)
        assert equal(obs, want) and np.array_equal(info["offset"], want_info["offset"])
        kept, lent = [], 0
        for t in range(40):
            obs, rewards, terminated, truncated, info = envs.step(actions(t))
            want = ref.step(actions(t))
            assert equal(obs, want[0]), t
            np.testing.assert_array_equal(rewards, want[1])
            np.testing.assert_array_equal(truncated, want[3])
            lent += in_segment(envs, obs["frame"])
            kept.append((obs, obs["frame"][2:5, 10], snapshot(obs)))
            kept = kept[-keep:] if keep else []
            for held, part, snap in kept:
                assert equal(held, snap), (t, "a held batch changed")
                np.testing.assert_array_equal(part, snap["frame"][2:5, 10])
        if keep <= 1:
            assert lent == 40  # nothing held but the last batch: every batch lent, none copied
        elif keep < 50:
            assert 0 < lent < 40  # a batch is lent while another slot stays free, else copied
        else:
            assert lent == 2  # from the third batch on the caller holds two slots: copies
    finally:
        envs.close()
        ref.close()


def test_a_derived_view_alone_keeps_its_slot_held():
    """The caller keeps only a slice, a reshape, a memoryview and a frombuffer of one batch's
    leaves, never the batch: none of them changes."""
    envs = ringenv.AsyncVectorEnv(fns(length=1000), num_workers=2)
    try:
        envs.reset(seed=0)
        obs = envs.step(actions(0))[0]
        assert in_segment(envs, obs["frame"])
        parts = [obs["frame"][1:3], obs["frame"].reshape(-1)[::7], obs["pos"].T, np.frombuffer(obs["pos"], np.uint8)]
        mem = memoryview(obs["frame"][5])
        snaps = [p.copy() for p in parts] + [bytes(mem)]
        del obs
        for t in range(1, 12):
            envs.step(actions(t))
        for p, s in zip(parts, snaps):
            np.testing.assert_array_equal(p, s)
        assert bytes(mem) == snaps[-1]
    finally:
        envs.close()


def test_masked_reset_keeps_the_other_envs_rows_from_a_lent_slot():
    envs = ringenv.AsyncVectorEnv(fns(length=1000), num_workers=2)
    ref = gym.vector.SyncVectorEnv(fns(length=1000))
    try:
        envs.reset(seed=1), ref.reset(seed=1)
        before = envs.step(actions(0))[0]
        ref.step(actions(0))
        held = snapshot(before)
        mask = np.array([i % 3 == 0 for i in range(N)])
        obs, info = envs.reset(seed=9, options={"reset_mask": mask})
        want, want_info = ref.reset(seed=9, options={"reset_mask": mask})
        assert equal(obs, want)
        assert equal(before, held)  # the batch held through the reset is unchanged
        np.testing.assert_array_equal(info["_offset"], want_info["_offset"])
        for t in range(1, 6):
            assert equal(envs.step(actions(t))[0], ref.step(actions(t))[0])
    finally:
        envs.close()
        ref.close()


def test_asynchronous_batches_never_write_a_held_slot():
    """A batch of a synchronous step held, then send/recv batches: the held batch is unchanged;
    recv's batches equal the same envs stepped by hand."""
    envs = ringenv.AsyncVectorEnv(fns(length=1000), num_workers=2)
    try:
        envs.reset(seed=0)
        held = [envs.step(actions(0))[0], envs.step(actions(1))[0]]
        snaps = [snapshot(h) for h in held]
        envs.send(actions(2))
        for t in range(3, 15):
            obs, _, _, _, info = envs.recv()
            assert obs["pos"][:, 1].tolist() == [t] * N  # each env's step count
            envs.send(actions(t)[info["env_id"]], info["env_id"])
        envs.recv()
        assert all(equal(h, s) for h, s in zip(held, snaps))
    finally:
        envs.close()


def test_lent_arrays_stay_readable_after_close():
    envs = ringenv.AsyncVectorEnv(fns(), num_workers=2)
    envs.reset(seed=0)
    obs = envs.step(actions(0))[0]
    snap = snapshot(obs)
    envs.close()
    assert equal(obs, snap)
    obs["frame"][0] = 1  # still writable memory: the caller's own
    assert obs["frame"][0].min() == 1


def test_set_next_slot_names_a_bad_slot_or_worker_and_refuses_while_a_step_is_pending():
    envs = ringenv.AsyncVectorEnv(fns(), num_workers=2)
    try:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="no slot 3: the pool has 3"):
            envs._pool.set_next_slot(3)
        with pytest.raises(ValueError, match="no worker 2"):
            envs._pool.set_next_slot(0, 2)
        envs.step_async(actions(0))
        with pytest.raises(AlreadyPendingCallError):
            envs._pool.set_next_slot(0)
        envs.step_wait()
    finally:
        envs.close()


FORK_SCRIPT = textwrap.dedent(r'''
    import json, os, sys
    import numpy as np
    import ringenv
    from helper_envs import FrameEnv

    envs = ringenv.AsyncVectorEnv([lambda i=i: FrameEnv(i, 1000) for i in range(8)], num_workers=2)
    envs.reset(seed=0)
    step = lambda t: envs.step(np.full(8, t % 3, np.int64))[0]
    obs = step(1)
    lent = bool(np.shares_memory(obs["frame"], envs._pool.segment()))
    snap = {k: v.copy() for k, v in obs.items()}
    go_read, go_write = os.pipe()
    out_read, out_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: waits until the parent let go of the batch and stepped, then compares
        os.close(go_write)
        os.read(go_read, 1)
        same = all(np.array_equal(obs[k], snap[k]) for k in snap)
        os.write(out_write, json.dumps({"same": same}).encode())
        os._exit(0)
    del obs  # the parent lets go: only the child holds the batch now
    steps = [step(t)["pos"][:, 1].tolist() for t in range(2, 12)]
    os.write(go_write, b"x")
    child = json.loads(os.read(out_read, 4096))
    os.waitpid(pid, 0)
    print(json.dumps({"lent": lent, "child": child, "retired": sorted(envs._slots.leases.retired),
                      "last": steps[-1]}))
    envs.close()
''')


def test_a_forked_child_keeps_the_batch_it_inherited_after_the_parent_lets_go(tmp_path):
    """The parent holds a lent batch when it forks, then drops it and steps on: the slot was
    retired at the fork, so the child's inherited arrays never change."""
    script = tmp_path / "fork_lease.py"
    script.write_text(FORK_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["lent"] is True  # the premise: the child inherited views of the segment
    assert seen["child"] == {"same": True}
    assert len(seen["retired"]) == 1
    assert seen["last"] == [11] * N  # the parent stepped on with the two other slots


@pytest.mark.parametrize("keep", [1, 2, 30])
def test_asynchronous_batches_are_lent_and_what_is_held_never_changes(keep):
    """recv/send of half the envs at a time (one worker's block each): every batch equals the same
    envs' steps by hand, a contiguous batch is lent while a slot stays free, and the last
    ``keep`` batches the caller holds never change."""
    envs = ringenv.AsyncVectorEnv(fns(length=5), num_workers=2, batch_size=N // 2, deterministic=True)
    ref = [FrameEnv(i, 5) for i in range(N)]
    try:
        envs.async_reset(seed=4)
        for i, env in enumerate(ref):
            env.reset(seed=4 + i)
        kept, lent = [], 0
        for t in range(30):
            obs, rewards, terminated, truncated, info = envs.recv()
            ids = info["env_id"]
            assert obs["pos"].shape == (N // 2, 4)
            for row, i in enumerate(ids):
                want = ref[i]._obs()
                np.testing.assert_array_equal(obs["frame"][row], want["frame"])
                np.testing.assert_array_equal(obs["pos"][row], want["pos"])
            lent += in_segment(envs, obs["frame"])
            kept = (kept + [(obs, snapshot(obs))])[-keep:]
            for held, snap in kept:
                assert equal(held, snap), (t, "a held batch changed")
            acts = np.array([(t + int(i)) % 3 for i in ids], np.int64)
            for i, a in zip(ids, acts):  # the reference steps as the pool's envs will (next-step autoreset:
                env = ref[int(i)]       # the step after the last resets, its offset from the same generator)
                if env.t >= env.length:
                    env.reset()
                else:
                    env.step(a)
            envs.send(acts, ids)
        if keep == 1:
            assert lent == 30  # the caller holds one batch: another slot is always free
        else:
            assert lent >= 2
    finally:
        envs.close()


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("mode", ["same_step", "disabled"])
def test_other_autoreset_modes_equal_sync_with_lent_batches_held(num_workers, mode):
    """SAME_STEP (``final_obs`` in the infos) and DISABLED with masked resets of the envs that
    ended, envs of three episode lengths: every batch equals ``SyncVectorEnv``'s and the last two
    batches held never change (lent in SAME_STEP; copied in DISABLED, which never lends)."""
    from gymnasium.vector import AutoresetMode

    autoreset = AutoresetMode.SAME_STEP if mode == "same_step" else AutoresetMode.DISABLED
    makers = [functools.partial(FrameEnv, i, 3 + i % 3) for i in range(N)]
    envs = ringenv.AsyncVectorEnv(makers, num_workers=num_workers, autoreset_mode=autoreset)
    ref = gym.vector.SyncVectorEnv(makers, autoreset_mode=autoreset)
    try:
        envs.reset(seed=1), ref.reset(seed=1)
        held, finals = [], 0
        for t in range(20):
            obs, _, terminated, truncated, info = envs.step(actions(t))
            want, _, _, _, want_info = ref.step(actions(t))
            assert equal(obs, want), t
            if "final_obs" in want_info:
                finals += 1
                for got, exp in zip(info["final_obs"], want_info["final_obs"]):
                    assert (got is None) == (exp is None) and (exp is None or equal(got, exp))
            held = (held + [(obs, snapshot(obs))])[-2:]
            done = terminated | truncated
            if autoreset == AutoresetMode.DISABLED and done.any():
                obs, _ = envs.reset(options={"reset_mask": done})
                want, _ = ref.reset(options={"reset_mask": done})
                assert equal(obs, want), (t, "masked reset")
                held = (held + [(obs, snapshot(obs))])[-2:]
            for h, s in held:
                assert equal(h, s), (t, "a held batch changed")
        assert finals > 0 or autoreset == AutoresetMode.DISABLED
    finally:
        envs.close()
        ref.close()
