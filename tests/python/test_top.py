"""``ringenv top``: it shows the pools running for this user in 80 columns, notices one ending,
finds no trace of a pool whose main process was killed, marks impossible counters as corrupt,
flushes each frame when piped and ends cleanly on SIGTERM, and rejects bad arguments.

It trusts no file: any process can hold a memfd named ``ringenv``, so fake holders (forked from the
test, optionally as another user) hold a FIFO, a socket, a device, an unsealed memfd, or a sealed
memfd of hostile bytes. ``top`` must refuse each without blocking, read hostile counters bounded
and show them as corrupt, and print env error texts literally (never as rich markup)."""

from __future__ import annotations

import contextlib
import functools
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest
from rich.console import Console

import ringenv
from ringenv import _native
from ringenv.cli import top
from helper_envs import CallEnv
from vec_asserts import wait_pids_gone

ENV80 = dict(os.environ, COLUMNS="80")


def _top(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ringenv.cli", "top", *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV80)


def _fits(text: str, width: int = 80) -> None:
    long = [line for line in text.splitlines() if len(line) > width]
    assert not long, f"lines wider than {width} columns: {long}"


def _my_pools():
    return [p for p in _native.list_pools() if p["pid"] == os.getpid()]


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_top_shows_a_running_pool_with_its_workers_and_counts_in_80_columns(closing):
    envs = closing(ringenv.make_vec("CartPole-v1", 4, vector_kwargs={"num_workers": 2}))
    envs.reset(seed=0)
    for _ in range(25):
        envs.step(np.ones(4, dtype=np.int64))
    pids = envs._pool.worker_pids()
    out = _top("--once", "--interval", "0.2")
    assert out.returncode == 0, out.stderr
    _fits(out.stdout)
    flat = _flat(out.stdout)
    assert f"pool of pid {os.getpid()}: 4 envs, 2 workers" in flat, out.stdout
    assert "26 commands" in flat, out.stdout  # 1 reset + 25 steps
    for pid in pids:
        assert str(pid) in out.stdout
    assert "env ids" not in out.stdout
    wide = _top("--once", "--interval", "0.2", "--wide")
    assert wide.returncode == 0, wide.stderr
    assert "[0, 1]" in wide.stdout and "[2, 3]" in wide.stdout  # each worker's env indices
    assert "52" in wide.stdout  # 26 commands x 2 envs per worker


def _render(view, width: int = 80) -> str:
    console = Console(record=True, width=width, file=open(os.devnull, "w"))
    console.print(view)
    return console.export_text()


def test_a_closed_pool_leaves_no_entry_and_top_notices_it_ending(closing):
    envs = closing(ringenv.make_vec("CartPole-v1", 2, vector_kwargs={"num_workers": 1}))
    envs.reset(seed=0)
    [entry] = _my_pools()
    key = (entry["pid"], entry["fd"])
    # top's own refresh step, twice around the close (deterministic: no racing a live top).
    before = top._snapshots()
    assert key in before
    envs.close()
    after = top._snapshots()
    ended = top._ended(before, after)
    assert key in ended
    assert f"pool of pid {os.getpid()} (segment fd {entry['fd']}) ended" in _render(top._view(after, before, 1.0, ended))
    assert _my_pools() == [], "a closed pool leaves no entry"


def test_a_forked_child_keeping_its_copy_does_not_keep_a_closed_pool_listed(closing):
    """A fork child (a DataLoader worker) keeps its inherited copy of the env, and so of the
    segment's descriptor; the parent closes the env: the pool is no longer listed."""
    envs = closing(ringenv.make_vec("CartPole-v1", 2, vector_kwargs={"num_workers": 1}))
    envs.reset(seed=0)
    [entry] = _my_pools()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # keeps `envs` until the parent closes the pipe, then exits
        try:
            os.close(write_end)
            os.read(read_end, 1)
        finally:
            os._exit(0)
    os.close(read_end)
    try:
        assert os.readlink(f"/proc/{child}/fd/{entry['fd']}") == "/memfd:ringenv (deleted)"
        envs.close()
        still = [p for p in _native.list_pools() if p["pid"] in (os.getpid(), child)]
    finally:
        os.close(write_end)
        os.waitpid(child, 0)
    assert still == [], "a closed pool stayed listed while a fork child held its copy"


def test_a_killed_main_process_leaves_no_entry_and_no_worker(tmp_path):
    script = tmp_path / "pool_owner.py"
    script.write_text(textwrap.dedent("""
        import sys, time, ringenv
        envs = ringenv.make_vec("CartPole-v1", 2, vector_kwargs={"num_workers": 1})
        envs.reset(seed=0)
        print(" ".join(map(str, envs._pool.worker_pids())), flush=True)
        time.sleep(60)
    """))
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        worker_pids = [int(p) for p in owner.stdout.readline().split()]
        entries = [p for p in _native.list_pools() if p["pid"] == owner.pid]
        assert len(entries) == 1, _native.list_pools()
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=10)
        assert wait_pids_gone(worker_pids, timeout=30.0) == [], "workers die with their main process"
        assert [p for p in _native.list_pools() if p["pid"] in (owner.pid, *worker_pids)] == []
    finally:
        if owner.poll() is None:
            owner.kill()


