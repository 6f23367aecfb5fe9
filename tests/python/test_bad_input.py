"""Bad input is refused with an error naming what is wrong, before anything is built, allocated
or sent: counts of the wrong type or range, a segment larger than the memory available, actions
that are not numbers. Waits on the control plane honour the caller's timeout and Ctrl-C."""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import threading
import time

import gymnasium as gym
import numpy as np
import psutil
import pytest

import ringenv
from ringenv._checks import available_memory

from helper_envs import ONES, CallEnv, CounterEnv, FaultEnv, SpaceEnv, faulty as _faulty


from vec_asserts import child_pids, wait_pids_gone

def _children() -> set:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _counters(n=2, **kwargs):
    return ringenv.AsyncVectorEnv([functools.partial(CounterEnv, i) for i in range(n)], **kwargs)


@pytest.mark.parametrize("make", [
    lambda n: ringenv.make_vec("CartPole-v1", num_envs=n),  # built-in Rust env
    lambda n: ringenv.make_vec("CartPole-v1", num_envs=n, prefer_builtin=False),  # Python env
])
def test_a_segment_larger_than_the_memory_available_is_refused_naming_num_envs_and_bytes(make):
    before = _children()
    # 10**11 envs need terabytes, more than any machine this runs on (10**9, the figure,
    # would fit on a large one).
    with pytest.raises(ValueError, match=r"num_envs=100000000000 needs a shared memory segment of \d+ bytes") as info:
        make(10**11)
    assert "memory available" in str(info.value)
    assert _children() - before == set(), "no worker was started"


def test_the_segment_is_compared_with_the_memory_available(monkeypatch):
    import ringenv._checks

    monkeypatch.setattr(ringenv._checks, "available_memory", lambda: 4096)
    before = _children()
    with pytest.raises(ValueError, match=r"num_envs=2 needs a shared memory segment of \d+ bytes .* more than the "
                                         r"4096 bytes"):
        _counters(2, num_workers=2)
    assert _children() - before == set()


def test_the_available_memory_is_read_from_the_system():
    available = available_memory()
    assert available is not None and available > 0


@pytest.mark.parametrize("num_envs, error, match", [
    (-1, ValueError, "num_envs must be an integer of at least 1, got -1"),
    (0, ValueError, "num_envs must be an integer of at least 1, got 0"),
    (True, TypeError, "num_envs must be an integer, got bool True"),
    (2.0, TypeError, "num_envs must be an integer, got float 2.0"),
    ("4", TypeError, "num_envs must be an integer, got str '4'"),
    (2**63, ValueError, "num_envs must be an integer from 1 to 9223372036854775807, got 9223372036854775808"),
    (2**63 - 1, ValueError, "num_envs=9223372036854775807 needs a shared memory segment larger than the address "
                            "space"),
])
def test_make_vec_refuses_a_bad_num_envs_by_name(num_envs, error, match):
    for prefer_builtin in (True, False):
        with pytest.raises(error, match=match):
            ringenv.make_vec("CartPole-v1", num_envs=num_envs, prefer_builtin=prefer_builtin)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"num_workers": True}, TypeError, "num_workers must be an integer, got bool"),
    ({"num_workers": -1}, ValueError, r"num_workers must be an integer from 0 to num_envs \(2\), got -1"),
    ({"num_workers": 3}, ValueError, r"num_workers must be an integer from 0 to num_envs \(2\), got 3"),
    ({"num_workers": 0, "inline": False}, ValueError, r"num_workers=0 means no worker process.*inline=False"),
    ({"num_workers": 1.5}, TypeError, "num_workers must be an integer, got float"),
    ({"batch_size": 1.0}, TypeError, "batch_size must be an integer, got float"),
    ({"batch_size": -2}, ValueError, r"batch_size must be an integer from 1 to num_envs \(2\)"),
    ({"max_concurrency": 0}, ValueError, "max_concurrency must be an integer of at least 1"),
    ({"max_restarts": -1}, ValueError, "max_restarts must be an integer from 0"),
    ({"startup_timeout": -1.0}, ValueError, "startup_timeout must be a finite number >= 0"),
    ({"startup_timeout": "60"}, TypeError, "startup_timeout must be a number"),
    ({"restart_window": float("nan")}, ValueError, "restart_window must be a finite number >= 0"),
    ({"spin_us": -5}, ValueError, r"spin_us must be None or a number of microseconds from 0 to 10,000,000 \(10 s\), "
                                  "got -5"),
    ({"spin_us": 1e30}, ValueError, "spin_us must be None or a number of microseconds from 0 to 10,000,000"),
    ({"spin_us": 2**64}, ValueError, "spin_us must be None or a number of microseconds from 0 to 10,000,000"),
    ({"spin_us": "5"}, TypeError, "spin_us must be None or a number of microseconds >= 0, got str"),
])
def test_bad_counts_and_durations_are_refused_by_name_before_any_worker_starts(kwargs, error, match):
    built = []

    def factory():
        built.append(1)
        return CounterEnv(0)

    before = _children()
    with pytest.raises(error, match=match):
        ringenv.AsyncVectorEnv([factory, factory], **kwargs)
    assert built == [], "no env was built for arguments that cannot work"
    assert _children() - before == set()


