"""``gymnasium.make_vec`` of ids registered by ringenv: the built-in (``ringenv/CartPole-v1``,
registered by ``import ringenv``) and users' own ids
(``ringenv.register``) give a ``ringenv.AsyncVectorEnv`` through their ``vector_entry_point``,
equal bit for bit to ``ringenv.make_vec`` (or to Gymnasium's own vector env) for the same seeds;
keyword arguments reach the vector env or the env by name; bad ones are clear errors. Every
entry point that takes an id (``ringenv.make_vec``, ``gymnasium.make_vec``, ``ringenv.ray``,
``ringenv tune``) builds the same envs for each kind of id."""

from __future__ import annotations

import doctest
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from vec_asserts import assert_identical

import ringenv
import ringenv.registration
from ringenv import AsyncVectorEnv, VectorEntryPoint
from ringenv.cli._common import resolve_env
from ringenv.ray._build import id_recipe


def _assert_runs_identical(ours, ref, steps: int, seed: int = 0) -> None:
    obs, infos = ours.reset(seed=seed)
    ref_obs, ref_infos = ref.reset(seed=seed)
    assert_identical(obs, ref_obs, "reset obs")
    rng = np.random.default_rng(seed)
    for t in range(steps):
        actions = rng.integers(0, ref.single_action_space.n, ref.num_envs)
        got, want = ours.step(actions), ref.step(actions)
        for name, a, b in zip(("obs", "rewards", "terminations", "truncations"), got[:4], want[:4]):
            assert_identical(a, b, f"step {t} {name}")


def test_builtins_through_gymnasium_make_vec_equal_ringenv_make_vec(closing):
    rust_id = "CartPole-v1"
    ours = closing(gym.make_vec(f"ringenv/{rust_id}", 6, vectorization_mode="vector_entry_point", num_workers=2))
    ref = closing(ringenv.make_vec(rust_id, 6, vector_kwargs={"num_workers": 2}))
    assert isinstance(ours, AsyncVectorEnv) and ours.num_workers == 2 and ours.num_envs == 6
    assert ours.single_observation_space == ref.single_observation_space
    assert ours.spec.id == f"ringenv/{rust_id}" and ours.spec.kwargs["num_workers"] == 2
    _assert_runs_identical(ours, ref, steps=120)


