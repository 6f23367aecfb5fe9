"""What a worker process holds and what it leaves: it inherits no descriptor of the main process
but its segment and control socket (an inheritable pipe or file stays out), and the helper
processes its env starts end with it, on ``close()``, ``close(terminate=True)``, a restart, the
main process's death and its ``exec`` (each worker leads its own process group, killed before the
worker is reaped)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap

import gymnasium as gym
import pytest
import numpy as np
from gymnasium import spaces

import ringenv
from vec_asserts import pid_exists, wait_pids_gone

#: Generous bound for a killed helper to disappear: correctness, not timing.
GONE_WITHIN_S = 10.0


class HelperEnv(gym.Env):
    """Starts a ``sleep 1000`` helper process at each reset (keeping every one started); its
    observation is ``[0.0]``. ``fd_targets()`` reads this process's descriptors."""

    metadata = {"render_modes": []}

    def __init__(self, spawn=True):
        self.observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.spawn = spawn
        self.helpers = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.spawn:
            self.helpers.append(subprocess.Popen(["sleep", "1000"]))
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}

    def helper_pids(self):
        return [p.pid for p in self.helpers]

    def fd_targets(self):
        out = {}
        for fd in os.listdir("/proc/self/fd"):
            try:
                out[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:  # the descriptor listdir itself used, closed since
                pass
        return out


def _helpers(envs):
    return [pid for pids in envs.call("helper_pids") for pid in pids]


def test_workers_inherit_neither_an_inheritable_pipe_nor_an_inheritable_file(closing, tmp_path):
    r, w = os.pipe()
    os.set_inheritable(r, True)
    os.set_inheritable(w, True)
    marker = tmp_path / "inheritable.txt"
    f = open(marker, "w")
    os.set_inheritable(f.fileno(), True)
    try:
        pipe = os.readlink(f"/proc/self/fd/{r}")
        assert pipe.startswith("pipe:[")
        envs = closing(ringenv.AsyncVectorEnv([lambda: HelperEnv(spawn=False)] * 2, num_workers=2))
        for targets in envs.call("fd_targets"):
            assert pipe not in targets.values(), targets
            assert str(marker) not in targets.values(), targets
            # Besides stdio: the segment (a memfd) and the control socket, and what Python opens.
            memfds = [t for t in targets.values() if t.startswith("/memfd:")]
            assert len(memfds) == 1, targets
            assert len(targets) <= 12, targets
    finally:
        os.close(r)
        os.close(w)
        f.close()


def _with_helpers(closing, **kwargs):
    envs = closing(ringenv.AsyncVectorEnv([HelperEnv] * 4, num_workers=2, **kwargs))
    envs.reset(seed=0)
    helpers = _helpers(envs)
    assert len(helpers) == 4 and all(pid_exists(p) for p in helpers)
    return envs, helpers


def test_close_with_terminate_ends_the_helpers_an_env_started(closing):
    envs, helpers = _with_helpers(closing)
    envs.close(terminate=True)
    assert wait_pids_gone(helpers, timeout=GONE_WITHIN_S) == []


def test_a_graceful_close_ends_the_helpers_an_env_left_running(closing):
    envs, helpers = _with_helpers(closing)
    envs.close()  # HelperEnv.close does not stop its helpers: the worker's process group ends
    assert wait_pids_gone(helpers, timeout=GONE_WITHIN_S) == []


def test_a_restart_ends_the_dead_workers_helpers_and_keeps_the_others(closing):
    envs, helpers = _with_helpers(closing, on_worker_failure="restart")
    pids = envs._pool.worker_pids()
    os.kill(pids[1], signal.SIGKILL)
    _, _, _, truncated, _ = envs.step(np.zeros(4, dtype=np.int64))
    assert truncated.tolist() == [False, False, True, True]
    # Worker 1's helpers (envs 2, 3) end with it; worker 0's run on; the restarted envs started new ones.
    assert wait_pids_gone(helpers[2:], timeout=GONE_WITHIN_S) == []
    assert all(pid_exists(p) for p in helpers[:2])
    now = _helpers(envs)
    assert now[:2] == helpers[:2] and len(now) == 4 and all(pid_exists(p) for p in now[2:])
    envs.close(terminate=True)
    assert wait_pids_gone(now, timeout=GONE_WITHIN_S) == []


def test_the_main_process_dying_ends_the_helpers_too(tmp_path):
    script = tmp_path / "owner.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import ringenv
        from test_worker_processes import HelperEnv
        envs = ringenv.AsyncVectorEnv([HelperEnv] * 2, num_workers=2)
        envs.reset(seed=0)
        pids = envs._pool.worker_pids() + [p for ps in envs.call("helper_pids") for p in ps]
        print(" ".join(map(str, pids)), flush=True)
        time.sleep(60)
    """))
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in owner.stdout.readline().split()]
        assert len(pids) == 4, pids
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=10)
        assert wait_pids_gone(pids, timeout=GONE_WITHIN_S) == [], "workers and their helpers end with the main process"
    finally:
        if owner.poll() is None:
            owner.kill()


@pytest.mark.parametrize("make", ["python", "rust"])
def test_a_main_process_that_replaces_itself_with_exec_ends_its_workers_and_their_helpers(tmp_path, make):
    """``os.execv`` keeps the main process's pid, so the workers' watch of it never fires; its
    end of each control socket closes on exec, and the workers end on that hang-up, as
    Gymnasium's end on their pipe's end-of-file. (They kept running for the life of the new
    program before.) The new program lives on, sleeping: only the workers must go."""
    script = tmp_path / "restarts.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import ringenv
        from test_worker_processes import HelperEnv
        if {make!r} == "python":
            envs = ringenv.AsyncVectorEnv([HelperEnv] * 2, num_workers=2)
            envs.reset(seed=0)
            pids = envs._pool.worker_pids() + [p for ps in envs.call("helper_pids") for p in ps]
        else:
            envs = ringenv.make_vec("CartPole-v1", 4, vector_kwargs={{"num_workers": 2}})
            envs.reset(seed=0)
            pids = envs._pool.worker_pids()
        print(" ".join(map(str, pids)), flush=True)
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)"])
    """))
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in owner.stdout.readline().split()]
        assert len(pids) == (4 if make == "python" else 2), pids
        assert wait_pids_gone(pids, timeout=60) == [], "workers (and helpers) outlived the exec of their main process"
        assert owner.poll() is None, "the program the main process exec'd lives on"
    finally:
        owner.kill()
        owner.wait(timeout=10)


