"""A process forked from the one that created a vector env (``os.fork``, multiprocessing's
``"fork"`` start method, a DataLoader worker) must not disturb the creator's workers: closing the
env there, garbage-collecting it or exiting only lets go of the child's copy, and any call raises
``ringenv.errors.ForkedProcessError`` before anything is sent or written.

Each scenario runs in a fresh interpreter (a script below), so that the fork copies no pytest
state and the child's ``sys.exit`` runs a real interpreter shutdown. The script prints one JSON
line of what the parent and the child saw; the assertions are here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

SCRIPT = textwrap.dedent(r'''
    import functools, gc, json, multiprocessing, os, sys
    import numpy as np
    import ringenv
    from ringenv.errors import ForkedProcessError
    from helper_envs import CounterEnv

    mode = sys.argv[1]
    envs = ringenv.AsyncVectorEnv([functools.partial(CounterEnv, i) for i in range(4)], num_workers=2)
    envs.reset(seed=0)
    envs.step(np.ones(4, np.int64))
    pids_before = sorted(envs._pool.worker_pids())

    def try_calls(envs):
        """The exception type name each call raises in the child (None: it returned)."""
        ones = np.ones(4, np.int64)
        calls = {
            "step": lambda: envs.step(ones),
            "step_async": lambda: envs.step_async(ones),
            "step_wait": lambda: envs.step_wait(),
            "reset": lambda: envs.reset(seed=1),
            "call": lambda: envs.call("reset"),
            "get_attr": lambda: envs.get_attr("t"),
            "set_attr": lambda: envs.set_attr("t", 5),
            "render": lambda: envs.render(),
            "send": lambda: envs.send(ones),
            "recv": lambda: envs.recv(),
            "native_submit": lambda: envs._pool.submit("step"),
            "native_wait": lambda: envs._pool.wait(0.1),
        }
        seen = {}
        for name, call in calls.items():
            try:
                call()
                seen[name] = None
            except ForkedProcessError as e:
                seen[name] = [type(e).__name__, e.creator_pid, e.pid, str(e)]
            except Exception as e:
                seen[name] = [type(e).__name__, None, None, str(e)]
        return seen

    def child(report):
        """What the child does with the inherited env; returns what it saw."""
        seen = {"pid": os.getpid()}
        if mode == "close":
            envs.close()
            seen["closed"] = envs.closed
        elif mode == "gc":
            del globals()["envs"]  # the only reference: the env is collected here
            gc.collect()
        elif mode == "calls":
            seen["calls"] = try_calls(envs)
            envs.close()  # after the refused calls, closing still leaves the parent's workers alone
        return seen

    def run_child_with_fork(exit_with_sys_exit):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                seen = child(None)
            except BaseException as e:  # report, never fall through into the parent's code
                seen = {"error": repr(e)}
            os.write(write, json.dumps(seen).encode())
            os.close(write)
            if exit_with_sys_exit:
                sys.exit(0)  # a full interpreter shutdown: the env is dropped with everything else
            os._exit(0)
        os.close(write)
        data = b""
        while True:
            chunk = os.read(read, 65536)
            if not chunk:
                break
            data += chunk
        os.close(read)
        _, status = os.waitpid(pid, 0)
        return json.loads(data or b"{}"), os.waitstatus_to_exitcode(status)

    def mp_target(conn, what):
        seen = {"pid": os.getpid()}
        if what == "calls":
            seen["calls"] = try_calls(envs)
        envs.close()
        conn.send(seen)
        conn.close()

    if mode in ("close", "gc", "calls"):
        child_seen, child_code = run_child_with_fork(False)
    elif mode == "sys_exit":
        child_seen, child_code = run_child_with_fork(True)
    elif mode.startswith("mp_"):
        ctx = multiprocessing.get_context("fork")
        parent_conn, child_conn = ctx.Pipe()
        proc = ctx.Process(target=mp_target, args=(child_conn, mode[3:]))
        proc.start()
        child_seen = parent_conn.recv()
        proc.join(60)
        child_code = proc.exitcode
    else:
        raise SystemExit(f"unknown mode {mode}")

    # The parent goes on: the same workers step and reset its envs.
    obs, rewards, terminated, truncated, _ = envs.step(np.ones(4, np.int64))
    after_step = obs.tolist()
    obs, _ = envs.reset(seed=0)
    after_reset = obs.tolist()
    values = list(envs.get_attr("t"))
    pids_after = sorted(envs._pool.worker_pids())
    envs.close()
    print(json.dumps({"parent": os.getpid(), "child": child_seen, "child_code": child_code,
                      "after_step": after_step, "rewards": rewards.tolist(), "after_reset": after_reset,
                      "t": values, "pids_before": pids_before, "pids_after": pids_after}))
''')


def _run(tmp_path, mode: str, text: str = SCRIPT) -> dict:
    script = tmp_path / "fork_scenario.py"
    script.write_text(text)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [HERE, os.environ.get("PYTHONPATH")] if p))
    done = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=120,
                          env=env, cwd=str(tmp_path))
    assert done.returncode == 0, f"scenario {mode} failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def _assert_parent_unharmed(result: dict) -> None:
    assert result["child_code"] == 0, result
    assert "error" not in result["child"], result["child"]
    # The second step of every env: observation [env_index, 2], reward 1 (the action).
    assert result["after_step"] == [[i, 2.0] for i in range(4)], result
    assert result["rewards"] == [1.0] * 4
    assert result["after_reset"] == [[i, 0.0] for i in range(4)], result
    assert result["t"] == [0, 0, 0, 0]
    assert result["pids_after"] == result["pids_before"], "the same workers serve the parent"


@pytest.mark.parametrize("mode", ["close", "gc", "sys_exit"])
def test_a_forked_child_that_closes_drops_or_exits_leaves_the_parents_workers_running(tmp_path, mode):
    result = _run(tmp_path, mode)
    _assert_parent_unharmed(result)
    if mode == "close":
        assert result["child"]["closed"] is True


def test_every_call_in_a_forked_child_raises_forked_process_error_naming_both_pids(tmp_path):
    result = _run(tmp_path, "calls")
    _assert_parent_unharmed(result)
    child_pid = result["child"]["pid"]
    for name, seen in result["child"]["calls"].items():
        assert seen is not None, f"{name} returned in the child"
        kind, creator, pid, message = seen
        assert kind == "ForkedProcessError", (name, seen)
        assert (creator, pid) == (result["parent"], child_pid), (name, seen)
        assert str(result["parent"]) in message and str(child_pid) in message, (name, message)
        assert "new env" in message, message


@pytest.mark.parametrize("what", ["close", "calls"])
def test_a_multiprocessing_fork_child_leaves_the_parents_workers_running(tmp_path, what):
    result = _run(tmp_path, f"mp_{what}")
    _assert_parent_unharmed(result)
    if what == "calls":
        assert all(seen[0] == "ForkedProcessError" for seen in result["child"]["calls"].values()), result["child"]


def test_forked_process_error_is_a_ringenv_error():
    from ringenv.errors import ForkedProcessError, RingenvError

    err = ForkedProcessError("message", creator_pid=1, pid=2)
    assert isinstance(err, RingenvError) and isinstance(err, RuntimeError)
    assert (err.creator_pid, err.pid) == (1, 2)


THREADS_SCRIPT = textwrap.dedent(r'''
    import json, os
    import gymnasium as gym
    import numpy as np
    import ringenv

    def threads():
        return set(os.listdir("/proc/self/task"))

    before = threads()
    def new_threads():
        """Threads of this process that were not there before the pools: any that ringenv started."""
        return len(threads() - before)

    python_pool = ringenv.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=1)
    rust_pool = ringenv.make_vec("CartPole-v1", 2)
    python_pool.reset(seed=0)
    rust_pool.reset(seed=0)
    seen = {"open": new_threads()}
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    rust_pool.step(np.zeros(2, np.int64))
    seen["after_a_fork_and_a_call"] = new_threads()
    python_pool.close()
    rust_pool.close()
    print(json.dumps(seen))
''')


def test_open_pools_start_no_thread_in_the_main_process(tmp_path):
    """A pool runs nothing in the caller's process beside its calls (``ringenv top`` reads the
    segment without the pool's help), so a fork finds only the caller's own threads (what Python
    3.12 and later count right after a fork, to warn that "this process is multi-threaded")."""
    assert _run(tmp_path, "", THREADS_SCRIPT) == {"open": 0, "after_a_fork_and_a_call": 0}