@pytest.mark.parametrize("made", [None, "CartPole-v1", gym.spaces.Discrete(2)])
def test_a_factory_that_returns_no_env_is_refused_naming_what_it_returned(made):
    """``env_fns[0]()`` that is not an env: a TypeError naming its type and what it lacks (not
    ``'NoneType' object has no attribute 'close'``, which hides the real error), and no worker
    starts."""
    before = _children()
    with pytest.raises(TypeError, match=rf"env_fns\[0\] returned {type(made).__name__} .*, not an env: .* it has no"):
        ringenv.AsyncVectorEnv([lambda: made] * 2, num_workers=2)
    assert _children() - before == set()


def test_make_vec_refuses_an_id_that_is_neither_a_str_nor_an_env_spec_by_name():
    for bad in (None, 3, b"CartPole-v1"):
        with pytest.raises(TypeError, match=rf"id must be a str .* or an EnvSpec, got {type(bad).__name__}"):
            ringenv.make_vec(bad, 2)


def test_rust_env_kwargs_may_be_numpy_numbers(closing, symbolic_worker):
    """A Rust env's kwargs travel as JSON: NumPy scalars (a count read from an array) are taken as
    the Python numbers they hold; other objects are a TypeError naming them."""
    envs = closing(ringenv.make_vec("BlocksWorld-v0", 2, worker=symbolic_worker, num_blocks=np.int64(3)))
    three = closing(ringenv.make_vec("BlocksWorld-v0", 2, worker=symbolic_worker, num_blocks=3))
    four = closing(ringenv.make_vec("BlocksWorld-v0", 2, worker=symbolic_worker, num_blocks=4))
    assert envs.single_observation_space == three.single_observation_space != four.single_observation_space
    np.testing.assert_array_equal(envs.reset(seed=1)[0], three.reset(seed=1)[0])
    with pytest.raises(TypeError, match="env_kwargs of a Rust env must be JSON data .*object"):
        ringenv.make_vec("BlocksWorld-v0", 2, worker=symbolic_worker, num_blocks=object())


@pytest.mark.parametrize("seed,env_id,message", [
    (-1, 0, r"Seed must be greater or equal to zero, actual value: -1 \(the seed of env 0\)"),
    ([0, -5, 1], 1, r"Seed must be greater or equal to zero, actual value: -5 \(the seed of env 1\)"),
    ([0, 1.5, 2], 1, r"seed of env 1 must be None or a non-negative integer, got 1.5"),
    ([0, 1], None, r"the length must match num_envs=3 but got length=2"),
    (1.5, None, r"seed must be None, an integer or a list of num_envs=3 seeds, got 1.5"),
    (np.float64(3.0), None, r"seed must be None, an integer or a list of num_envs=3 seeds, got np.float64\(3.0\)"),
    ("7", None, r"seed must be None, an integer or a list of num_envs=3 seeds, got '7'"),
], ids=["negative", "negative-in-list", "float", "list-length", "float-scalar", "numpy-float-scalar", "str"])
def test_a_bad_seed_is_a_seed_error_before_anything_is_sent(closing, seed, env_id, message):
    from ringenv.errors import SeedError

    envs = closing(_counters(3))
    envs.reset(seed=0)
    envs.step(np.zeros(3, np.int64))
    with pytest.raises(SeedError, match=message) as info:
        envs.reset(seed=seed)
    assert info.value.env_id == env_id
    # what code written against Gymnasium catches: a negative seed is Gymnasium's own error there
    assert isinstance(info.value, ValueError) and isinstance(info.value, gym.error.Error)
    if seed == -1:
        sync = gym.vector.SyncVectorEnv([functools.partial(CounterEnv, i) for i in range(3)])
        with pytest.raises(gym.error.Error, match="Seed must be greater or equal to zero"):
            sync.reset(seed=seed)
        sync.close()
    # nothing was sent: no call is left pending, the envs step on, and a good seed resets them
    obs, *_ = envs.step(np.zeros(3, np.int64))
    again, _ = envs.reset(seed=0)
    np.testing.assert_array_equal(again, envs.reset(seed=0)[0])


