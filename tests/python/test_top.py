"""``ringenv top``: it shows the pools running for this user, notices one ending, finds no trace
of a pool whose main process was killed, and rejects bad arguments.

And it trusts no advertisement (issue 13, item 5): abstract socket names carry no permissions, so
fake advertisers (forked from the test, optionally as another user) hand ``top`` a FIFO, a socket,
a device, an unsealed memfd, a sealed memfd of hostile bytes, or squat the name a pool would take.
``top`` must skip each without blocking, read hostile counters bounded, print env error texts
literally (never as rich markup), and still find a pool whose first name was taken."""

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
import time

import numpy as np
import pytest
from rich.console import Console

import ringenv
from ringenv import _native
from ringenv.cli import top
from helper_envs import CallEnv
from vec_asserts import wait_pids_gone


def _top(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ringenv.cli", "top", *args], capture_output=True, text=True,
                          timeout=timeout)


def _my_pools():
    return [p for p in _native.list_pools() if p["pid"] == os.getpid()]


def test_top_shows_a_running_pool_with_its_workers_and_counts(closing):
    envs = closing(ringenv.make_vec("CartPole-v1", 4, vector_kwargs={"num_workers": 2}))
    envs.reset(seed=0)
    for _ in range(25):
        envs.step(np.ones(4, dtype=np.int64))
    pids = envs._pool.worker_pids()
    out = _top("--once", "--interval", "0.2")
    assert out.returncode == 0, out.stderr
    assert f"pool of pid {os.getpid()}: 4 envs, 2 workers" in out.stdout, out.stdout
    assert "26 commands" in out.stdout, out.stdout  # 1 reset + 25 steps
    for w, pid in enumerate(pids):
        assert str(pid) in out.stdout
    assert "[0, 1]" in out.stdout and "[2, 3]" in out.stdout  # each worker's env indices
    assert "52" in out.stdout  # 26 commands x 2 envs per worker


def _render(view) -> str:
    console = Console(record=True, width=200, file=open(os.devnull, "w"))
    console.print(view)
    return console.export_text()


def test_a_closed_pool_leaves_no_entry_and_top_notices_it_ending(closing):
    envs = closing(ringenv.make_vec("CartPole-v1", 2, vector_kwargs={"num_workers": 1}))
    envs.reset(seed=0)
    entries = _my_pools()
    assert len(entries) == 1
    # top's own refresh step, twice around the close (deterministic: no racing a live top).
    before = top._snapshots()
    assert entries[0]["name"] in before
    envs.close()
    after = top._snapshots()
    ended = top._ended(before, after)
    assert (os.getpid(), entries[0]["fd"]) in ended
    assert f"pool of pid {os.getpid()} (segment fd {entries[0]['fd']}) ended" in _render(top._view(after, before, 1.0, ended))
    assert _my_pools() == [], "a closed pool leaves no advertisement"


def test_a_forked_child_keeping_its_copy_does_not_keep_the_advertisement_of_a_closed_pool(closing):
    """A fork child (a DataLoader worker) keeps its inherited copy of the env; the parent closes
    the env: the advertisement is gone at once (the child's copy of the listening socket used to
    keep the name, which ``top`` then listed as "ignored advertisement ... no segment descriptor"
    for the child's whole life)."""
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
        envs.close()
        still = [p for p in _native.list_pools() if p["name"] == entry["name"]]
    finally:
        os.close(write_end)
        os.waitpid(child, 0)
    assert still == [], f"{entry['name']} stayed advertised while a fork child held its copy"


def test_a_killed_main_process_leaves_no_advertisement_and_no_worker(tmp_path):
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
        # The advertisement is an abstract socket name: the kernel removed it with the process.
        assert [p for p in _native.list_pools() if p["pid"] == owner.pid] == []
        assert wait_pids_gone(worker_pids, timeout=2.0) == [], "workers die with their main process"
    finally:
        if owner.poll() is None:
            owner.kill()


def test_pool_snapshot_names_what_is_wrong():
    with pytest.raises(ValueError, match="timeout must be a non-negative number of seconds, got -1"):
        _native.pool_snapshot(os.getpid(), 3, timeout=-1.0)
    with pytest.raises(FileNotFoundError, match=f"no pool of pid {os.getpid()} with segment fd 999 is advertised"):
        _native.pool_snapshot(os.getpid(), 999)


def test_top_rejects_bad_arguments():
    for args, word in [(["--interval", "0"], "--interval"), (["--interval", "inf"], "--interval"),
                       (["--interval", "1e300"], "--interval"), (["--iterations", "0"], "--iterations")]:
        out = _top(*args)
        assert out.returncode == 2, (args, out)
        assert word in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


# ---------------------------------------------------------------------------------------------
# Issue 13, item 5: top trusts no advertisement.


