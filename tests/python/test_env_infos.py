"""``AsyncVectorEnv.env_infos()`` and ``vector_infos=False``: each env's own info dict of the last
reset, step or recv (what Stable-Baselines3's adapter reads), equal to what the env returned."""

from __future__ import annotations

import numpy as np
from gymnasium.vector import AutoresetMode
from helper_envs import InfoEnv
from vec_asserts import assert_tree_identical as _assert_tree_identical

import ringenv

N = 4


def assert_tree_identical(actual, expected, what):
    """Lists of info dicts, element by element."""
    assert isinstance(actual, list) and len(actual) == len(expected), what
    for i, (a, e) in enumerate(zip(actual, expected)):
        _assert_tree_identical(a, e, f"{what}[{i}]")


def test_env_infos_are_each_envs_own_dicts_and_vector_infos_false_skips_vectorising(closing):
    kwargs = dict(num_workers=2, autoreset_mode=AutoresetMode.SAME_STEP)
    plain = closing(ringenv.AsyncVectorEnv([InfoEnv] * N, **kwargs))
    raw = closing(ringenv.AsyncVectorEnv([InfoEnv] * N, vector_infos=False, **kwargs))
    local = [InfoEnv() for _ in range(N)]
    _, infos = plain.reset(seed=5)
    assert raw.reset(seed=5)[1] == {}
    expected = [env.reset(seed=5 + i)[1] for i, env in enumerate(local)]
    assert_tree_identical(raw.env_infos(), expected, "reset env_infos")
    assert_tree_identical(plain.env_infos(), expected, "env_infos beside vectorised infos")
    assert set(infos) >= {"length", "_length"}  # the default still vectorises
    rng = np.random.default_rng(0)
    ends = 0
    for t in range(40):
        actions = rng.integers(0, 3, N)
        plain.step(actions)
        assert raw.step(actions)[4] == {}
        got = raw.env_infos()
        assert isinstance(got, list) and len(got) == N
        if t < 2:  # no episode has ended yet (they last 3 steps or more): the env's own step infos
            assert_tree_identical(got, [env.step(a)[4] for env, a in zip(local, actions)], f"step {t}")
        assert_tree_identical(got, plain.env_infos(), f"step {t}")
        ends += sum("final_info" in info for info in got)
    assert ends > 5


def test_env_infos_of_a_recv_batch(closing):
    envs = closing(ringenv.AsyncVectorEnv([InfoEnv] * N, num_workers=2, batch_size=2, vector_infos=False))
    envs.async_reset(seed=0)
    *_, infos = envs.recv()
    ids = infos["env_id"]
    assert set(infos) == {"env_id"} and len(ids) == 2
    got = envs.env_infos()
    assert all(("length" in got[i]) == (i in ids) for i in range(N)), got
