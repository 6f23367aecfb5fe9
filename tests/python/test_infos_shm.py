"""Per-step infos travel through each worker's info arena in the segment, not the control socket.

A worker leaves the pickled non-empty infos of a step or reset in its arena; the main process
copies them out after the completion. Only a payload larger than the arena (64 KiB by default)
goes on the control socket. These tests count the messages on each worker's control socket
(``Pool.control_message_counts``) while comparing every output with Gymnasium's SyncVectorEnv.
"""

from __future__ import annotations

import functools
import struct
import time

import numpy as np
import pytest

import ringenv
from info_envs import EveryStepInfoEnv
from vec_compare import make_ours, make_ref, run_lockstep

NUM_ENVS = 4
STEPS = 40


def _counts(vec):
    return [vec._pool.control_message_counts(w) for w in range(vec._pool.num_workers)]


def _fns(blob: int = 0):
    return [functools.partial(EveryStepInfoEnv, blob) for _ in range(NUM_ENVS)]


def test_per_step_infos_cost_no_control_message_and_equal_gymnasium():
    ours, ref = make_ours(_fns()), make_ref(_fns())
    try:
        assert ours._pool.num_workers == 2
        before = _counts(ours)
        ends = run_lockstep(ours, ref, seed=3, steps=STEPS)
        assert ends > 0, "some episodes must end, so autoreset infos are covered"
        # One reset and STEPS steps, every one with non-empty infos in every env: no message on
        # any worker's control socket, either way.
        assert _counts(ours) == before
    finally:
        ours.close()
        ref.close()


def test_infos_too_large_for_the_arena_fall_back_to_the_socket_and_equal_gymnasium():
    blob = 40_000  # two envs per worker: ~80 KB of infos per worker per step, over the 64 KiB arena
    ours, ref = make_ours(_fns(blob)), make_ref(_fns(blob))
    try:
        before = _counts(ours)
        steps = 12
        run_lockstep(ours, ref, seed=5, steps=steps)
        after = _counts(ours)
        for (sent0, recv0), (sent1, recv1) in zip(before, after):
            assert sent1 == sent0
            assert recv1 - recv0 == steps + 1, "each reset and step sends its infos on the socket"
    finally:
        ours.close()
        ref.close()


def test_call_results_come_back_through_the_arena():
    ours, ref = make_ours(_fns()), make_ref(_fns())
    try:
        ours.reset(seed=0)
        ref.reset(seed=0)
        before = _counts(ours)
        assert ours.get_attr("length") == ref.get_attr("length")
        after = _counts(ours)
        for (sent0, recv0), (sent1, recv1) in zip(before, after):
            assert (sent1 - sent0, recv1 - recv0) == (1, 0), "the request goes on the socket, the results do not"
    finally:
        ours.close()
        ref.close()


def test_a_corrupt_arena_length_is_a_typed_error_not_a_crash():
    ours = make_ours(_fns(), on_worker_failure="raise")
    try:
        ours.reset(seed=0)
        layout = ours._pool.layout()
        at, size = layout["info_arena_offsets"][0], layout["info_arena_bytes"]
        seg = np.frombuffer(ours._pool.segment(), dtype=np.uint8)
        (seq0,) = struct.unpack_from("=Q", seg, at + 8)
        ours.step_async(np.zeros(NUM_ENVS, dtype=np.int64))
        # Wait until worker 0 left this step's infos in its arena, then corrupt their length
        # before the main process reads them (it reads only in step_wait).
        deadline = time.monotonic() + 30
        while struct.unpack_from("=Q", seg, at + 8)[0] == seq0:
            assert time.monotonic() < deadline, "worker 0 never wrote its arena"
            time.sleep(0.001)
        time.sleep(0.05)  # let the worker finish publishing the completion
        struct.pack_into("=Q", seg, at, size * 4)
        with pytest.raises(ringenv.errors.WorkerDiedError) as e:
            ours.step_wait()
        assert "info arena" in str(e.value) and "capacity" in str(e.value), str(e.value)
    finally:
        ours.close()


def test_infos_plain_pickle_refuses_still_arrive():
    from info_envs import LambdaInfoEnv

    ours = make_ours([LambdaInfoEnv for _ in range(NUM_ENVS)])
    try:
        ours.reset(seed=1)
        for t in range(1, 4):
            _, _, terminated, truncated, infos = ours.step(np.ones(NUM_ENVS, dtype=np.int64))
            assert list(infos["_fn"]) == [True] * NUM_ENVS
            assert [f(10) for f in infos["fn"]] == [10 + t] * NUM_ENVS
            assert not (terminated | truncated).any()
    finally:
        ours.close()


def test_an_arena_of_zero_bytes_sends_every_payload_on_the_socket(monkeypatch):
    from ringenv import _native

    real = _native.Pool

    class ZeroArenaPool:  # the native Pool, built with an arena of zero bytes
        segment_size = staticmethod(real.segment_size)

        def __new__(cls, *a, **k):
            return real(*a, info_arena_bytes=0, **k)

    monkeypatch.setattr(_native, "Pool", ZeroArenaPool)
    ours, ref = make_ours(_fns()), make_ref(_fns())
    try:
        assert ours._pool.layout()["info_arena_bytes"] == 0
        before = _counts(ours)
        steps = 10
        run_lockstep(ours, ref, seed=7, steps=steps)
        for (_, recv0), (_, recv1) in zip(before, _counts(ours)):
            assert recv1 - recv0 == steps + 1
    finally:
        ours.close()
        ref.close()