def _serve_in_child(w: int, kind: str, content: bytes, uid: "int | None", claim_pid: "int | None", squat) -> None:
    """Runs in a forked child: becomes user ``uid`` if given, makes the descriptor ``kind``,
    advertises it under this user's (the parent's) prefix and hands it to every client."""
    prefix_uid = os.geteuid()
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if squat is not None:  # bind names claiming the parent's pool, never answer
        keep = []
        for fd in squat:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(f"\0ringenv-{prefix_uid}/pool-{claim_pid}-{fd}")
            s.listen(1)
            keep.append(s)
        os.write(w, b"squatting\n")
        while True:
            time.sleep(3600)
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
        fd = os.memfd_create("fake")
        os.pwrite(fd, content, 0)
    elif kind == "sealed memfd":
        import fcntl
        fd = os.memfd_create("fake", os.MFD_ALLOW_SEALING)
        os.pwrite(fd, content, 0)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK)
    else:
        raise ValueError(kind)
    name = f"ringenv-{prefix_uid}/pool-{claim_pid or os.getpid()}-{fd}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(8)
    os.write(w, name.encode() + b"\n")
    while True:
        conn, _ = listener.accept()
        with contextlib.suppress(OSError):
            socket.send_fds(conn, [b"x"], [fd])
        conn.close()


