"""Workers import what the main process can import (its ``sys.path``, as multiprocessing's spawn
passes it) and nothing from the working directory that the main process would not import: a
``cloudpickle.py`` left in a shared directory must not run inside the workers.

The scenario runs in a fresh interpreter started from a script outside the working directory, so
the main process itself has no path entry for the working directory (as with
``python /path/to/train.py`` run in a shared folder).
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
    import json, os, sys
    extra = sys.argv[1]
    sys.path.insert(0, extra)  # only this process's sys.path knows this folder, at run time
    import numpy as np
    import ringenv

    def factory():
        import ringenv_extra_module  # importable in a worker only through the main process's sys.path
        return ringenv_extra_module.make()

    python_envs = ringenv.AsyncVectorEnv([factory] * 2, num_workers=2)
    python_envs.reset(seed=0)
    python_envs.step(np.ones(2, np.int64))
    worker_paths = python_envs.get_attr("worker_sys_path")
    python_envs.close()
    rust_envs = ringenv.make_vec("CartPole-v1", num_envs=2, vector_kwargs={"num_workers": 2})
    rust_envs.reset(seed=0)
    rust_envs.step(np.ones(2, np.int64))
    rust_envs.close()
    print(json.dumps({"main_sys_path": sys.path, "worker_sys_paths": list(worker_paths)}))
''')

EXTRA_MODULE = textwrap.dedent('''
    import sys
    import gymnasium as gym

    def make():
        env = gym.make("CartPole-v1")
        env.unwrapped.worker_sys_path = list(sys.path)
        return env
''')


def _shadowing_module(marker) -> str:
    return f"open({str(marker)!r}, 'a').write(__name__ + ' imported in ' + str(__import__('os').getpid()) + '\\n')\n"


def test_modules_in_the_working_directory_do_not_run_in_workers_but_the_main_sys_path_is_used(tmp_path):
    work, scripts, extra = tmp_path / "shared", tmp_path / "scripts", tmp_path / "extra"
    for d in (work, scripts, extra):
        d.mkdir()
    marker = tmp_path / "marker.txt"
    for name in ("cloudpickle", "json", "gymnasium"):  # what a worker imports at start-up
        (work / f"{name}.py").write_text(_shadowing_module(marker))
    (extra / "ringenv_extra_module.py").write_text(EXTRA_MODULE)
    script = scripts / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [HERE, os.environ.get("PYTHONPATH")] if p))
    done = subprocess.run([sys.executable, str(script), str(extra)], cwd=str(work), capture_output=True, text=True,
                          timeout=120, env=env)
    assert not marker.exists(), f"a module of the working directory ran in a worker: {marker.read_text()}"
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert str(work) not in result["main_sys_path"] and "" not in result["main_sys_path"]
    for paths in result["worker_sys_paths"]:
        assert paths == result["main_sys_path"], "a worker's sys.path is the main process's"


def test_an_empty_entry_of_the_main_sys_path_becomes_the_directory_it_started_in(tmp_path, monkeypatch):
    from ringenv._worker import worker_argv
    import multiprocessing.process

    monkeypatch.setattr(sys, "path", ["", *sys.path])
    argv = worker_argv("--python")
    c = argv.index("-c")
    assert argv[0] == sys.executable and argv[1:c] == subprocess._args_from_interpreter_flags()
    assert argv[-1] == "--python"
    boot = argv[c + 1]
    assert boot.startswith("import sys; sys.path[:] = ")
    paths = eval(boot.split("sys.path[:] = ", 1)[1].split("; from ringenv", 1)[0])
    assert paths[0] == multiprocessing.process.ORIGINAL_DIR and paths[1:] == sys.path[1:]


REMOVED_CWD = textwrap.dedent(r'''
    import os, sys, tempfile
    gone = tempfile.mkdtemp()
    os.chdir(gone)
    os.rmdir(gone)  # the working directory is removed before ringenv (or multiprocessing) is imported
    sys.path.insert(0, "")  # as an interactive session or `python -c` has it
    import gymnasium as gym
    import numpy as np
    import ringenv

    results = {}
    for name, make in [
        ("default", lambda: ringenv.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)),
        ("in-process", lambda: ringenv.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=0)),
        ("rust", lambda: ringenv.make_vec("CartPole-v1", num_envs=2, vector_kwargs={"num_workers": 2})),
    ]:
        envs = make()
        obs, _ = envs.reset(seed=0)
        obs, *_ = envs.step(np.ones(2, np.int64))
        results[name] = obs.shape
        envs.close()
    print(results)
''')


@pytest.mark.skipif((3, 13) <= sys.version_info < (3, 13, 3),
                    reason="CPython 3.13.0-3.13.2 raise SystemError at `import numpy` under `python -c` in a removed "
                           "working directory, before ringenv is imported (CPython issue gh-130932)")
def test_pools_start_where_the_working_directory_was_removed():
    """A ``with TemporaryDirectory() as d: os.chdir(d)`` block that ends before the pool is made
    leaves the working directory removed: ``os.getcwd()`` raises. Gymnasium's ``AsyncVectorEnv``
    starts its workers there; so must every layout here (the ``""`` path entry is dropped)."""
    done = subprocess.run([sys.executable, "-c", REMOVED_CWD], capture_output=True, text=True, timeout=120,
                          cwd=HERE)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "{'default': (2, 4), 'in-process': (2, 4), 'rust': (2, 4)}\n", done.stderr


def test_a_built_in_rust_envs_worker_loads_the_extension_and_not_the_python_package(closing):
    # Its loop is Rust: importing ringenv (numpy, Gymnasium, cloudpickle) was most of its start-up.
    import numpy as np
    import ringenv

    envs = closing(ringenv.make_vec("CartPole-v1", 2, vector_kwargs={"num_workers": 1, "inline": False}))
    [pid] = envs._pool.worker_pids()
    with open(f"/proc/{pid}/maps") as f:
        maps = f.read()
    assert ringenv._native.__file__ in maps
    assert "numpy" not in maps, "the worker imported numpy"
    envs.reset(seed=0)
    obs, rewards, *_ = envs.step(np.ones(2, np.int64))
    assert obs.shape == (2, 4) and rewards.tolist() == [1.0, 1.0]