@pytest.mark.parametrize("seed", [2**64 - 2, [0, 1, 2**70]], ids=["seed+i", "list"])
def test_a_rust_envs_seed_of_2_64_or_more_is_a_seed_error_naming_its_u64(closing, seed):
    """A Rust env's seed is a u64: a seed of 2**64 or more (which Python envs take, as
    Gymnasium's do) is refused, naming the env, before anything is sent."""
    from ringenv.errors import SeedError

    envs = closing(ringenv.make_vec("CartPole-v1", num_envs=3))
    first, _ = envs.reset(seed=0)
    for reset in (envs.reset, envs.async_reset):
        with pytest.raises(SeedError, match=r"seed of env 2 must be below 2\*\*64 for a Rust env \(its seed is a "
                                            r"u64\), got (18446744073709551616|1180591620717411303424)$") as info:
            reset(seed=seed)
        assert info.value.env_id == 2
    # nothing was sent: the envs reset on
    np.testing.assert_array_equal(envs.reset(seed=0)[0], first)


def test_per_env_actions_of_a_tuple_space_name_the_batched_form(closing):
    space = gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.MultiBinary(2)))
    fns = [functools.partial(SpaceEnv, gym.spaces.Discrete(4), space)] * 3
    envs = closing(ringenv.AsyncVectorEnv(fns, num_workers=1))
    envs.reset(seed=0)
    per_env = [(0, np.array([1, 0], np.int8))] * 3
    with pytest.raises(ValueError, match=r"got 2 actions for 3 envs: a batch of Tuple actions is one batch of 3 per "
                                         r"sub-space \(as gymnasium.vector.utils.batch_space makes it"):
        envs.step(per_env)
    # the form the message names is taken
    batched = gym.vector.utils.concatenate(space, per_env, gym.vector.utils.create_empty_array(space, 3))
    envs.step(batched)


@pytest.mark.parametrize("env_fns,message", [
    ([gym.make("CartPole-v1")] * 2, r"env_fns\[0\] is not a callable that makes an env: it is of type TimeLimit "
                                    r"\(an env already made: pass a factory"),
    (["CartPole-v1"] * 2, r"env_fns\[0\] is not a callable .* of type str \(an env id: pass lambda: gym.make\(id\)"),
    ([CounterEnv, 3], r"env_fns\[1\] is not a callable that makes an env: it is of type int$"),
    (CounterEnv, r"env_fns must be a sequence of env factories, got one callable"),
], ids=["made-env", "id", "int", "one-callable"])
def test_env_fns_that_are_not_factories_are_refused_by_name(env_fns, message):
    before = _children()
    with pytest.raises(TypeError, match=message):
        ringenv.AsyncVectorEnv(env_fns)
    assert _children() == before


def test_num_workers_0_with_asynchronous_batches_says_why():
    with pytest.raises(ValueError, match=r"num_workers=0 means no worker process: .* no asynchronous batches; "
                                         r"batch_size=2 < num_envs=4 needs worker processes"):
        _counters(4, num_workers=0, batch_size=2)


@pytest.mark.parametrize("id", ["CartPole-v1", "Acrobot-v1"])  # a built-in Rust env and a Python env
def test_make_vec_refuses_a_vector_option_among_the_env_arguments_naming_vector_kwargs(id):
    with pytest.raises(TypeError, match=r"make_vec\(\) got 'num_workers', an option of the vector env, among the "
                                        r"env's keyword arguments: pass vector_kwargs=\{'num_workers': \.\.\.\}"):
        ringenv.make_vec(id, 4, num_workers=2)