def test_pool_snapshot_names_what_is_wrong():
    with pytest.raises(FileNotFoundError, match=f"cannot open descriptor 999 of process {os.getpid()}"):
        _native.pool_snapshot(os.getpid(), 999)


def test_top_rejects_bad_arguments():
    for args, word in [(["--interval", "0"], "--interval"), (["--interval", "inf"], "--interval"),
                       (["--interval", "1e300"], "--interval"), (["--iterations", "0"], "--iterations")]:
        out = _top(*args)
        assert out.returncode == 2, (args, out)
        assert word in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_piped_top_flushes_each_frame_and_ends_on_sigterm_with_a_newline(closing):
    envs = closing(ringenv.make_vec("CartPole-v1", 2, vector_kwargs={"num_workers": 1}))
    envs.reset(seed=0)
    proc = subprocess.Popen([sys.executable, "-m", "ringenv.cli", "top", "--interval", "0.05"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV80)
    try:
        seen = []
        while f"pool of pid {os.getpid()}:" not in (line := proc.stdout.readline()):  # a frame, flushed
            assert line, f"top ended before a frame: {proc.stderr.read()}"
            seen.append(line)
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(seen) + line + rest
    assert proc.returncode == top.TERMINATED == 143, err
    assert out.endswith("\n") and err == "ringenv top: terminated\n", (out[-200:], err)
    _fits(out)


def test_no_pool_is_one_line_of_its_own():
    text = _render(top._view({}, {}, 1.0, []))
    assert text == "no ringenv pools running for this user\n"


# ---------------------------------------------------------------------------------------------
# Counters that cannot be


def _snap(**over):
    now = 10**18
    snap = {"pid": 7, "fd": 3, "num_envs": 2, "main_pid": 7, "commands": 10, "wait_ns": 0,
            "created_unix_ns": now - 10**9, "main_sleeps": 0, "main_spins": 0,
            "workers": [{"pid": 8, "env_ids": range(0, 2), "commands": 10, "env_steps": 20, "busy_ns": 5,
                         "wait_ns": 5, "sleeps": 0, "spins": 0, "restarts": 0, "last_error": ""}]}
    worker = over.pop("worker", {})
    snap.update(over)
    snap["workers"][0].update(worker)
    return snap, now


@pytest.mark.parametrize("over,why", [
    ({}, None),
    ({"created_unix_ns": 10**18 + 5 * 10**9}, "created in the future"),
    ({"main_pid": 9}, "recorded main process 9 does not hold it"),
    ({"commands": 2**64 - 1}, "more than one a nanosecond"),
    ({"worker": {"pid": 2**32 - 1}}, "pid 4294967295 is beyond the kernel's"),
    ({"worker": {"restarts": 2**32 - 1}}, "restarted 2^32 - 1 times"),
    ({"worker": {"env_steps": 21}}, "more env steps than its commands can"),
    ({"worker": {"busy_ns": 2 * 10**9}}, "busy or waiting longer than the pool exists"),
    ({"worker": {"pid": 0}}, None),  # not started yet
])
def test_impossible_counters_mark_a_pool_corrupt_instead_of_showing_them(over, why):
    snap, now = _snap(**over)
    reasons = top.corrupt(snap, now)
    text = _render(top._view({(7, 3): snap}, {}, 1.0, [], now_ns=now))
    _fits(text)
    if why is None:
        assert reasons == [] and "pool of pid 7: 2 envs, 1 worker, up 1 s" in _flat(text), text
    else:
        assert any(why in r for r in reasons), reasons
        assert "pool of pid 7 (segment fd 3): corrupt counters, not shown" in _flat(text) and why in _flat(text)
        assert "restarts" not in text, "no table of numbers"


# ---------------------------------------------------------------------------------------------
# top trusts no file


def _hold_in_child(w: int, kind: str, content: bytes, uid: "int | None") -> None:
    """Runs in a forked child: becomes user ``uid`` if given, opens a descriptor of ``kind`` and
    holds it until killed."""
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if kind == "fifo":  # the read end with no writer: opening this FIFO by path would block
        path = os.path.join(tempfile.mkdtemp(), "fifo")
        os.mkfifo(path)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    elif kind == "socket":
        fd = socket.socketpair()[0].detach()
    elif kind == "device":
        fd = os.open("/dev/null", os.O_RDONLY)
    elif kind == "directory":
        fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    elif kind == "unsealed memfd":
        fd = os.memfd_create("ringenv")
        os.pwrite(fd, content, 0)
    elif kind == "sealed memfd":
        import fcntl
        fd = os.memfd_create("ringenv", os.MFD_ALLOW_SEALING)
        os.pwrite(fd, content, 0)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK)
    else:
        raise ValueError(kind)
    os.write(w, f"{fd}\n".encode())
    while True:
        signal.pause()