@contextlib.contextmanager
def _fake_advertiser(kind: str = "", content: bytes = b"", uid=None, claim_pid=None, squat=None):
    """Forks a fake advertiser; yields ``(name, pid)`` once it listens; kills it on exit."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: keep only the pipe's write end, serve until killed
        try:
            os.close(r)
            os.closerange(3, w)
            os.closerange(w + 1, 4096)
            _serve_in_child(w, kind, content, uid, claim_pid, squat)
        finally:
            os._exit(1)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], 30.0)
        assert ready, "the fake advertiser did not start"
        line = os.read(r, 4096).decode().strip()
        assert line, "the fake advertiser failed to start"
        yield line, pid
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


def _entry(name: str) -> dict:
    [entry] = [e for e in _native.list_pools() if e["name"] == name]
    return entry


def _top_once() -> subprocess.CompletedProcess:
    return _top("--once", "--interval", "0.01", timeout=60.0)


@pytest.mark.parametrize("kind, reason", [
    ("fifo", "FIFO"),
    ("socket", "socket"),
    ("device", "character device"),
    ("directory", "directory"),
    ("unsealed memfd", "not sealed"),
])
def test_an_advertiser_handing_anything_but_a_sealed_memfd_is_skipped_without_blocking(kind, reason):
    with _fake_advertiser(kind, content=b"RINGENV\0" + bytes(8192)) as (name, pid):
        entry = _entry(name)
        assert entry["pid"] == pid
        with pytest.raises(OSError, match=reason) as info:
            _native.pool_snapshot(entry["pid"], entry["fd"], name=name, timeout=30.0)
        assert not isinstance(info.value, TimeoutError)
        # The whole of top, in another process: it must finish (the FIFO used to block it in
        # open() for ever), list the advertisement as ignored, and never show it as a pool.
        out = _top_once()
        assert out.returncode == 0, out.stderr
        assert f"pool of pid {pid}:" not in out.stdout, out.stdout
        assert f"ignored advertisement {name}" in out.stdout and reason in out.stdout, out.stdout


def test_a_sealed_memfd_of_hostile_counters_is_read_bounded(closing):
    real = _real_segment_bytes(closing)
    hostile = real[:4096] + b"\xff" * (len(real) - 4096)  # a valid header, then all ones
    with _fake_advertiser("sealed memfd", content=hostile) as (name, pid):
        entry = _entry(name)
        snap = _native.pool_snapshot(entry["pid"], entry["fd"], name=name, timeout=30.0)
        assert snap["pid"] == pid and snap["num_envs"] == 2 and len(snap["workers"]) == 1
        assert snap["commands"] == 2**64 - 1
        [w] = snap["workers"]
        assert (w["pid"], w["env_steps"], w["sleeps"]) == (2**32 - 1, 2**64 - 1, 2**32 - 1)
        assert w["last_error"] == "", "an error text whose sequence stays odd is given up on"
        out = _top_once()
        assert out.returncode == 0, out.stderr
        assert f"pool of pid {pid}: 2 envs, 1 worker" in out.stdout, out.stdout
        assert "18,446,744,073,709,551,615 commands" in out.stdout


def test_a_sealed_memfd_of_random_bytes_is_refused_with_the_header_error(closing):
    size = len(_real_segment_bytes(closing))
    garbage = np.random.default_rng(13).integers(0, 256, size, dtype=np.uint8).tobytes()
    with _fake_advertiser("sealed memfd", content=garbage) as (name, pid):
        entry = _entry(name)
        with pytest.raises(OSError, match="not a ringenv segment"):
            _native.pool_snapshot(entry["pid"], entry["fd"], name=name, timeout=30.0)
        out = _top_once()
        assert out.returncode == 0, out.stderr
        assert f"pool of pid {pid}:" not in out.stdout and "not a ringenv segment" in out.stdout, out.stdout


MARKUP = "no such file: [/data/x] [red]x[/]\x1b\x07"


def test_an_env_error_with_markup_is_printed_literally_by_top(closing):
    envs = closing(ringenv.AsyncVectorEnv([functools.partial(CallEnv, i) for i in range(2)]))
    envs.reset(seed=0)
    with pytest.raises(Exception, match="no such file"):
        envs.call("fail_call", MARKUP)  # env 1 raises: its worker records the text as last error
    [entry] = _my_pools()
    [_, w1] = _native.pool_snapshot(entry["pid"], entry["fd"])["workers"]
    assert MARKUP in w1["last_error"]
    out = _top_once()  # used to exit with rich's MarkupError on "[/data/x]"
    assert out.returncode == 0, out.stderr
    assert "no such file: [/data/x] [red]x[/]\\x1b\\x07" in out.stdout, out.stdout
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout


def test_the_view_never_interprets_markup_or_control_characters():
    snap = {"pid": 7, "fd": 3, "num_envs": 1, "commands": 1, "main_sleeps": 0, "created_unix_ns": 0,
            "workers": [{"pid": 8, "env_ids": range(0, 1), "env_steps": 1, "busy_ns": 0, "wait_ns": 0, "sleeps": 0,
                         "restarts": 0, "last_error": "[bold red]x[/] [/data/x]\n\x1b]0;title\x07\u202e"}]}
    text = _render(top._view({"ringenv-0/pool-7-3": snap}, {}, 1.0, [], ["ringenv-0/pool-9-9: [/bad]"]))
    assert "[bold red]x[/] [/data/x]\\x0a\\x1b]0;title\\x07\\u202e" in text, text
    assert "ignored advertisement ringenv-0/pool-9-9: [/bad]" in text
    assert top._printable("a" * 100).endswith("\u2026") and len(top._printable("a" * 100)) == 60


def test_a_taken_name_does_not_stop_a_pool_from_publishing_and_top_finds_it(closing):
    lowest = os.dup(0)
    os.close(lowest)
    squat = range(lowest, lowest + 256)  # every descriptor the new pool's segment may get
    with _fake_advertiser(claim_pid=os.getpid(), squat=squat):
        envs = closing(ringenv.make_vec("CartPole-v1", 2, vector_kwargs={"num_workers": 1}))
        envs.reset(seed=0)
        mine = [e for e in _my_pools() if e["fd"] in squat]
        plain = [e for e in mine if e["name"].count("-") == 3]  # ringenv-<uid>/pool-<pid>-<fd>
        suffixed = [e for e in mine if e["name"].count("-") == 4]  # ... -<random hex>
        assert len(suffixed) == 1, mine
        fd = suffixed[0]["fd"]
        assert f"ringenv-{os.geteuid()}/pool-{os.getpid()}-{fd}" in {e["name"] for e in plain}, "name was squatted"
        # Without a name, the squatter's entry is refused (another process) and the pool found.
        snap = _native.pool_snapshot(os.getpid(), fd, timeout=30.0)
        assert snap["name"] == suffixed[0]["name"] and snap["num_envs"] == 2
        out = _top_once()
        assert out.returncode == 0, out.stderr
        share = " + inline share" if envs.inline else ""
        assert f"pool of pid {os.getpid()}: 2 envs, 1 worker{share}" in out.stdout, out.stdout
        assert "ignored advertisement" in out.stdout and "but the listener is process" in out.stdout


def _require_root():
    if os.geteuid() != 0:
        pytest.skip("needs root to run a fake advertiser as another user (setuid); "
                    "the credential check itself is covered by the Rust test "
                    "advert::tests::peer_credentials_are_checked_for_user_then_process")


def test_another_users_advertisement_under_our_prefix_is_refused(closing):
    _require_root()
    real = _real_segment_bytes(closing)
    with _fake_advertiser("sealed memfd", content=real, uid=65534) as (name, pid):
        assert name.startswith(f"ringenv-{os.geteuid()}/pool-{pid}-")
        entry = _entry(name)
        with pytest.raises(PermissionError, match="belongs to user 65534"):
            _native.pool_snapshot(entry["pid"], entry["fd"], name=name, timeout=30.0)
        out = _top_once()
        assert out.returncode == 0, out.stderr
        assert f"pool of pid {pid}:" not in out.stdout, out.stdout
        assert "belongs to user 65534" in out.stdout, out.stdout


def test_a_pool_hands_its_segment_to_no_other_user(closing):
    _require_root()
    envs = closing(ringenv.make_vec("CartPole-v1", 2, vector_kwargs={"num_workers": 1}))
    envs.reset(seed=0)
    [entry] = _my_pools()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # as user 65534: connect to the pool's name and report what arrives
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect("\0" + entry["name"])
            s.settimeout(30.0)
            msg, fds, _, _ = socket.recv_fds(s, 64, 4)
            os.write(w, f"{len(msg)} {len(fds)}".encode())
        finally:
            os._exit(0)
    os.close(w)
    envs.step(np.zeros(2, dtype=np.int64))  # a fork stops the pool's serving until its next call
    try:
        ready, _, _ = select.select([r], [], [], 60.0)
        assert ready
        assert os.read(r, 64).decode() == "0 0", "closed without a descriptor"
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    # This user still gets it.
    assert _native.pool_snapshot(entry["pid"], entry["fd"], timeout=30.0)["num_envs"] == 2