def test_recv_with_nothing_sent_says_what_to_send(closing):
    envs = closing(_counters(4, num_workers=2, batch_size=2))
    with pytest.raises(ValueError, match=r"0 have a command in flight \(send their envs a command first: "
                                         r"async_reset, then send\)"):
        envs.recv()


def test_rust_env_counts_are_checked_too():
    with pytest.raises(ValueError, match="num_workers must be an integer from 0 to num_envs"):
        ringenv.make_vec("CartPole-v1", num_envs=2, vector_kwargs={"num_workers": 5})


@pytest.fixture(scope="module")
def pendulums():
    """Two Pendulums shared by the module's tests, each of which resets them first."""
    envs = ringenv.AsyncVectorEnv([functools.partial(gym.make, "Pendulum-v1")] * 2, num_workers=2)
    yield envs
    envs.close(timeout=10.0)


@pytest.mark.parametrize("actions, env", [
    (np.array([[None], [0.5]], dtype=object), 0),
    ([[0.5], [None]], 1),
    (np.array([[0.5], ["x"]], dtype=object), 1),
])
def test_box_actions_that_are_not_numbers_are_refused_naming_the_env(pendulums, actions, env):
    pendulums.reset(seed=0)
    with pytest.raises(ValueError, match=rf"action of env {env} is .* not a number"):
        pendulums.step(actions)
    # Nothing was sent: the next step is the envs' first.
    obs, rewards, *_ = pendulums.step(np.zeros((2, 1), np.float32))
    assert np.isfinite(obs).all() and np.isfinite(rewards).all()


def test_an_object_array_of_numbers_is_checked_like_numbers(closing):
    pendulums = closing(ringenv.AsyncVectorEnv([functools.partial(gym.make, "Pendulum-v1")] * 2, num_workers=2,
                                               check_actions=True))
    pendulums.reset(seed=0)
    with pytest.raises(ValueError, match="contains NaN"):
        pendulums.step(np.array([[np.nan], [0.5]], dtype=object))
    obs, rewards, *_ = pendulums.step(np.array([[0.1], [0.2]], dtype=object))
    assert obs.shape == (2, 3) and np.isfinite(rewards).all()


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_])
def test_float_actions_for_a_box_of_an_integer_dtype_are_refused_before_anything_is_sent(closing, dtype):
    """A float batch for a Box of an integer (or bool) dtype is a ``ValueError`` naming the dtype,
    as for a Discrete (before: cast into the slot, 2.7 reaching the env as 2 and NaN as INT_MIN);
    the same values as integers pass."""
    space = gym.spaces.Box(0, 1, (2,), dtype)
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(SpaceEnv, gym.spaces.Discrete(2), space)] * 2,
                                          num_workers=2))
    envs.reset(seed=0)
    with pytest.raises(ValueError, match=rf"Box space of dtype {np.dtype(dtype)} must be integers, got dtype float"):
        envs.step(np.array([[0.7, 0.0], [np.nan, 1.0]]))
    *_, infos = envs.step(np.array([[1, 0], [0, 1]], dtype))
    assert infos["t"].tolist() == [1, 1]  # the refused batch never reached the envs


def test_string_actions_are_refused(pendulums):
    pendulums.reset(seed=0)
    with pytest.raises(ValueError, match="must be numbers, got an array of dtype <U"):
        pendulums.step(np.array([["a"], ["b"]]))


def test_a_discrete_action_of_none_is_refused_naming_the_env(closing):
    envs = closing(_counters(2, num_workers=2))
    envs.reset(seed=0)
    with pytest.raises(ValueError, match="action of env 1 is None, not a number"):
        envs.step([1, None])
    obs, *_ = envs.step(np.ones(2, np.int64))
    assert obs[:, 1].tolist() == [1.0, 1.0]


def test_a_call_wait_honours_its_timeout_and_the_call_stays_pending(closing):
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(CallEnv, i) for i in range(2)], num_workers=2))
    envs.reset(seed=0)
    envs.call_async("sleep", 2.0)
    with pytest.raises(multiprocessing.TimeoutError):
        envs.call_wait(timeout=0.5)
    assert envs.call_wait() == (0, 1)


