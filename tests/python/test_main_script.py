"""Envs defined in the caller's main script (``__main__``), which no other process can import:
cloudpickle sends them to the workers by value. Two consequences are tested here, each in a
script run as ``__main__`` (this module is importable, so its own classes travel by reference):

- in the main process's inline share the envs are made by the caller's own factories, as
  ``SyncVectorEnv`` makes them: their code sees the script's globals (a ``global`` counter
  counts), and the script's classes keep their own methods, also after ``call`` and ``set_attr``
  carried instances of them, and after reset ``options`` did (a pickle round trip in the same
  process made cloudpickle set copies on them, whose globals were a snapshot), and after a
  worker returned one beside something only cloudpickle pickles (a lambda): the worker pickles
  the class by reference;
- in a worker process the script's functions and classes that came with the factories are found
  by name in the worker's ``__main__``, so an env can pickle its own state by reference (and
  hand a script function to a fork-context ``multiprocessing.Pool``), as under
  ``SyncVectorEnv`` and Gymnasium's fork-started ``AsyncVectorEnv``.

The same script run by ``runpy.run_path`` (module ``<run_path>``, which no worker can import
either) behaves the same.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_SCRIPT = r"""
import multiprocessing, pickle, sys
import gymnasium as gym, numpy as np, ringenv

COUNT = 0

def square(x):
    return x * x

class State:
    def __init__(self, value):
        self.value = value

class ScriptEnv(gym.Env):
    observation_space = gym.spaces.Discrete(100)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.state = State(1) if options is None else options["state"]
        return 0, {}

    def step(self, action):
        global COUNT
        COUNT += 1
        self.state = pickle.loads(pickle.dumps(State(self.state.value + 1)))  # by reference to __main__.State
        with multiprocessing.get_context("fork").Pool(1) as pool:
            total = sum(pool.map(square, [1, 2]))
        return self.state.value + total, 0.0, False, False, {}

    def get_state(self):
        return self.state

    def state_and_function(self):
        return self.state, lambda: self.state.value  # plain pickle refuses the lambda

