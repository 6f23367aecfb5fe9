"""Rust envs written with the ``ringenv-worker`` SDK outside ringenv, stepped from Python.

- ``examples/custom_env/README.md`` is run as written: its shell block (``cargo new`` to
  ``check``) in a temporary directory next to a ``ringenv`` link to this checkout, then its Python
  block and its ``ringenv tune`` command with that crate's binary; the example's own ``cargo
  test`` passes.
- The example's Sokoban through ``ringenv.make_vec(..., worker=...)``: spaces, seeding,
  autoreset, infos, typed arguments, panics with their location, and the restart policy.
- A "zoo" crate written here serves every space kind (Box of several dtypes and shapes,
  Discrete with a start, MultiDiscrete, MultiBinary, nested Dict and Tuple; Box, MultiDiscrete
  and MultiBinary actions): Python's spaces equal the Rust declarations and every leaf holds what
  the Rust env wrote.

Crates build once per session, with cargo, offline first (the crates ringenv's own build
downloaded suffice), into the workspace's target directory so that nothing is compiled twice.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, List

import gymnasium as gym
import numpy as np
import pytest

import ringenv
from ringenv import errors
from ringenv.cli import _common
from vec_asserts import assert_identical

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "custom_env"
README = EXAMPLE / "README.md"


def _target_dir() -> Path:
    """Where cargo builds: the caller's ``CARGO_TARGET_DIR``, else the workspace's ``target``."""
    return Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")


def _run(cmd, cwd, *, env=None, timeout=900, shell=False) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, shell=shell, capture_output=True, text=True,
                          executable="/bin/bash" if shell else None)
    return done


def _cargo_env(offline: bool) -> Dict[str, str]:
    env = dict(os.environ)
    env.pop("CARGO_TARGET_DIR", None)  # each build says where it builds
    if offline:
        env["CARGO_NET_OFFLINE"] = "true"
    return env


def _fenced(text: str, lang: str) -> List[str]:
    """The bodies of the ```lang blocks of a Markdown text."""
    return [m.group(1) for m in re.finditer(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)]


@pytest.fixture(scope="session")
def walkthrough(tmp_path_factory) -> Path:
    """Runs the README's shell block; returns the new crate's directory (its ``target`` is a link
    to the shared target directory, so ``target/debug/custom_env`` works as the README says)."""
    (script,) = _fenced(README.read_text(), "bash")
    lines = script.strip().splitlines()
    assert lines[0] == "cargo new custom_env && cd custom_env", lines[0]
    target = _target_dir()
    target.mkdir(parents=True, exist_ok=True)
    failures = []
    for attempt, offline in enumerate((True, False)):
        base = tmp_path_factory.mktemp(f"walkthrough{attempt}")
        (base / "ringenv").symlink_to(REPO)
        body = "\n".join(["set -euo pipefail", lines[0], f"ln -s {shlex.quote(str(target))} target", *lines[1:]])
        done = _run(body, base, env=_cargo_env(offline), shell=True)
        if done.returncode == 0:
            assert done.stdout.strip().endswith("PASSED"), done.stdout
            return base / "custom_env"
        failures.append(done.stdout[-3000:] + done.stderr[-3000:])
    raise AssertionError("the README walk-through failed:\n" + "\n---\n".join(failures))


@pytest.fixture(scope="session")
def worker(walkthrough) -> str:
    path = walkthrough / "target" / "debug" / "custom_env"
    assert os.access(path, os.X_OK), path
    return str(path)


# -- the README, as written ------------------------------------------------------------------------


def test_readme_python_block_runs(walkthrough, monkeypatch):
    blocks = _fenced(README.read_text(), "python")
    assert len(blocks) == 1 and "make_vec" in blocks[0]
    monkeypatch.chdir(walkthrough)
    exec(compile(blocks[0], str(README), "exec"), {"__name__": "readme"})


def test_readme_tune_command_runs(walkthrough, tmp_path):
    (console,) = _fenced(README.read_text(), "console")
    commands = [line[2:] for line in console.splitlines() if line.startswith("$ ringenv tune ")]
    assert len(commands) == 1
    argv = shlex.split(commands[0])
    report = tmp_path / "tune.json"
    done = _run([sys.executable, "-m", "ringenv.cli", *argv[1:], "--json", str(report)], walkthrough, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Sokoban-v0 (Rust, worker binary target/debug/custom_env)" in done.stdout
    assert "recommended:" in done.stdout
    data = json.loads(report.read_text())
    assert [c["workers"] for c in data["configurations"]] == [1, 2]
    assert all(c["steps_per_s"] > 0 for c in data["configurations"])
    assert data["env"]["kwargs"] == {"max_steps": 50}


@pytest.fixture(scope="session")
def example_tests() -> subprocess.CompletedProcess:
    """``cargo test`` of the example crate (a fixture: compiling takes longer than a test may)."""
    target = str(_target_dir())
    done = None
    for offline in (True, False):
        done = _run(["cargo", "test", "--target-dir", target], EXAMPLE, env=_cargo_env(offline))
        if done.returncode == 0:
            break
    assert done is not None
    return done


def test_example_crate_tests_pass(example_tests):
    """The example's own tests (planner, deadlocks, check_env without allocation, arguments)."""
    done = example_tests
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "test every_level_is_solved_by_its_shortest_plan ... ok" in done.stdout
    assert "test passes_check_env_without_allocating_in_step ... ok" in done.stdout


# -- Sokoban through make_vec ----------------------------------------------------------------------

LEVEL0 = ["#######", "#     #", "# @$. #", "#     #", "#######"]


def _grid(level_rows) -> np.ndarray:
    codes = {"#": 0, " ": 1, ".": 2, "$": 3, "*": 4, "@": 5, "+": 6}
    grid = np.zeros((8, 8), dtype=np.uint8)
    for r, row in enumerate(level_rows):
        for c, ch in enumerate(row):
            grid[r, c] = codes[ch]
    return grid


def _make(closing, worker, num_envs=4, num_workers=2, id="custom_env:Sokoban-v0", **kwargs):
    return closing(ringenv.make_vec(id, num_envs, worker=worker, vector_kwargs={"num_workers": num_workers},
                                    **kwargs))


def test_an_sdk_env_refuses_a_step_before_any_reset_with_reset_needed(closing, worker):
    """A step before the first reset raises Gymnasium's ``ResetNeeded`` (it used to step the
    env from its constructor's state, silently)."""
    from gymnasium.error import ResetNeeded

    envs = _make(closing, worker)
    with pytest.raises(ResetNeeded):
        envs.step(np.zeros(4, np.int64))
    envs.reset(seed=0)
    envs.step(np.zeros(4, np.int64))


def test_spaces_equal_the_rust_declaration(closing, worker):
    envs = _make(closing, worker, level=0)
    assert isinstance(envs, ringenv.AsyncVectorEnv)
    expected = gym.spaces.Dict({"grid": gym.spaces.Box(0, 6, (8, 8), np.uint8), "facts": gym.spaces.MultiBinary(130)})
    assert envs.single_observation_space == expected
    assert list(envs.single_observation_space.spaces) == ["grid", "facts"]  # the Rust order
    assert envs.single_action_space == gym.spaces.Discrete(4)
    assert envs.action_space == gym.spaces.MultiDiscrete([4] * 4)
    obs, infos = envs.reset(seed=0)
    assert infos == {}
    for i in range(4):
        assert_identical(obs["grid"][i], _grid(LEVEL0), f"grid of env {i}")
    assert obs in envs.observation_space


def test_a_registered_worker_binary_id_through_gymnasium_make_vec(closing, worker):
    """``ringenv.register(id, worker=PATH)``: ``gymnasium.make_vec`` gives the same vector env as
    ``ringenv.make_vec(..., worker=PATH)``, env arguments and vector options by name."""
    ringenv.register("custom_env/Sokoban-v0", worker=worker)
    try:
        ours = closing(gym.make_vec("custom_env/Sokoban-v0", 4, num_workers=2, level=0))
    finally:
        del gym.registry["custom_env/Sokoban-v0"]
    ref = _make(closing, worker, level=0)
    assert ours.num_workers == 2 and ours.single_observation_space == ref.single_observation_space
    obs, ref_obs = ours.reset(seed=0)[0], ref.reset(seed=0)[0]
    for t in range(20):
        for key in ("grid", "facts"):
            assert_identical(obs[key], ref_obs[key], f"step {t} {key}")
        actions = np.array([(t + i) % 4 for i in range(4)])
        obs, ref_obs = ours.step(actions)[0], ref.step(actions)[0]


def test_seeds_are_seed_plus_index_and_episodes_follow_them(closing, worker):
    envs = _make(closing, worker, num_envs=6, num_workers=3)  # a random level per episode
    first, _ = envs.reset(seed=11)
    again, _ = envs.reset(seed=11)
    assert_identical(again["grid"], first["grid"], "reset with the same seed")
    shifted, _ = envs.reset(seed=12)
    assert_identical(shifted["grid"][:-1], first["grid"][1:], "env i of seed 12 is env i + 1 of seed 11")
    levels = {row.tobytes() for row in first["grid"]}
    assert len(levels) > 1, "six seeds draw more than one level"


def test_solving_autoreset_and_infos(closing, worker):
    envs = _make(closing, worker, num_envs=3, num_workers=1, level=0)
    envs.reset(seed=0)
    obs, rewards, terminated, truncated, infos = envs.step(np.array([1, 3, 1]))  # env 1 walks away
    assert_identical(terminated, np.array([True, False, True]))
    assert rewards.dtype == np.float64 and np.allclose(rewards, [10.9, -0.1, 10.9])
    assert_identical(infos["is_success"], np.array([True, False, True]))
    assert_identical(infos["_is_success"], np.array([True, False, True]))
    assert_identical(obs["facts"][:, 129], np.array([1, 0, 1], dtype=np.int8))
    obs, rewards, terminated, truncated, infos = envs.step(np.array([0, 0, 0]))
    assert_identical(rewards[[0, 2]], np.zeros(2))  # the autoreset step
    assert_identical(obs["grid"][0], _grid(LEVEL0))
    assert infos == {}


def test_arguments_are_typed_and_named(worker):
    with pytest.raises(ValueError, match=r'Sokoban-v0 takes no argument "levle"; it accepts level, max_steps'):
        ringenv.make_vec("custom_env:Sokoban-v0", 2, worker=worker, levle=1)
    with pytest.raises(ValueError, match="level must be below 4, got 9"):
        ringenv.make_vec("custom_env:Sokoban-v0", 2, worker=worker, level=9)
    with pytest.raises(ValueError, match=r'argument "max_steps" = -3 does not fit'):
        ringenv.make_vec("custom_env:Sokoban-v0", 2, worker=worker, max_steps=-3)
    with pytest.raises(ValueError, match=r'Sokoban-Tiny-v0 takes no arguments, got "level"'):
        ringenv.make_vec("Sokoban-Tiny-v0", 2, worker=worker, level=1)
    with pytest.raises(gym.error.NameNotFound, match=r': no env "other:Sokoban-v0" in custom_env; its ids are'):
        ringenv.make_vec("other:Sokoban-v0", 2, worker=worker)
    with pytest.raises(TypeError, match="JSON data"):
        ringenv.make_vec("Sokoban-v0", 2, worker=worker, level=object())


def test_bad_worker_paths_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        ringenv.make_vec("Sokoban-v0", 2, worker=str(tmp_path / "nope"))
    not_a_worker = tmp_path / "fake"
    not_a_worker.write_text("#!/bin/sh\necho hello\n")
    not_a_worker.chmod(0o755)
    with pytest.raises(ValueError, match="is not a ringenv worker binary"):
        ringenv.make_vec("Sokoban-v0", 2, worker=str(not_a_worker))
    with pytest.raises(IsADirectoryError, match="is a directory"):
        ringenv.make_vec("Sokoban-v0", 2, worker=str(tmp_path))
    not_executable = tmp_path / "plain"
    not_executable.write_text("")
    with pytest.raises(PermissionError, match="is not executable"):
        ringenv.make_vec("Sokoban-v0", 2, worker=str(not_executable))
    # PATH:ID with a PATH that is not a program: the path is named, not imported as a module
    with pytest.raises(FileNotFoundError, match=r"worker binary '\./no/such/binary' not found"):
        ringenv.make_vec("./no/such/binary:Sokoban-v0", 2)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        ringenv.make_vec(f"{tmp_path}:Sokoban-v0", 2)


def _script(path, text):
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("printed,detail", [
    ('{"observation": 1}', r"printed no valid observation_space \(KeyError: 'observation_space'; got none\)"),
    ('{"observation_space": 1, "action_space": 2}', r"printed no valid observation_space \(AttributeError: .*; got 1\)"),
    ('{"observation_space": {"kind": "discrete", "n": 2, "start": 0}, "action_space": {"kind": "nope"}}',
     r"printed no valid action_space \(ValueError: "),
    ('{"error": "nope"}', r"printed an error that is not a worker binary's .*: nope"),
    ('[1, 2]', r"printed no JSON description"),
], ids=["no-spaces", "spaces-not-objects", "unknown-kind", "error-not-an-object", "json-not-an-object"])
def test_json_that_is_not_a_worker_description_is_a_value_error(tmp_path, printed, detail):
    fake = _script(tmp_path / "fake", f"echo '{printed}'\n")
    with pytest.raises(ValueError, match=r"'.*fake' is not a ringenv worker binary: `describe Foo-v0` exited with "
                                         r"status 0 and " + detail):
        ringenv.make_vec("Foo-v0", 2, worker=fake)


def test_terminal_control_bytes_of_a_program_are_escaped_in_the_error(tmp_path):
    fake = _script(tmp_path / "ansi", "printf '\\033[31mRED\\033]0;title\\007'; exit 3\n")
    with pytest.raises(ValueError) as info:
        ringenv.make_vec("Foo-v0", 2, worker=fake)
    message = str(info.value)
    assert "exited with status 3" in message and "\\x1b[31mRED\\x1b]0;title\\x07" in message, message
    assert "\x1b" not in message and "\x07" not in message


def test_a_describe_that_outlasts_its_timeout_is_killed_with_everything_it_started(tmp_path, monkeypatch):
    import psutil

    from ringenv import registration

    pidfile = tmp_path / "child.pid"
    hang = _script(tmp_path / "hang", f"sleep 1000 &\necho $! > {pidfile}\nwait\n")
    # The script writes its child's pid at once; a longer timeout is only tried if the machine was
    # too slow to start it within the shorter one, so the test does not depend on timing.
    for timeout_s in (2.0, 8.0, 32.0, 128.0):
        monkeypatch.setattr(registration, "DESCRIBE_TIMEOUT_S", timeout_s)
        with pytest.raises(ValueError, match=r"did not describe 'Foo-v0' within .* s \(it and every process it "
                                             r"started were killed\)"):
            ringenv.make_vec("Foo-v0", 2, worker=hang)
        if pidfile.exists() and pidfile.read_text().strip():
            break
    child = int(pidfile.read_text())
    # SIGKILL went to its process group: it ends (gone, or a zombie left for whoever adopted it to
    # reap). A SIGKILL is delivered promptly, so the wait below is a bound for a stuck test, not a
    # timing the test relies on; a process the kill missed sleeps its 1000 s past it.
    deadline = time.monotonic() + 120.0
    while True:
        try:
            if psutil.Process(child).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        assert time.monotonic() < deadline, f"the describe's child {child} outlived the kill"
        time.sleep(0.01)


def test_path_prefix_spelling_and_the_cli_resolution(closing, worker, monkeypatch):
    envs = closing(ringenv.make_vec(f"{worker}:Sokoban-Tiny-v0", 2))
    obs, _ = envs.reset(seed=1)
    assert_identical(obs["grid"][1], _grid(LEVEL0))
    envs = closing(ringenv.make_vec("Sokoban-Tiny-v0", 1, worker=Path(worker)))  # an os.PathLike
    assert envs.single_action_space == gym.spaces.Discrete(4)
    target = _common.resolve_env(f"{worker}:custom_env:Sokoban-v0", {"level": 2})
    assert (target.kind, target.name, target.worker, target.kwargs) == ("builtin", "custom_env:Sokoban-v0", worker,
                                                                        {"level": 2})
    probe = target.make_ringenv(2, 1)
    try:
        assert probe.single_action_space == gym.spaces.Discrete(4)
    finally:
        probe.close()
    with pytest.raises(_common.UsageError, match="level must be below 4"):
        _common.resolve_env(f"{worker}:Sokoban-v0", {"level": 5})


def test_a_panic_is_raised_with_message_and_location(closing, worker):
    envs = _make(closing, worker, num_envs=2, num_workers=1)
    envs.reset(seed=0)
    with pytest.raises(errors.RemoteEnvError) as info:
        envs.reset(options={"level": 99})
    e = info.value
    assert e.remote_type == "panic" and e.env_id == 0
    assert re.search(r"Sokoban reset option level = 99 is out of range: there are 4 levels "
                     r"\(panicked at src/lib\.rs:\d+:\d+\)", str(e)), str(e)
    assert "env 0 panicked at src/lib.rs:" in e.remote_traceback
    # The worker lives on: the panicked env's episode was cut, the vector env is usable.
    obs, infos = envs.reset(seed=0, options={"level": 2})
    assert (obs["grid"] == 3).sum() == 2 * 3  # level 2 has three boxes off their goals


def test_a_rust_envs_reset_options_travel_as_json_and_other_values_are_refused_naming_why(closing):
    import numpy as np
    from ringenv._pickling import reset_payload

    options = {"level": 2, "path": (1, "a", None), "deep": {"x": [0.5, True]}}
    seeds, payload = reset_payload([3, None], options, rust_envs=True)
    assert seeds == [3, None]
    assert json.loads(payload) == {"level": 2, "path": [1, "a", None], "deep": {"x": [0.5, True]}}
    assert reset_payload([None], None, rust_envs=True) == ([None], None)
    # NumPy numbers are the Python numbers they hold, as in a Rust env's kwargs
    assert json.loads(reset_payload([None], {"level": np.int64(2), "xs": np.arange(2)}, rust_envs=True)[1]) == \
        {"level": 2, "xs": [0, 1]}
    for bad in ({1: "a"}, {"x": [float("nan")]}, {"f": object()}):
        with pytest.raises(TypeError, match="the reset options of a Rust env must"):
            reset_payload([None], bad, rust_envs=True)
    # Refused before anything is sent: the vector env stays usable, synchronous or batched.
    for vector_kwargs in ({}, {"num_workers": 2, "batch_size": 2}):
        envs = closing(ringenv.make_vec("CartPole-v1", 4, vector_kwargs=vector_kwargs))
        reset = envs.reset if not vector_kwargs else envs.async_reset
        for _ in range(2):
            with pytest.raises(TypeError, match="the reset options of a Rust env must"):
                reset(seed=0, options={"level": float("nan")})
        reset(seed=0, options={"level": 2})
        if vector_kwargs:
            assert sorted(np.concatenate([envs.recv()[-1]["env_id"] for _ in range(2)])) == [0, 1, 2, 3]


def test_under_the_restart_policy_a_panic_is_a_worker_failure(closing, worker):
    envs = closing(ringenv.make_vec("custom_env:Sokoban-v0", 2, worker=worker, vector_kwargs={
        "num_workers": 1, "on_worker_failure": "restart", "max_restarts": 1}))
    envs.reset(seed=0)
    # The reset is replayed on the restarted worker (same options): it dies again, which is a
    # crash loop; the death is the panic's exit status, and its last error the panic itself.
    with pytest.raises(errors.WorkerDiedError) as info:
        envs.reset(options={"level": 99})
    e = info.value
    assert e.exitcode == 101
    assert e.last_error["kind"] == "panic" and e.last_error["env_id"] in (0, 1)
    assert re.search(r"Sokoban reset option level = 99 is out of range: there are 4 levels "
                     r"\(panicked at src/lib\.rs:\d+:\d+\)", e.last_error["message"]), e.last_error
    assert re.search(r"its last error: panic: Sokoban reset option level = 99 .* \(panicked at src/lib\.rs:\d+:\d+\) "
                     r"\(env [01]\)", str(e)), str(e)


# -- every space kind ------------------------------------------------------------------------------

ZOO_CARGO = """\
[package]
name = "zoo"
version = "0.1.0"
edition = "2021"

[workspace]

[dependencies]
ringenv-worker = {{ path = "{workers}" }}
serde = {{ version = "1", features = ["derive"] }}
"""

ZOO_MAIN = r"""
use ringenv_worker::{Ctx, DType, Env, Space, Step};

/// A Dict of every flat kind (and a nested Tuple); the leaves are functions of a counter `c`.
struct Zoo { c: u64 }
type Obs<'a> = (&'a mut [f64], &'a mut [u8], &'a mut [i64], &'a mut [i32], &'a mut [i8], &'a mut [i16], &'a mut [u64]);
impl Env for Zoo {
    type Obs = (f64, u8, i64, i32, i8, i16, u64);
    type Action = i64;
    fn observation_space(&self) -> Space {
        Space::dict([
            ("pos", Space::Box { dtype: DType::F64, shape: vec![2], low: vec![f64::NEG_INFINITY, -1.0],
                                 high: vec![f64::INFINITY, 1e9] }),
            ("mask", Space::boxed(DType::Bool, &[2, 2], 0.0, 1.0)),
            ("count", Space::Discrete { n: 5, start: -2 }),
            ("md", Space::MultiDiscrete { nvec: vec![3, 4], start: vec![0, 1], dtype: DType::I32 }),
            ("mb", Space::MultiBinary { shape: vec![3] }),
            ("t", Space::tuple([Space::boxed(DType::I16, &[2], -5.0, 5.0),
                                Space::boxed(DType::U64, &[], 0.0, f64::INFINITY)])),
        ])
    }
    fn action_space(&self) -> Space { Space::multi_discrete(&[3, 3]) }
    fn reset(&mut self, obs: Obs<'_>, ctx: &mut Ctx) {
        self.c = ringenv_worker::rand::Rng::random_range(ctx.rng(), 0..100);
        self.write(obs);
    }
    fn step(&mut self, action: &[i64], obs: Obs<'_>, _: &mut Ctx) -> Step {
        self.c += (action[0] + 1) as u64;
        self.write(obs);
        Step { reward: action[1] as f32, terminated: false, truncated: false }
    }
}
impl Zoo {
    fn write(&self, (pos, mask, count, md, mb, small, big): Obs<'_>) {
        let c = self.c;
        pos.copy_from_slice(&[c as f64 * 0.5, c as f64]);
        mask.copy_from_slice(&[(c % 2) as u8, 1, 0, (c % 3 == 0) as u8]);
        count[0] = (c % 5) as i64 - 2;
        md.copy_from_slice(&[(c % 3) as i32, 1 + (c % 4) as i32]);
        mb.copy_from_slice(&[1, 0, (c % 2) as i8]);
        small.copy_from_slice(&[(c % 11) as i16 - 5, 5]);
        big[0] = c;
    }
}

/// A 2-D float64 observation that repeats a float32 Box action.
struct Echo;
impl Env for Echo {
    type Obs = f64;
    type Action = f32;
    fn observation_space(&self) -> Space { Space::boxed(DType::F64, &[2, 3], -1.0, 1.0) }
    fn action_space(&self) -> Space { Space::boxed(DType::F32, &[2], -1.0, 1.0) }
    fn reset(&mut self, obs: &mut [f64], _: &mut Ctx) { obs.fill(0.0); }
    fn step(&mut self, action: &[f32], obs: &mut [f64], _: &mut Ctx) -> Step {
        for (k, o) in obs.iter_mut().enumerate() { *o = f64::from(action[k / 3]); }
        Step { reward: action[0] + action[1], terminated: false, truncated: false }
    }
}

/// A Tuple observation (Discrete, bool Box) of a MultiBinary action.
struct Bits;
impl Env for Bits {
    type Obs = (i64, u8);
    type Action = i8;
    fn observation_space(&self) -> Space {
        Space::tuple([Space::discrete(8), Space::boxed(DType::Bool, &[3], 0.0, 1.0)])
    }
    fn action_space(&self) -> Space { Space::multi_binary(3) }
    fn reset(&mut self, (n, bits): (&mut [i64], &mut [u8]), _: &mut Ctx) { n[0] = 0; bits.fill(0); }
    fn step(&mut self, a: &[i8], (n, bits): (&mut [i64], &mut [u8]), _: &mut Ctx) -> Step {
        n[0] = i64::from(a[0]) * 4 + i64::from(a[1]) * 2 + i64::from(a[2]);
        for (b, &x) in bits.iter_mut().zip(a) { *b = x as u8; }
        Step::default()
    }
}

/// A Dict action: refused, Rust envs take one flat action array.
struct DictAction;
impl Env for DictAction {
    type Obs = f32;
    type Action = i64;
    fn observation_space(&self) -> Space { Space::boxed(DType::F32, &[1], 0.0, 1.0) }
    fn action_space(&self) -> Space { Space::dict([("a", Space::discrete(2))]) }
    fn reset(&mut self, _: &mut [f32], _: &mut Ctx) {}
    fn step(&mut self, _: &[i64], _: &mut [f32], _: &mut Ctx) -> Step { Step::default() }
}

ringenv_worker::worker_main! {
    "Zoo-v0" => || Zoo { c: 0 },
    "Echo-v0" => || Echo,
    "Bits-v0" => || Bits,
    "DictAction-v0" => || DictAction,
}
"""


@pytest.fixture(scope="session")
def zoo(tmp_path_factory) -> str:
    crate = tmp_path_factory.mktemp("zoo")
    (crate / "Cargo.toml").write_text(ZOO_CARGO.format(workers=REPO / "workers"))
    (crate / "src").mkdir()
    (crate / "src" / "main.rs").write_text(textwrap.dedent(ZOO_MAIN))
    lock = EXAMPLE / "Cargo.lock"  # the versions ringenv is built with: nothing new to compile
    (crate / "Cargo.lock").write_text(lock.read_text().replace('name = "custom_env"', 'name = "zoo"'))
    target = str(_target_dir())
    done = None
    for offline in (True, False):
        done = _run(["cargo", "build", "--target-dir", target], crate, env=_cargo_env(offline))
        if done.returncode == 0:
            return str(Path(target) / "debug" / "zoo")
    assert done is not None
    raise AssertionError(done.stdout[-3000:] + done.stderr[-3000:])


def test_every_space_kind_round_trips(closing, zoo):
    envs = closing(ringenv.make_vec("zoo:Zoo-v0", 3, worker=zoo, vector_kwargs={"num_workers": 2}))
    expected = gym.spaces.Dict([
        ("pos", gym.spaces.Box(np.array([-np.inf, -1.0]), np.array([np.inf, 1e9]), (2,), np.float64)),
        ("mask", gym.spaces.Box(0, 1, (2, 2), np.bool_)),
        ("count", gym.spaces.Discrete(5, start=-2)),
        ("md", gym.spaces.MultiDiscrete(np.array([3, 4]), dtype=np.int32, start=np.array([0, 1]))),
        ("mb", gym.spaces.MultiBinary(3)),
        ("t", gym.spaces.Tuple([gym.spaces.Box(-5, 5, (2,), np.int16),
                                gym.spaces.Box(0, np.iinfo(np.uint64).max, (), np.uint64)])),
    ])
    assert envs.single_observation_space == expected
    assert list(envs.single_observation_space.spaces) == list(expected.spaces)
    assert envs.single_action_space == gym.spaces.MultiDiscrete([3, 3])
    obs, _ = envs.reset(seed=5)
    rng = np.random.default_rng(0)
    for t in range(30):
        assert obs in envs.observation_space
        c = obs["t"][1].astype(np.int64)
        assert_identical(obs["pos"], np.stack([c * 0.5, c.astype(np.float64)], axis=1), f"pos at {t}")
        assert_identical(obs["mask"], np.stack([c % 2 == 1, np.ones(3, bool), np.zeros(3, bool), c % 3 == 0],
                                               axis=1).reshape(3, 2, 2), f"mask at {t}")
        assert_identical(obs["count"], c % 5 - 2, f"count at {t}")
        assert_identical(obs["md"], np.stack([c % 3, 1 + c % 4], axis=1).astype(np.int32), f"md at {t}")
        assert_identical(obs["mb"], np.stack([np.ones(3), np.zeros(3), c % 2], axis=1).astype(np.int8), f"mb at {t}")
        assert_identical(obs["t"][0], np.stack([c % 11 - 5, np.full(3, 5)], axis=1).astype(np.int16), f"t.0 at {t}")
        actions = rng.integers(0, 3, size=(3, 2))
        obs, rewards, _, _, _ = envs.step(actions)
        assert_identical(obs["t"][1].astype(np.int64), c + actions[:, 0] + 1, f"c after step {t}")
        assert_identical(rewards, actions[:, 1].astype(np.float64))


def test_box_and_multibinary_actions_cross_shared_memory(closing, zoo):
    envs = closing(ringenv.make_vec("Echo-v0", 2, worker=zoo))
    assert envs.single_observation_space == gym.spaces.Box(-1, 1, (2, 3), np.float64)
    assert envs.single_action_space == gym.spaces.Box(-1, 1, (2,), np.float32)
    envs.reset(seed=0)
    action = np.array([[0.25, -0.5], [1.0, 0.125]], dtype=np.float32)
    obs, rewards, _, _, _ = envs.step(action)
    assert_identical(obs, np.repeat(action.astype(np.float64), 3, axis=1).reshape(2, 2, 3))
    assert_identical(rewards, action.sum(axis=1).astype(np.float64))

    envs = closing(ringenv.make_vec("Bits-v0", 4, worker=zoo))
    assert envs.single_observation_space == gym.spaces.Tuple([gym.spaces.Discrete(8), gym.spaces.Box(0, 1, (3,), bool)])
    envs.reset(seed=0)
    bits = np.array([[0, 0, 1], [1, 1, 0], [1, 1, 1], [0, 1, 0]], dtype=np.int8)
    (numbers, flags), *_ = envs.step(bits)
    assert_identical(numbers, np.array([1, 6, 7, 2]))
    assert_identical(flags, bits.astype(bool))


def test_a_dict_action_space_is_refused_before_any_worker_starts(zoo):
    with pytest.raises(ValueError, match="InvalidSpace: DictAction-v0: the action space is a Dict or Tuple"):
        ringenv.make_vec("DictAction-v0", 2, worker=zoo)