def test_ctrl_c_interrupts_a_call_that_would_block_for_ever(closing, python_sigint_handler):
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(CallEnv, i) for i in range(2)], num_workers=2))
    envs.reset(seed=0)
    # The call sleeps far past the test's time limit: only a wait that checks for signals ends.
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            envs.call("sleep", 1000.0)
    finally:
        timer.cancel()
        envs.close(terminate=True)  # the call is still pending in the workers, asleep for 1000 s


def _sleep_in_workers(main_pid: int, seconds: float):
    """A factory that builds a CounterEnv at once in the main process (the vector env's probe)
    and only after ``seconds`` in a worker."""
    import time

    if os.getpid() != main_pid:
        time.sleep(seconds)
    return CounterEnv(0)


def test_ctrl_c_interrupts_a_start_up_waiting_for_a_worker_and_stops_the_workers(python_sigint_handler):
    from vec_asserts import child_pids, wait_pids_gone

    before = child_pids()
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt) as info:
            ringenv.AsyncVectorEnv([functools.partial(_sleep_in_workers, os.getpid(), 1000.0)] * 2,
                                   num_workers=2, startup_timeout=30.0)
    finally:
        timer.cancel()
    # Raised by the wait itself, not on top of another error (the start-up running out of time,
    # or an interrupted read taken for a broken control socket).
    assert info.value.__context__ is None, repr(info.value.__context__)
    assert wait_pids_gone(child_pids() - before, timeout=5.0) == [], "the started workers were stopped"


def test_signals_handled_in_python_during_start_up_and_waits_do_not_break_the_pool(closing):
    """A signal with a Python handler (a profiler's SIGUSR1, a SIGALRM time limit, SIGCHLD)
    interrupts the main process's blocking reads of control sockets; such a read is retried (the
    handler runs in between), not taken for a broken socket."""
    handled = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: handled.append(signum))
    stop = threading.Event()

    def pester():
        while not stop.wait(0.01):
            os.kill(os.getpid(), signal.SIGUSR1)

    thread = threading.Thread(target=pester, daemon=True)
    thread.start()
    try:
        # The workers take 1 s to build their envs: the handshake's reads are interrupted.
        envs = closing(ringenv.AsyncVectorEnv([functools.partial(_sleep_in_workers, os.getpid(), 1.0)] * 2,
                                              num_workers=2))
        envs.reset(seed=0)
        obs, *_ = envs.step(np.ones(2, np.int64))
        assert obs[:, 1].tolist() == [1.0, 1.0]
    finally:
        stop.set()
        thread.join()
        signal.signal(signal.SIGUSR1, previous)
    assert handled, "the signals reached their Python handler"


#: Actions outside their space, and the error naming each.
BAD_ACTIONS = [
    (gym.spaces.Discrete(3), np.array([0, 2, -1], np.int64), r"action -1 of env 2 is outside"),
    (gym.spaces.Discrete(3), np.array([-128, 0, 0], np.int8), r"action -128 of env 0 is outside"),
    (gym.spaces.Discrete(3), np.array([0, 3, 0], np.uint16), r"action 3 of env 1 is outside"),
    (gym.spaces.Discrete(3, start=-1), np.array([-1, 1, -2], np.int64), r"action -2 of env 2 is outside"),
    (gym.spaces.Discrete(3, start=-1), np.array([2, 1, 0], np.int32), r"action 2 of env 0 is outside"),
    (gym.spaces.MultiBinary(2), np.array([[0, 1], [1, 2]], np.int64), r"action 2 of env 1 is outside"),
    (gym.spaces.MultiDiscrete([2, 5]), np.array([[1, 4], [1, 5]]), r"action 5 of env 1 is outside"),
    (gym.spaces.MultiDiscrete([[2, 3], [4, 5]], start=[[0, 1], [-1, 0]]),
     np.array([[[1, 3], [2, 4]], [[1, 1], [3, 4]]]), r"action 3 of env 1 is outside"),
    (gym.spaces.Box(-1, 1, (2,)), np.array([[0, 1], [np.nan, 0]], np.float32), r"action of env 1 contains NaN"),
    # larger batches: the bad action is found and named among many
    (gym.spaces.Discrete(3), np.where(np.arange(100) == 77, -1, 1), r"action -1 of env 77 is outside"),
    (gym.spaces.Discrete(3), np.where(np.arange(100) == 5, 3, 0).astype(np.uint8), r"action 3 of env 5 is outside"),
    (gym.spaces.Discrete(3, start=-1), np.where(np.arange(40) == 39, -2, 0), r"action -2 of env 39 is outside"),
    (gym.spaces.MultiBinary(2), np.where(np.arange(80).reshape(40, 2) == 61, 2, 1), r"action 2 of env 30 is outside"),
]


