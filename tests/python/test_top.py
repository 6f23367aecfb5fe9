"""``ringenv top``: it shows the pools running for this user, notices one ending, finds no trace
of a pool whose main process was killed, and rejects bad arguments."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np

import ringenv
from ringenv import _native
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
    assert "0..2" in out.stdout and "2..4" in out.stdout
    assert "52" in out.stdout  # 26 commands x 2 envs per worker


def test_a_closed_pool_leaves_no_entry_and_top_notices_it_ending(closing):
    envs = closing(ringenv.make_vec("CartPole-v1", 2, vector_kwargs={"num_workers": 1}))
    envs.reset(seed=0)
    entries = _my_pools()
    assert len(entries) == 1
    live = subprocess.Popen([sys.executable, "-m", "ringenv.cli", "top", "--iterations", "6", "--interval", "0.3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)  # top has seen the pool at least once
    envs.close()
    stdout, stderr = live.communicate(timeout=30)
    assert live.returncode == 0, stderr
    assert f"pool of pid {os.getpid()} (segment fd {entries[0]['fd']}) ended" in stdout, stdout
    assert _my_pools() == [], "a closed pool leaves no advertisement"


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


def test_top_rejects_bad_arguments():
    for args, word in [(["--interval", "0"], "--interval"), (["--iterations", "0"], "--iterations")]:
        out = _top(*args)
        assert out.returncode == 2, (args, out)
        assert word in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
