"""Assertions shared by the ringenv tests (comparisons of vector env outputs, process checks)."""

from __future__ import annotations

import os
import time
from typing import Iterable, List, Set

import numpy as np


def assert_identical(actual, expected, what: str = "array") -> None:
    """``actual`` and ``expected`` have the same dtype, shape and values, bit for bit."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if actual.dtype == object:
        assert actual.tolist() == expected.tolist(), f"{what}: {actual!r} != {expected!r}"
    else:
        assert np.array_equal(actual, expected), f"{what}: {actual!r} != {expected!r}"
        assert actual.tobytes() == expected.tobytes(), f"{what}: not bit-identical"


def assert_tree_identical(actual, expected, what: str = "obs") -> None:
    """Two (possibly nested) observations are identical: the same container types (dict with the
    same keys in the same order, tuple or named tuple of the same length), arrays of the same
    dtype, shape and bytes, and leaves (str, int, NumPy scalars, None) of the same type and value."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{what}: {type(actual).__name__} is not a dict"
        assert list(actual) == list(expected), f"{what}: keys {list(actual)} != {list(expected)}"
        for key in expected:
            assert_tree_identical(actual[key], expected[key], f"{what}[{key!r}]")
    elif isinstance(expected, tuple):  # tuples, and named tuples such as GraphInstance
        assert type(actual) is type(expected), f"{what}: {type(actual).__name__} != {type(expected).__name__}"
        assert len(actual) == len(expected), f"{what}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_tree_identical(a, e, f"{what}[{i}]")
    elif isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), f"{what}: {type(actual).__name__} is not an ndarray"
        if expected.dtype == object:
            assert actual.dtype == object and actual.shape == expected.shape, (
                f"{what}: {actual.dtype}{actual.shape} != {expected.dtype}{expected.shape}")
            for index in np.ndindex(expected.shape):
                assert_tree_identical(actual[index], expected[index], f"{what}[{index}]")
        else:
            assert_identical(actual, expected, what)
    elif isinstance(expected, np.generic):
        assert type(actual) is type(expected), f"{what}: {type(actual).__name__} != {type(expected).__name__}"
        assert actual.tobytes() == expected.tobytes(), f"{what}: {actual!r} != {expected!r}"
    else:
        assert type(actual) is type(expected), f"{what}: {type(actual).__name__} != {type(expected).__name__}"
        assert actual == expected, f"{what}: {actual!r} != {expected!r}"


def assert_infos_equal(actual: dict, expected: dict, what: str = "infos") -> None:
    """Vectorised infos are identical: the same keys in the same order (``_key`` masks included) and nested dicts,
    identical arrays, and object arrays (``final_obs``, strings, ...) identical element by element."""
    assert isinstance(actual, dict), f"{what}: {type(actual).__name__} is not a dict"
    assert list(actual) == list(expected), f"{what}: keys {list(actual)} != {list(expected)} (in order)"
    for key, value in expected.items():
        if isinstance(value, dict):
            assert_infos_equal(actual[key], value, f"{what}[{key!r}]")
        else:
            assert_tree_identical(actual[key], value, f"{what}[{key!r}]")


def assert_step_identical(actual, expected, what: str = "step") -> None:
    """Two ``(obs, rewards, terminations, truncations, infos)`` tuples are identical (observations
    of any space)."""
    assert isinstance(actual, tuple) and len(actual) == len(expected) == 5
    assert_tree_identical(actual[0], expected[0], f"{what} obs")
    for name, a, e in zip(("rewards", "terminations", "truncations"), actual[1:4], expected[1:4]):
        assert_identical(a, e, f"{what} {name}")
    assert_infos_equal(actual[4], expected[4], f"{what} infos")


def assert_resets_identical(ours, ref, seed, what: str = "reset") -> None:
    """Resets both vector envs with ``seed``; their observations and infos must be identical."""
    obs, infos = ours.reset(seed=seed)
    ref_obs, ref_infos = ref.reset(seed=seed)
    assert_identical(obs, ref_obs, f"{what} obs")
    assert_infos_equal(infos, ref_infos, f"{what} infos")


def notes_by_env(error: BaseException) -> dict:
    """``{env id: note}`` of the "env N raised in the same call too" notes on ``error`` (one per
    other env whose error came with it); fails on a note of any other form than those and the
    "(raised in env N)" naming the raised error's own env."""
    notes = {}
    for note in getattr(error, "__notes__", []):
        if note == f"(raised in env {getattr(error, 'env_id', None)})":
            continue
        head = note.split(":", 1)[0]
        assert head.startswith("env ") and head.endswith(" raised in the same call too"), note
        notes[int(head.split()[1])] = note
    return notes


def pid_exists(pid: int) -> bool:
    """Whether process ``pid`` exists. A zombie child of this process counts (ringenv must reap
    its workers); a zombie whose parent is another process does not: it has exited, and reaping
    it is that parent's job (an orphan's parent is init, which in some sandboxes reaps late)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else (the pid was reused)
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        state, ppid = fields[0], int(fields[1])
    except (OSError, IndexError, ValueError):
        return True
    return not (state == "Z" and ppid != os.getpid())


def wait_pids_gone(pids: Iterable[int], timeout: float = 1.0) -> List[int]:
    """Polls until no process of ``pids`` exists or ``timeout`` passes; returns those left."""
    deadline = time.monotonic() + timeout
    left = [p for p in pids if pid_exists(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = [p for p in left if pid_exists(p)]
    return left


def child_pids() -> Set[int]:
    """Pids of this process's children (zombies included)."""
    me = os.getpid()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        if ppid == me:
            found.add(int(entry))
    return found


def wait_new_children_gone(before: Set[int], timeout: float = 1.0) -> Set[int]:
    """Polls until every child of this process not in ``before`` is gone (reaped) or
    ``timeout`` passes; returns those left."""
    deadline = time.monotonic() + timeout
    left = child_pids() - before
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = child_pids() - before
    return left