@pytest.mark.parametrize("space, actions, message", BAD_ACTIONS)
def test_action_range_checks_name_the_env_and_value(space, actions, message):
    """Every action outside its space is found, whichever path checks it (the one-reduction path
    for spaces from 0 reads negative integers as large unsigned ones)."""
    from ringenv._checks import action_bounds, check_action_values

    with pytest.raises(ValueError, match=message):
        check_action_values(actions, action_bounds(space), space)


@pytest.mark.parametrize("space, actions", [
    (gym.spaces.Discrete(3), np.array([0, 2, 1], np.int64)),
    (gym.spaces.Discrete(2), np.array([True, False])),
    (gym.spaces.Discrete(3, start=-1), np.array([-1, 1, 0], np.int8)),
    (gym.spaces.MultiBinary(2), np.array([[0, 1], [1, 1]], np.uint8)),
    (gym.spaces.Box(-1, 1, (2,)), np.array([[np.inf, 0], [-np.inf, 0]], np.float64)),  # inf - inf: no NaN
    (gym.spaces.Discrete(3), np.zeros(0, np.int64)),
    (gym.spaces.Discrete(3), np.arange(100) % 3),
    (gym.spaces.Discrete(3, start=-1), np.arange(100) % 3 - 1),
    (gym.spaces.MultiBinary(2), np.ones((40, 2), np.int8)),
])
def test_actions_inside_their_space_pass_the_range_checks(space, actions):
    from ringenv._checks import action_bounds, check_action_values

    check_action_values(actions, action_bounds(space), space)


@pytest.mark.parametrize("space, actions, message", BAD_ACTIONS)
def test_a_bad_batch_in_the_action_leafs_own_dtype_is_refused_before_a_byte_is_written(space, actions, message):
    """A batch of every env's actions in the action leaf's dtype is checked and written by one
    native call (``Pool.write_actions``); it refuses what the NumPy check refuses, writes nothing
    then, and the step still raises the NumPy check's error naming the env and value."""
    n = len(actions)
    make = functools.partial(SpaceEnv, gym.spaces.Box(0, 1, (2,)), space)
    env = ringenv.AsyncVectorEnv([make] * n, num_workers=0, check_actions=True)
    try:
        env.reset(seed=0)
        slot = env._pool.next_slot
        rows = env._slots.action[slot]
        bad = actions.astype(rows.dtype)
        assert np.array_equal(bad, actions, equal_nan=True)  # the same values, in the leaf's dtype
        good = np.stack([space.sample() for _ in range(n)]).astype(rows.dtype)
        assert env._pool.write_actions(good.tobytes(), [(slot, 0, n)])
        assert np.array_equal(rows, good)
        assert not env._pool.write_actions(bad.tobytes(), [(slot, 0, n)])
        assert np.array_equal(rows, good), "a refused batch wrote nothing"
        with pytest.raises(ValueError, match=message):
            env.step(bad)
        assert np.array_equal(rows, good)
        env.step(good)  # the env goes on
    finally:
        env.close()


def test_the_native_action_writer_refuses_bytes_that_do_not_fit_and_unknown_slots():
    env = ringenv.AsyncVectorEnv([functools.partial(SpaceEnv, gym.spaces.Box(0, 1, (2,)))] * 3, num_workers=0,
                                 check_actions=True)
    try:
        env.reset(seed=0)
        with pytest.raises(ValueError, match=r"12 bytes of actions are not one action for each of the 3 envs of the "
                                             r"runs \(1 int64, 8 bytes each\)"):
            env._pool.write_actions(bytes(12), [(0, 0, 3)])
        with pytest.raises(ValueError, match="24 bytes of actions are not one action for each of the 2 envs"):
            env._pool.write_actions(np.zeros(3, np.int64).tobytes(), [(0, 1, 3)])
        with pytest.raises(ValueError, match=r"envs 1..4 are not envs of this pool \(3 envs\)"):
            env._pool.write_actions(np.zeros(3, np.int64).tobytes(), [(0, 1, 4)])  # envs 1..4 of 3
        with pytest.raises(ValueError, match=r"envs 2..1 are not envs of this pool"):
            env._pool.write_actions(b"", [(0, 2, 1)])
        with pytest.raises(ValueError, match="no slot 2: the pool has 2"):
            env._pool.write_actions(np.zeros(3, np.int64).tobytes(), [(2, 0, 3)])
        with pytest.raises(ValueError, match="low and high together"):
            env._pool.set_action_bounds([0], None)
    finally:
        env.close()