layout = {"default": {}, "workers-only": {"inline": False}, "in-process": {"num_workers": 0}}[sys.argv[1]]
step, init = ScriptEnv.step, State.__init__
envs = ringenv.AsyncVectorEnv([ScriptEnv] * 2, **layout)
envs.reset(seed=0, options={"state": State(1)})  # reset options carrying a script class
obs = [envs.step(np.zeros(2, np.int64))[0].tolist() for _ in range(2)]
envs.set_attr("state", State(9))  # a request carrying a script class, and results holding one
assert [s.value for s in envs.call("get_state")] == [9, 9] and type(envs.call("get_state")[0]) is State
state, function = envs.call("state_and_function")[1]  # a script class beside a lambda, from env 1
assert type(state) is State and state.value == 9 and function() == 9
envs.close()
kept = ScriptEnv.step is step and step.__globals__ is globals() and State.__init__ is init
print(obs, COUNT, kept, flush=True)
"""


@pytest.mark.parametrize("layout, count", [("default", 2), ("workers-only", 0), ("in-process", 4)])
def test_envs_of_the_callers_main_script_see_its_names_in_every_layout(layout, count):
    """``count``: the steps taken in this process (the share's env: 1 of 2 in the default layout),
    which are the ones that count in the script's own ``COUNT``, as under ``SyncVectorEnv`` (all)
    and a worker process (none)."""
    done = subprocess.run([sys.executable, "-c", _SCRIPT, layout], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"[[7, 7], [8, 8]] {count} True\n", done.stderr


@pytest.mark.parametrize("layout, count", [("default", 2), ("workers-only", 0), ("in-process", 4)])
def test_a_script_run_by_runpy_run_path_works_as_one_run_as_main(tmp_path, layout, count):
    """``runpy.run_path(path)`` runs the script as module ``<run_path>`` (its default
    ``run_name``), which has no import spec: a worker cannot import it, so its code travels by
    value as ``__main__``'s does, and its names are found in the worker under that module."""
    script = tmp_path / "script.py"
    script.write_text(_SCRIPT)
    runner = f"import runpy, sys; sys.argv = ['script.py', {layout!r}]; runpy.run_path({str(script)!r})"
    done = subprocess.run([sys.executable, "-c", runner], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"[[7, 7], [8, 8]] {count} True\n", done.stderr


_RAISING_ENV = '''
import gymnasium as gym, numpy as np

class RaisingEnv(gym.Env):
    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        raise ValueError("raised by the caller's env")
'''

_STEP_AND_PRINT_CAUSE = '''
import numpy as np, ringenv
envs = ringenv.AsyncVectorEnv([RaisingEnv] * 2, inline=False)
envs.reset(seed=0)
try:
    envs.step(np.zeros(2, np.int64))
except ValueError as e:
    print(e.__cause__)
envs.close()
'''


def test_a_workers_traceback_names_the_scripts_file_line_and_source(tmp_path):
    """The env class of a script travels by value; its code keeps the script's file name
    (cloudpickle alone writes ``<dynamic-code>``), so the traceback from the worker points at
    the script's line and shows its source, as one from ``SyncVectorEnv`` does."""
    script = tmp_path / "train.py"
    script.write_text(_RAISING_ENV + _STEP_AND_PRINT_CAUSE)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    line = _RAISING_ENV.splitlines().index('        raise ValueError("raised by the caller\'s env")') + 1
    assert f'File "{script}", line {line}, in step\n    raise ValueError(' in done.stdout, done.stdout
    assert "<dynamic-code>" not in done.stdout


def test_a_workers_traceback_shows_the_source_of_a_notebook_cell():
    """Code of a Jupyter or IPython cell has a file name that is not on disk; its source is in the
    kernel's ``linecache``, and travels with the code, so the worker's traceback shows it."""
    cell = "/nonexistent/ipykernel_1/cell_1.py"
    runner = (f"import linecache; source = {_RAISING_ENV!r}; "
              f"linecache.cache[{cell!r}] = (len(source), None, source.splitlines(True), {cell!r}); "
              f"exec(compile(source, {cell!r}, 'exec')); exec({_STEP_AND_PRINT_CAUSE!r})")
    done = subprocess.run([sys.executable, "-c", runner], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    line = _RAISING_ENV.splitlines().index('        raise ValueError("raised by the caller\'s env")') + 1
    assert f'File "{cell}", line {line}, in step\n    raise ValueError(' in done.stdout, done.stdout


def test_a_module_that_lost_its_import_spec_is_sent_by_value_not_imported_again(tmp_path):
    """IPython's ``%run -n script.py`` after a ``%run script.py`` runs the script as module
    ``script`` in a module it emptied, ``__spec__`` included. Sent by reference, each worker would
    import ``script.py`` and run its top level again; by value, only the caller runs it."""
    marks = tmp_path / "marks"
    (tmp_path / "runscript.py").write_text(
        f"import os\nopen({str(marks)!r}, 'a').write(f'{{os.getpid()}}\\n')\n" + _RAISING_ENV)
    runner = f"""
import os, sys, types
sys.path.insert(0, {str(tmp_path)!r})
module = types.ModuleType("runscript")
del module.__spec__
sys.modules["runscript"] = module
path = {str(tmp_path / "runscript.py")!r}
exec(compile(open(path).read(), path, "exec"), module.__dict__)
RaisingEnv = module.RaisingEnv
{_STEP_AND_PRINT_CAUSE}
print(open({str(marks)!r}).read().split() == [str(os.getpid())])
"""
    done = subprocess.run([sys.executable, "-c", runner], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("True\n"), done.stdout + done.stderr


def test_a_factory_whose_closure_has_an_empty_cell_starts(tmp_path):
    """A factory of the script that names a variable its enclosing function never assigned has
    an empty closure cell (reading it raises ``ValueError: Cell is empty``); the worker publishes
    the script's names around it, and the env starts as under ``SyncVectorEnv``."""
    script = tmp_path / "empty_cell.py"
    script.write_text(_RAISING_ENV + '''
import ringenv

def make_factory():
    def factory():
        if False:
            return unused  # noqa: F821 - never assigned: its cell stays empty
        return RaisingEnv()
    return factory
    unused = None  # noqa: F841 - unreachable

fns = [make_factory()] * 2
envs = ringenv.AsyncVectorEnv(fns, inline=False)
print(envs.reset(seed=0)[0].tolist(), gym.vector.SyncVectorEnv(fns).reset(seed=0)[0].tolist())
envs.close()
''')
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[0, 0] [0, 0]\n", done.stderr