@contextlib.contextmanager
def _fake_holder(kind: str, content: bytes = b"", uid=None):
    """Forks a process holding a descriptor of ``kind``; yields ``(pid, fd)``; kills it on exit."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: keep only the pipe's write end, hold until killed
        try:
            os.close(r)
            os.closerange(3, w)
            os.closerange(w + 1, 4096)
            _hold_in_child(w, kind, content, uid)
        finally:
            os._exit(1)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], 60.0)
        assert ready, "the fake holder did not start"
        line = os.read(r, 4096).decode().strip()
        assert line, "the fake holder failed to start"
        yield pid, int(line)
    finally:
        os.close(r)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _real_segment_bytes(closing) -> bytes:
    """The bytes of a real pool's segment (a valid header for this build)."""
    envs = closing(ringenv.make_vec("CartPole-v1", 2, vector_kwargs={"num_workers": 1, "inline": False}))
    envs.reset(seed=0)
    [entry] = _my_pools()
    with open(f"/proc/self/fd/{entry['fd']}", "rb") as f:
        return f.read()


def _top_once() -> subprocess.CompletedProcess:
    return _top("--once", "--interval", "0.01")


@pytest.mark.parametrize("kind, reason", [
    ("fifo", "FIFO"),
    ("socket", "socket"),
    ("device", "character device"),
    ("directory", "directory"),
    ("unsealed memfd", "not sealed"),
])
def test_a_descriptor_that_is_not_a_sealed_memfd_is_refused_without_blocking(kind, reason):
    with _fake_holder(kind, content=b"RINGENV\0" + bytes(8192)) as (pid, fd):
        with pytest.raises(OSError, match=reason):
            _native.pool_snapshot(pid, fd)
        listed = [e for e in _native.list_pools() if e["pid"] == pid]
        assert listed == ([{"pid": pid, "fd": fd}] if kind == "unsealed memfd" else []), "only a memfd named ringenv"
        # The whole of top, in another process: it must finish and never show it as a pool.
        out = _top_once()
        assert out.returncode == 0, out.stderr
        assert f"pool of pid {pid}" not in out.stdout, out.stdout
        if listed:
            assert f"ignored /proc/{pid}/fd/{fd}:" in out.stdout and reason in _flat(out.stdout), out.stdout