def test_builtins_are_registered_on_import_without_an_entry_point_or_a_process():
    for rust_id in ringenv.builtin_env_ids():
        spec = gym.spec(f"ringenv/{rust_id}")
        assert spec.entry_point is None and spec.vector_entry_point == VectorEntryPoint(f"ringenv/{rust_id}", rust_id)
    # In a fresh interpreter: importing registers the ids and starts no process.
    code = ("import psutil, gymnasium as gym, ringenv; "
            "print(sorted(i for i in gym.registry if i.startswith('ringenv/')), len(psutil.Process().children()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["['ringenv/CartPole-v1']", "0"], done.stdout
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Gymnasium warns when an id is registered over
        ringenv.registration.register_builtins()  # again: nothing changes
    assert gym.spec("ringenv/CartPole-v1").vector_entry_point == VectorEntryPoint("ringenv/CartPole-v1", "CartPole-v1")


def test_default_mode_of_a_ringenv_id_is_its_vector_entry_point(closing):
    envs = closing(gym.make_vec("ringenv/CartPole-v1", 2, num_workers=1))
    assert isinstance(envs, AsyncVectorEnv) and envs.spec.kwargs["vectorization_mode"] == "vector_entry_point"
    with pytest.raises(gym.error.Error, match="doesn't have an entry point"):
        gym.make_vec("ringenv/CartPole-v1", 2, vectorization_mode="sync")


@pytest.fixture
def pendulum_id():
    id = "ringenv_test/Pendulum-v1"
    ringenv.register(id, "gymnasium.envs.classic_control.pendulum:PendulumEnv", max_episode_steps=7,
                     kwargs={"g": 3.0})
    yield id
    del gym.registry[id]


def test_a_user_registered_python_id_equals_gymnasiums_own_vector_env(closing, pendulum_id):
    ours = closing(gym.make_vec(pendulum_id, 3, num_workers=2, g=4.5, copy=False))
    ref = closing(gym.make_vec(pendulum_id, 3, vectorization_mode="sync", g=4.5))
    assert isinstance(ours, AsyncVectorEnv) and ours.num_workers == 2 and ours.copy is False
    assert ours.get_attr("g") == (4.5, 4.5, 4.5)  # an env argument reached the env; copy reached ringenv
    obs, _ = ours.reset(seed=3)
    ref_obs, _ = ref.reset(seed=3)
    assert_identical(obs, ref_obs, "reset obs")
    for t in range(7):  # max_episode_steps=7 of the registration applies: the 7th step truncates
        actions = np.full((3, 1), 0.5 - t / 7, dtype=np.float32)
        got, want = ours.step(actions), ref.step(actions)
        for name, a, b in zip(("obs", "rewards", "terminations", "truncations"), got[:4], want[:4]):
            assert_identical(a, b, f"step {t} {name}")
    assert got[3].all()
    # The registered default argument applies when the call gives none.
    assert closing(gym.make_vec(pendulum_id, 2, num_workers=1)).get_attr("g") == (3.0, 3.0)


def test_unknown_arguments_are_clear_errors(closing, pendulum_id):
    with pytest.raises(ValueError, match='CartPole-v1 takes no arguments, got "gravity"'):
        gym.make_vec("ringenv/CartPole-v1", 2, gravity=9.8)
    with pytest.raises(TypeError, match="colour"):
        gym.make_vec(pendulum_id, 2, colour=3)
    with pytest.raises(TypeError, match="num_workers must be an integer"):
        gym.make_vec("ringenv/CartPole-v1", 2, num_workers="4")
    # Gymnasium's own rule in this mode: options travel as keyword arguments, not vector_kwargs.
    with pytest.raises(gym.error.Error, match="vector_kwargs"):
        gym.make_vec("ringenv/CartPole-v1", 2, vectorization_mode="vector_entry_point",
                     vector_kwargs={"num_workers": 1})


def test_register_refuses_what_cannot_work(tmp_path):
    with pytest.raises(TypeError, match="exactly one of entry_point"):
        ringenv.register("ringenv_test/X-v0")
    with pytest.raises(TypeError, match="exactly one of entry_point"):
        ringenv.register("ringenv_test/X-v0", "a.b:C", worker="/bin/true")
    with pytest.raises(ValueError, match="rust_id"):
        ringenv.register("ringenv_test/X-v0", "a.b:C", rust_id="X-v0")
    with pytest.raises(FileNotFoundError, match="not found"):
        ringenv.register("ringenv_test/X-v0", worker=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="max_episode_steps"):
        ringenv.register("ringenv_test/X-v0", worker="/bin/true", max_episode_steps=5)
    assert "ringenv_test/X-v0" not in gym.registry


def test_module_docstring_examples_run():
    try:
        result = doctest.testmod(ringenv.registration, verbose=False)
    finally:
        gym.registry.pop("demo/Pendulum-v1", None)
    assert result.attempted >= 8 and result.failed == 0


def test_make_vec_of_a_builtin_records_its_registered_spec_and_takes_its_registered_id(closing, symbolic_worker):
    """``ringenv.make_vec("CartPole-v1")`` (the Rust built-in) has the spec of the id it is
    registered under, as ``gymnasium.make_vec`` gives every vector env one; the registered id
    ``"ringenv/CartPole-v1"`` is accepted by ``ringenv.make_vec`` too and gives the same env."""
    builtin = closing(ringenv.make_vec("CartPole-v1", 3))
    namespaced = closing(ringenv.make_vec("ringenv/CartPole-v1", 3))
    assert builtin.spec is not None and builtin.spec.id == "ringenv/CartPole-v1"
    assert namespaced.spec.id == "ringenv/CartPole-v1"
    # A registered worker binary's id with arguments: the call is recorded in the vector env's
    # spec, the registry's own spec is left as it was.
    ringenv.register("symbolic/BlocksWorld-v0", worker=symbolic_worker)
    try:
        blocks = closing(gym.make_vec("symbolic/BlocksWorld-v0", 2, num_blocks=4))
        assert blocks.spec.id == "symbolic/BlocksWorld-v0"
        assert blocks.spec.kwargs == {"num_blocks": 4, "num_envs": 2, "vectorization_mode": "vector_entry_point"}
        assert gym.spec("symbolic/BlocksWorld-v0").kwargs == {}
    finally:
        del gym.registry["symbolic/BlocksWorld-v0"]
    _assert_runs_identical(namespaced, builtin, steps=30)


def test_a_python_envs_spec_records_the_call_as_gymnasium_does_and_makes_the_same_vector_env_again(closing):
    """``ringenv.make_vec`` records ``num_envs``, ``vectorization_mode``, ``vector_kwargs`` and
    ``wrappers`` in ``spec.kwargs`` as ``gymnasium.make_vec`` does, so the spec makes the vector
    env again, through either ``make_vec``."""
    wrappers = [gym.wrappers.RecordEpisodeStatistics]
    theirs = closing(gym.make_vec("CartPole-v1", 3, vectorization_mode="async", wrappers=wrappers))
    ours = closing(ringenv.make_vec("CartPole-v1", 3, wrappers=wrappers, prefer_builtin=False))
    assert ours.spec.kwargs == theirs.spec.kwargs == {"num_envs": 3, "vectorization_mode": "async", "wrappers": wrappers}
    assert repr(ours) == "ringenv.AsyncVectorEnv(CartPole-v1, num_envs=3)"
    again = closing(ringenv.make_vec(ours.spec))
    assert isinstance(again, AsyncVectorEnv) and again._rust_envs is None and again.spec.kwargs == ours.spec.kwargs
    _, infos = again.reset(seed=0)
    for _ in range(30):  # the wrapper came back: episode statistics appear when an episode ends
        _, _, terminated, truncated, infos = again.step(np.zeros(3, dtype=np.int64))
        if "episode" in infos:
            break
    assert "episode" in infos
    gyms = closing(gym.make_vec(ours.spec))  # Gymnasium's own AsyncVectorEnv of the same envs
    assert type(gyms) is gym.vector.AsyncVectorEnv and gyms.num_envs == 3
    _assert_runs_identical(again, gyms, steps=20, seed=3)

    tuned = closing(ringenv.make_vec("CartPole-v1", 2, prefer_builtin=False, vector_kwargs={"num_workers": 1}))
    assert tuned.spec.kwargs["vector_kwargs"] == {"num_workers": 1}
    assert closing(ringenv.make_vec(tuned.spec)).num_workers == tuned.num_workers


def test_a_rust_envs_spec_is_what_gymnasium_records_and_gymnasium_make_vec_makes_ringenvs_again(closing):
    ours = closing(ringenv.make_vec("CartPole-v1", 4, vector_kwargs={"num_workers": 1}))
    theirs = closing(gym.make_vec("ringenv/CartPole-v1", 4, num_workers=1))
    assert ours.spec.kwargs == theirs.spec.kwargs == {"num_workers": 1, "num_envs": 4,
                                                      "vectorization_mode": "vector_entry_point"}
    for again in (closing(gym.make_vec(ours.spec)), closing(ringenv.make_vec(ours.spec))):
        assert isinstance(again, AsyncVectorEnv) and again._rust_envs.id == "CartPole-v1"
        assert again.num_envs == 4 and again.num_workers == ours.num_workers
        _assert_runs_identical(again, ours, steps=40, seed=5)


def test_make_vec_takes_an_env_spec_and_a_vectorize_mode_as_gymnasium_make_vec_does(closing):
    """An ``EnvSpec`` names its env: Gymnasium's Python CartPole here, not the built-in Rust
    one a plain ``"CartPole-v1"`` gives."""
    spec = gym.spec("CartPole-v1")
    from_spec = closing(ringenv.make_vec(spec, 2, vectorization_mode=gym.VectorizeMode.ASYNC))
    assert from_spec._rust_envs is None and from_spec.spec.id == "CartPole-v1"
    assert from_spec.get_attr("spec")[0].id == "CartPole-v1"
    _assert_runs_identical(from_spec, closing(gym.make_vec("CartPole-v1", 2, vectorization_mode="sync")), steps=20)
    builtin = closing(ringenv.make_vec("CartPole-v1", 2, vectorization_mode=gym.VectorizeMode.ASYNC))
    assert builtin._rust_envs.id == "CartPole-v1"
    with pytest.raises(ValueError, match="vectorization_mode must be None or 'async', got 'sync'"):
        ringenv.make_vec("CartPole-v1", 2, vectorization_mode=gym.VectorizeMode.SYNC)


def _built(envs) -> tuple:
    """What a vector env steps: ``("rust", id, "builtin" or the worker binary's path)`` or
    ``("python", the sub-envs' spec id, the ``g`` they were made with)``."""
    rust = envs._rust_envs
    if rust is not None:
        return ("rust", rust.id, "builtin" if rust.builtin else rust.argv[0])
    spec = envs.get_attr("spec")[0]
    return ("python", spec.id, spec.kwargs.get("g"))


def test_every_entry_point_builds_the_same_envs_for_each_kind_of_id(closing, worker_binary):
    """An id is resolved alike by ``ringenv.make_vec``, ``ringenv.ray`` (in the driver; its recipe
    is called here, without Ray), ``ringenv tune``'s ``ENV`` and, for ids ringenv registered,
    ``gymnasium.make_vec``: a built-in (preferred unless ``prefer_builtin=False``), its registered
    ``ringenv/`` id, a worker binary's ``PATH:ID`` or an id registered with
    ``ringenv.register(worker=...)`` run in Rust; Gymnasium ids (``module:Id`` too) and ids
    registered with ``ringenv.register(entry_point)`` are made by ``gymnasium.make`` in the
    workers, the registered vector options going to the pool, not to the env."""
    ringenv.register("idkinds/Cart-v1", worker=worker_binary, rust_id="CartPole-v1")
    ringenv.register("idkinds/Pendulum-v1", "gymnasium.envs.classic_control.pendulum:PendulumEnv",
                     kwargs={"g": 3.0, "num_workers": 1})
    builtin, served = ("rust", "CartPole-v1", "builtin"), ("rust", "CartPole-v1", worker_binary)
    cases = [  # (id, prefer_builtin, what it builds, whether ringenv registered it in Gymnasium)
        ("CartPole-v1", True, builtin, False),
        ("CartPole-v1", False, ("python", "CartPole-v1", None), False),
        ("ringenv/CartPole-v1", True, builtin, True),
        (f"{worker_binary}:CartPole-v1", True, served, False),
        ("idkinds/Cart-v1", True, served, True),
        ("idkinds/Pendulum-v1", True, ("python", "idkinds/Pendulum-v1", 3.0), True),
        ("gymnasium.envs.classic_control:MountainCar-v0", True, ("python", "MountainCar-v0", None), False),
    ]
    got, want = {}, {}
    try:
        for id, prefer, built, registered in cases:
            makers = {
                "ringenv.make_vec": lambda: ringenv.make_vec(id, 2, prefer_builtin=prefer),
                "ringenv.ray": lambda: id_recipe(id, {}, (), prefer, None)(2, {}, 1)(),
                "ringenv tune": lambda: resolve_env(id, prefer_builtin=prefer).make_ringenv(2, 1),
            }
            if registered:
                makers["gymnasium.make_vec"] = lambda: gym.make_vec(id, 2)
            for entry, make in makers.items():
                key = f"{entry}({id!r}, prefer_builtin={prefer})"
                want[key] = built
                try:
                    envs = closing(make())
                    envs.reset(seed=0)
                    got[key] = _built(envs)
                except Exception as e:  # the whole table is compared, so that each divergence shows
                    got[key] = f"{type(e).__name__}: {e}"
    finally:
        del gym.registry["idkinds/Cart-v1"], gym.registry["idkinds/Pendulum-v1"]
    wrong = [f"{key}: {got[key]}, not {built}" for key, built in want.items() if got[key] != built]
    assert not wrong, "\n".join(wrong)