_STDIO_CLOSED = textwrap.dedent(r'''
    import os, sys
    import gymnasium as gym, numpy as np, ringenv

    results = {}
    for name, make in [
        ("default", lambda: ringenv.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)),
        ("workers-only", lambda: ringenv.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2, inline=False)),
        ("rust", lambda: ringenv.make_vec("CartPole-v1", num_envs=2, vector_kwargs={"num_workers": 2})),
    ]:
        envs = make()
        envs.reset(seed=0)
        obs, *_ = envs.step(np.ones(2, np.int64))
        results[name] = obs.shape
        envs.close()
    os.write(int(sys.argv[1]), repr(results).encode())  # the test's pipe: standard output may be closed
''')


@pytest.mark.parametrize("closed", [[0], [0, 1], [0, 1, 2]])
def test_a_process_started_with_standard_descriptors_closed_starts_its_workers(closed):
    """A process started with ``<&-`` (some daemons, supervisors and CI runners) gets descriptor 0
    (and 1, 2) back from ``memfd_create`` and ``socketpair``; the worker's ``/dev/null`` standard
    input then replaced its segment ("segment is 0 bytes"). Gymnasium's ``AsyncVectorEnv`` starts
    there, and so must every layout here."""
    read, write = os.pipe()

    def close_them() -> None:
        for fd in closed:
            os.close(fd)

    done = subprocess.run([sys.executable, "-c", _STDIO_CLOSED, str(write)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120, preexec_fn=close_them, pass_fds=(write,))
    os.close(write)
    with os.fdopen(read) as pipe:
        reported = pipe.read()
    assert done.returncode == 0, done.stderr
    assert reported == "{'default': (2, 4), 'workers-only': (2, 4), 'rust': (2, 4)}", done.stderr


_DEBUG_ENV = textwrap.dedent(r'''
    import gymnasium as gym, numpy as np, sys

    class DebugEnv(gym.Env):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float64)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return np.zeros(1), {}

        def step(self, action):
            return np.full(1, 1.0 if __debug__ else 2.0), float(sys.flags.optimize), False, False, {}
''')

_FLAGS_MAIN = textwrap.dedent(r'''
    import sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np, ringenv
    from debug_env import DebugEnv  # importable: compiled in each worker by the worker's own interpreter

    seen = {}
    for name, kwargs in [("default", {}), ("workers-only", {"inline": False}), ("in-process", {"num_workers": 0})]:
        envs = ringenv.AsyncVectorEnv([DebugEnv] * 4, **kwargs)
        envs.reset(seed=0)
        obs, rewards, *_ = envs.step(np.zeros(4, np.int64))
        seen[name] = (obs[:, 0].tolist(), rewards.tolist())
        envs.close()
    print(seen)
''')


def test_workers_run_with_the_interpreter_options_of_the_main_process(tmp_path):
    """``python -O`` strips asserts and sets ``__debug__`` to False in every module the main
    process compiles; a worker started without ``-O`` compiled the env's module with them, so one
    batch mixed the two behaviours. Workers get the main process's options, as ``multiprocessing``'s
    spawn passes them."""
    (tmp_path / "debug_env.py").write_text(_DEBUG_ENV)
    done = subprocess.run([sys.executable, "-O", "-c", _FLAGS_MAIN, str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    optimized = ([2.0] * 4, [1.0] * 4)  # __debug__ False, sys.flags.optimize 1 in every env
    assert done.stdout == repr({"default": optimized, "workers-only": optimized, "in-process": optimized}) + "\n", \
        done.stderr


_POOL_AT_IMPORT = textwrap.dedent(r'''
    import gymnasium as gym, numpy as np, ringenv

    class MyEnv(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return np.zeros(2, np.float32), {}

        def step(self, action):
            return np.zeros(2, np.float32), 0.0, False, False, {}

    envs = ringenv.AsyncVectorEnv([MyEnv] * 2, inline=False)  # at the module's top level, unguarded
    envs.reset(seed=0)
''')


def test_a_module_that_makes_a_vector_env_when_imported_gets_a_clear_error_not_a_process_storm(tmp_path):
    """The workers import the module that defines the env class (pickled by reference), which made
    a vector env again in each of them, whose workers did the same: a 60 s start-up timeout with
    no explanation and hundreds of processes. Now the first worker refuses, naming the module and
    the fix, as ``multiprocessing``'s spawn does."""
    (tmp_path / "pool_at_import.py").write_text(_POOL_AT_IMPORT)
    done = subprocess.run([sys.executable, "-c", "import pool_at_import"], capture_output=True, text=True,
                          timeout=45, cwd=tmp_path)
    assert done.returncode == 1
    assert "ringenv.errors.WorkerStartupError: worker 0 (envs [0]) failed to start: RuntimeError" in done.stderr
    assert "importing module 'pool_at_import'" in done.stderr and 'if __name__ == "__main__"' in done.stderr