def test_a_sealed_memfd_of_hostile_counters_is_read_bounded_and_shown_corrupt(closing):
    real = _real_segment_bytes(closing)
    hostile = real[:4096] + b"\xff" * (len(real) - 4096)  # a valid header, then all ones
    with _fake_holder("sealed memfd", content=hostile) as (pid, fd):
        assert {"pid": pid, "fd": fd} in _native.list_pools(), "its recorded main process (2^32 - 1) does not run"
        snap = _native.pool_snapshot(pid, fd)
        assert snap["pid"] == pid and snap["num_envs"] == 2 and len(snap["workers"]) == 1
        assert snap["commands"] == 2**64 - 1 and snap["main_pid"] == 2**32 - 1
        [w] = snap["workers"]
        assert (w["pid"], w["env_steps"], w["sleeps"]) == (2**32 - 1, 2**64 - 1, 2**32 - 1)
        assert w["last_error"] == "", "an error text whose sequence stays odd is given up on"
        out = _top_once()
        assert out.returncode == 0, out.stderr
        _fits(out.stdout)
        assert f"pool of pid {pid} (segment fd {fd}): corrupt counters, not shown" in _flat(out.stdout), out.stdout
        assert f"pool of pid {pid}:" not in out.stdout, "no header of numbers"


def test_a_sealed_memfd_of_random_bytes_is_refused_with_the_header_error(closing):
    size = len(_real_segment_bytes(closing))
    garbage = np.random.default_rng(13).integers(0, 256, size, dtype=np.uint8).tobytes()
    with _fake_holder("sealed memfd", content=garbage) as (pid, fd):
        with pytest.raises(OSError, match="not a ringenv segment"):
            _native.pool_snapshot(pid, fd)
        out = _top_once()
        assert out.returncode == 0, out.stderr
        assert f"pool of pid {pid}" not in out.stdout and "not a ringenv segment" in _flat(out.stdout), out.stdout


MARKUP = "no such file: [/data/x] [red]x[/]\x1b\x07"


def test_an_env_error_with_markup_is_printed_literally_by_top(closing):
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(CallEnv, i) for i in range(2)]))
    envs.reset(seed=0)
    with pytest.raises(Exception, match="no such file"):
        envs.call("fail_call", MARKUP)  # env 1 raises: its worker records the text as last error
    [entry] = _my_pools()
    [_, w1] = _native.pool_snapshot(entry["pid"], entry["fd"])["workers"]
    assert MARKUP in w1["last_error"]
    out = _top("--once", "--interval", "0.01", "--wide")  # room for the whole text
    assert out.returncode == 0, out.stderr
    assert "no such file: [/data/x] [red]x[/]\\x1b\\x07" in out.stdout, out.stdout
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout


def test_the_view_never_interprets_markup_or_control_characters():
    snap, now = _snap(worker={"last_error": "[bold red]x[/] [/data/x]\n\x1b]0;title\x07\u202e"})
    text = _render(top._view({(7, 3): snap}, {}, 1.0, [], ["/proc/9/fd/9: [/bad]"], width=120, now_ns=now), 120)
    assert "[bold red]x[/] [/data/x]\\x0a\\x1b]0;title\\x07\\u202e" in text, text
    assert "ignored /proc/9/fd/9: [/bad]" in text
    assert top._printable("a" * 100).endswith("\u2026") and len(top._printable("a" * 100)) == 60


def _require_root():
    if os.geteuid() != 0:
        pytest.skip("needs root to hold a segment as another user (setuid)")


def test_another_users_segment_is_neither_listed_nor_read(closing):
    _require_root()
    real = _real_segment_bytes(closing)
    with _fake_holder("sealed memfd", content=real, uid=65534) as (pid, fd):
        assert [e for e in _native.list_pools() if e["pid"] == pid] == []
        with pytest.raises(PermissionError, match="belongs to user 65534"):
            _native.pool_snapshot(pid, fd)
