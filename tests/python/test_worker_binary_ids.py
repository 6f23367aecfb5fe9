"""A worker binary asked for an env it does not serve, or named without an env, says so.

- An unknown id raises Gymnasium's error type, as ``gymnasium.make`` does for an id it does not
  know (``NameNotFound``, or ``VersionNotFound`` when only the ``-vN`` version is wrong), and is
  still a ``ValueError`` (what ringenv raised before); the message names the binary and its ids.
- A binary's path without ``:ID`` (``make_vec(PATH)``, ``ringenv tune PATH``) names the spelling
  ``PATH:ID`` and lists the ids the binary serves (``PATH list``), instead of Gymnasium's
  "malformed id".

The binary is the example crate ``examples/symbolic``'s (it serves ``BlocksWorld-v0``), built once
per session with cargo (conftest's ``symbolic_worker``).
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import ringenv
import ringenv.cli
from ringenv import registration
from ringenv.registration import WorkerIdMissing, WorkerNameNotFound, WorkerVersionNotFound

IDS = '["BlocksWorld-v0"]'


@pytest.fixture
def binary(symbolic_worker: str) -> str:
    return symbolic_worker


def test_an_unknown_id_is_gymnasiums_name_not_found_and_a_value_error(binary):
    for call in (lambda: ringenv.make_vec("Nope-v0", 2, worker=binary),
                 lambda: ringenv.make_vec(f"{binary}:Nope-v0", 2)):
        with pytest.raises(gym.error.NameNotFound) as info:
            call()
        assert type(info.value) is WorkerNameNotFound and isinstance(info.value, ValueError)
        assert str(info.value) == (f"worker binary {binary!r}: no env \"Nope-v0\" in symbolic; its ids are {IDS} "
                                   "(also spelled symbolic:ID)")


def test_an_unknown_version_of_a_served_env_is_version_not_found(binary):
    with pytest.raises(gym.error.VersionNotFound) as info:
        ringenv.make_vec(f"{binary}:BlocksWorld-v9", 2)
    assert type(info.value) is WorkerVersionNotFound and isinstance(info.value, ValueError)
    assert str(info.value) == (f"worker binary {binary!r}: no env \"BlocksWorld-v9\" in symbolic (BlocksWorld is "
                               f"served as BlocksWorld-v0); its ids are {IDS} (also spelled symbolic:ID)")
    # an unknown name is not a version problem
    with pytest.raises(WorkerNameNotFound):
        ringenv.make_vec("symbolic:Blocks-v0", 2, worker=binary)


def test_gymnasium_make_vec_of_a_registered_id_the_binary_does_not_serve_raises_name_not_found(binary):
    ringenv.register("hB/NotServed-v0", worker=binary, rust_id="NotServed-v0")
    try:
        with pytest.raises(gym.error.NameNotFound, match=r'no env "NotServed-v0" in symbolic; its ids are'):
            gym.make_vec("hB/NotServed-v0", 2, vectorization_mode="vector_entry_point")
    finally:
        del gym.registry["hB/NotServed-v0"]


def test_a_binary_without_an_id_lists_its_ids(binary):
    with pytest.raises(WorkerIdMissing) as info:
        ringenv.make_vec(binary, 2)
    assert isinstance(info.value, gym.error.Error) and isinstance(info.value, ValueError)
    assert str(info.value) == (f"{binary} is a worker binary: name an env as {binary}:ID; it serves "
                               "BlocksWorld-v0")
    assert registration.worker_env_ids(binary) == ["BlocksWorld-v0"]


def test_a_program_that_is_not_a_worker_binary_given_as_an_id_is_named_and_not_run(tmp_path):
    ran = tmp_path / "ran"
    script = tmp_path / "not_a_worker"
    script.write_text(f"#!/bin/sh\necho \"$@\" > {ran}\necho hello\n")
    script.chmod(0o755)
    with pytest.raises(WorkerIdMissing) as info:
        ringenv.make_vec(str(script), 2)
    assert str(info.value) == (f"{script} is a program, not an env id (and not a ringenv worker binary, whose env "
                               "would be named PATH:ID)")
    assert not ran.exists(), "a program that is not a worker binary is not run"
    # asked for explicitly, its ids are asked for, and its answer is refused
    with pytest.raises(ValueError, match=r"is not a ringenv worker binary: `list` exited with status 0 and printed "
                                         r"no env ids \(JSONDecodeError; hello\)"):
        registration.worker_env_ids(script)
    assert ran.read_text() == "list\n"


def test_a_program_holding_the_worker_mark_that_answers_no_ids_is_named(tmp_path):
    # (the mark is what the SDK's binaries hold; this script holds it in a comment)
    script = tmp_path / "marked"
    script.write_text(f"#!/bin/sh\n# {registration._WORKER_MARK.decode()}\necho nope\n")
    script.chmod(0o755)
    with pytest.raises(WorkerIdMissing) as info:
        ringenv.make_vec(str(script), 2)
    assert str(info.value).startswith(f"{script} is a program, not an env id: an env of a worker binary is named "
                                      f"PATH:ID (and '{script}' is not a ringenv worker binary: `list` exited with "
                                      "status 0 and printed no env ids"), str(info.value)


def test_the_worker_mark_is_found_across_chunk_boundaries(tmp_path):
    mark = registration._WORKER_MARK
    for split in (0, 1, len(mark) // 2, len(mark) - 1):
        path = tmp_path / f"f{split}"
        path.write_bytes(b"x" * (64 - split) + mark + b"y" * 10)
        assert registration._holds_worker_mark(str(path), chunk=64), split
    path = tmp_path / "cut"
    path.write_bytes(b"x" * 60 + mark[:-1] + b"y" * 10)
    assert not registration._holds_worker_mark(str(path), chunk=64)


def test_tune_of_a_binary_without_an_id_is_a_usage_error_listing_its_ids(binary, capsys):
    code = ringenv.cli.main(["tune", binary, "--num-envs", "2", "--workers", "1"])
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, "")
    assert captured.err == (f"ringenv tune: error: argument ENV: {binary} is a worker binary: name an env as "
                            f"{binary}:ID; it serves BlocksWorld-v0\n")


def test_tune_of_an_unknown_version_names_the_served_one(binary, capsys):
    code = ringenv.cli.main(["tune", f"{binary}:BlocksWorld-v1", "--num-envs", "2", "--workers", "1"])
    captured = capsys.readouterr()
    assert code == 2
    assert "(BlocksWorld is served as BlocksWorld-v0)" in captured.err, captured.err
