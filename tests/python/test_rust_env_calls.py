"""A Rust env (a built-in, or one a worker binary serves) has no Python attributes or methods:
``call``, ``get_attr``, ``set_attr``, ``render``, ``np_random`` and ``np_random_seed`` of its
vector env raise ``NotImplementedError`` naming the env, in the main process, before anything is
sent, and the vector env steps on as before."""

from __future__ import annotations

import numpy as np
import pytest

import ringenv
from vec_asserts import assert_identical

CALLS = {
    "call": lambda envs: envs.call("reset"),
    "call_async": lambda envs: envs.call_async("x"),
    "get_attr": lambda envs: envs.get_attr("spec"),
    "set_attr": lambda envs: envs.set_attr("x", 1),
    "render": lambda envs: envs.render(),
    "np_random": lambda envs: envs.np_random,
    "np_random_seed": lambda envs: envs.np_random_seed,
    "_apply": lambda envs: envs._apply(lambda env: 1),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_builtin_rust_env_refuses_calls_by_name_and_steps_on(closing, name):
    envs = closing(ringenv.make_vec("CartPole-v1", 4, vector_kwargs={"num_workers": 1}))
    reference = closing(ringenv.make_vec("CartPole-v1", 4, vector_kwargs={"num_workers": 1}))
    obs, _ = envs.reset(seed=3)
    assert_identical(obs, reference.reset(seed=3)[0], "reset")
    with pytest.raises(NotImplementedError, match=r"CartPole-v1 is a Rust env, which has none: call, get_attr, "
                                                  r"set_attr, render.*prefer_builtin=False"):
        CALLS[name](envs)
    actions = np.array([0, 1, 1, 0])
    for t in range(5):
        for a, b in zip(envs.step(actions)[:4], reference.step(actions)[:4]):
            assert_identical(a, b, f"step {t}")


def test_python_envs_of_the_same_id_still_answer_calls(closing):
    envs = closing(ringenv.make_vec("CartPole-v1", 2, prefer_builtin=False))
    envs.reset(seed=0)
    assert envs.get_attr("spec")[0].id == "CartPole-v1" and len(envs.np_random_seed) == 2


def test_a_rust_env_refuses_a_step_before_any_reset_with_reset_needed(closing):
    """As Gymnasium's envs do (``OrderEnforcing``): ``step`` and ``send`` before the first reset
    raise ``gymnasium.error.ResetNeeded`` in the main process, before anything is sent (the
    built-in's worker used to panic, an SDK env to step from its constructor's state); so does
    a step after a reset refused for its seed; once reset, the env steps."""
    from gymnasium.error import ResetNeeded

    envs = closing(ringenv.make_vec("CartPole-v1", 4, vector_kwargs={"num_workers": 1}))
    with pytest.raises(ResetNeeded, match="Cannot call env.step\\(\\) before calling env.reset\\(\\)"):
        envs.step(np.zeros(4, np.int64))
    with pytest.raises(ValueError):
        envs.reset(seed=-1)
    with pytest.raises(ResetNeeded):
        envs.step(np.zeros(4, np.int64))
    obs, _ = envs.reset(seed=0)
    assert envs.step(np.zeros(4, np.int64))[0].shape == (4, 4)
    batches = closing(ringenv.make_vec("CartPole-v1", 4, vector_kwargs={"num_workers": 2, "batch_size": 2}))
    with pytest.raises(ResetNeeded):
        batches.send(np.zeros(2, np.int64), [0, 1])
    batches.async_reset(seed=0)
    ids = batches.recv()[4]["env_id"]
    batches.send(np.zeros(2, np.int64), ids)
    assert batches.recv()[0].shape == (2, 4)