def test_the_native_action_writer_writes_a_run_of_envs_and_never_under_a_worker_in_flight():
    """Async batches write one worker's run of envs; the rows of a worker whose step is in flight
    (which it may be reading) are refused, the other worker's rows are written."""
    env = ringenv.AsyncVectorEnv([functools.partial(SpaceEnv, gym.spaces.Box(0, 1, (2,)))] * 4, num_workers=2,
                                 batch_size=2, check_actions=True)
    try:
        env.async_reset(seed=0)
        _, _, _, _, infos = env.recv()
        ready = [0, 1] if infos["env_id"][0] == 0 else [2, 3]
        other = [2, 3] if ready == [0, 1] else [0, 1]
        slot = env._pool.next_slot_of(ready[0] // 2)
        rows = env._slots.action[slot]
        assert env._pool.write_actions(np.array([2, 1], np.int64).tobytes(), [(slot, ready[0], ready[0] + 2)])
        assert rows[ready].tolist() == [2, 1]
        assert not env._pool.write_actions(np.array([3, 0], np.int64).tobytes(), [(slot, ready[0], ready[0] + 2)])  # 3: outside
        assert rows[ready].tolist() == [2, 1]
        with pytest.raises(ValueError, match=rf"envs {other[0]}..{other[1] + 1} cannot be written while their "
                                             "workers have a command in flight"):
            env._pool.write_actions(np.array([0, 0], np.int64).tobytes(), [(slot, other[0], other[0] + 2)])
        with pytest.raises(ValueError, match="cannot be written while their workers have a command in flight"):
            env._pool.write_actions(np.zeros(4, np.int64).tobytes(), [(slot, 0, 4)])  # every env
        env.send(np.array([1, 1]), infos["env_id"])
        env.recv()
    finally:
        env.close()


def test_the_native_action_writer_writes_runs_of_several_slots_in_order_or_nothing():
    """Several ``(slot, start, stop)`` runs: each gets its rows of the actions, in the runs'
    order (not the envs'); a refused value anywhere writes no run; a run whose worker has a
    command in flight writes none either."""
    env = ringenv.AsyncVectorEnv([functools.partial(SpaceEnv, gym.spaces.Box(0, 1, (2,)))] * 6, num_workers=3,
                                 check_actions=True)
    try:
        env.reset(seed=0)
        a, b = env._slots.action
        runs = [(1, 4, 6), (0, 0, 1), (1, 1, 3)]
        assert env._pool.write_actions(np.array([2, 1, 0, 2, 1], np.int64).tobytes(), runs)  # Discrete(3)
        assert b[4:6].tolist() == [2, 1] and a[0] == 0 and b[1:3].tolist() == [2, 1]
        before = (a.copy(), b.copy())
        assert not env._pool.write_actions(np.array([0, 1, 0, 1, 3], np.int64).tobytes(), runs)  # 3: outside
        assert np.array_equal(a, before[0]) and np.array_equal(b, before[1]), "a refused value wrote no run"
        env.step_async(np.zeros(6, np.int64))
        with pytest.raises(ValueError, match="cannot be written while their workers have a command in flight"):
            env._pool.write_actions(np.zeros(1, np.int64).tobytes(), [(0, 0, 1)])
        env.step_wait()
    finally:
        env.close()


class _HugeMultiDiscreteEnv(gym.Env):
    """Actions of a ``uint64`` MultiDiscrete whose largest value does not fit an ``int64``."""

    observation_space = gym.spaces.Box(0, 1, (2,))
    action_space = gym.spaces.MultiDiscrete(np.array([2**63 + 5], np.uint64), dtype=np.uint64)

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {"action": action[0]}


def test_bounds_beyond_int64_are_checked_by_the_numpy_path():
    """The native check's bounds are int64: a space whose bound is larger leaves every batch to the
    NumPy check, which still refuses the value outside and passes the largest one inside."""
    env = ringenv.AsyncVectorEnv([_HugeMultiDiscreteEnv] * 2, num_workers=0, check_actions=True)
    try:
        env.reset(seed=0)
        assert env._slots._action_dtype is None, "the native writer is off for this space"
        *_, infos = env.step(np.array([[2**63 + 4], [0]], np.uint64))
        assert infos["action"].tolist() == [2**63 + 4, 0]
        with pytest.raises(ValueError, match=r"action 9223372036854775813 of env 0 is outside"):
            env.step(np.array([[2**63 + 5], [0]], np.uint64))
    finally:
        env.close()

# -- actions and observations that do not fit ---------------------------------------------------




def test_out_of_range_and_nan_actions_are_refused_before_anything_is_sent(closing):
    envs = _faulty(closing, check_actions=True)
    envs.reset(seed=0)
    for bad, word in [([0, 1, 3, 0], "env 2"), ([-1, 0, 0, 0], "env 0")]:
        with pytest.raises(ValueError, match=word):
            envs.step(np.array(bad))
    obs, *_ = envs.step(ONES)  # still usable, and the refused steps never ran
    assert obs[:, 0].tolist() == [1.0] * 4
    box = closing(ringenv.AsyncVectorEnv([lambda: gym.make("Pendulum-v1")] * 2, num_workers=1, check_actions=True))
    box.reset(seed=0)
    with pytest.raises(ValueError, match="NaN"):
        box.step(np.array([[0.0], [np.nan]], dtype=np.float32))
    box.step(np.zeros((2, 1), np.float32))


def test_an_observation_of_the_wrong_shape_is_an_error_naming_the_env(closing):
    envs = _faulty(closing, faults={2: {"bad_obs_at": 2}})
    envs.reset(seed=0)
    envs.step(ONES)
    with pytest.raises(ValueError, match=r"env 2 returned an observation of shape \(3,\)"):
        envs.step(ONES)
    obs, *_ = envs.step(ONES)  # the env stays usable
    assert obs.shape == (4, 1)


class _UnfitObservationEnv(CounterEnv):
    """A Tuple-and-Text observation env whose env 2 returns a value its space cannot hold once
    (``unfit``), at its first step (a :class:`CounterEnv` otherwise)."""

    def __init__(self, env_id, unfit):
        super().__init__(env_id)
        self.observation_space = gym.spaces.Dict({"pair": gym.spaces.Tuple((gym.spaces.Discrete(2),) * 2),
                                                  "text": gym.spaces.Text(4, charset="ab")})
        self.unfit = unfit

    def _obs(self):
        obs = {"pair": (1, 0), "text": "ab"}
        if self.env_index == 2 and self.t == 1:
            obs.update(self.unfit)
        return obs


@pytest.mark.parametrize("unfit,error,message", [
    ({"pair": (1,)}, ValueError, r"env 2 returned a Tuple observation of 1 items; its observation space has 2"),
    ({"pair": (1, 0, 1)}, ValueError, r"env 2 returned a Tuple observation of 3 items"),
    ({"text": b"ab"}, TypeError, r"env 2 returned a Text observation of type bytes"),
    ({"text": "abab!"}, ValueError, r"env 2 returned a Text observation of 5 characters"),
], ids=["tuple-short", "tuple-long", "text-bytes", "text-long"])
def test_an_observation_its_space_cannot_hold_is_an_error_naming_the_env(closing, unfit, error, message):
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(_UnfitObservationEnv, i, unfit) for i in range(4)],
                                          num_workers=2))
    envs.reset(seed=0)
    with pytest.raises(error, match=message):
        envs.step(np.zeros(4, np.int64))
    obs, *_ = envs.step(np.zeros(4, np.int64))  # the env stays usable
    assert obs["text"] == ("ab",) * 4


def test_an_unpicklable_factory_is_refused_before_any_worker_starts():
    import threading

    lock = threading.Lock()
    with pytest.raises(ValueError, match=r"env_fns\[1\] cannot be pickled"):
        ringenv.AsyncVectorEnv([FaultEnv, lambda: (lock, FaultEnv())[1]], num_workers=2)
