"""Fixtures shared by the ringenv tests: a per-test time limit, factories of vector envs that are
always closed at teardown, and Stable-Baselines3's log folders kept out of the system's temporary
directory."""

from __future__ import annotations

import faulthandler
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# Every test must finish well within this; a hung test fails instead of blocking the suite.
TEST_TIMEOUT_S = 60.0

# How long the ``closing`` fixture lets a vector env's close wait for a call still pending in its
# workers (a failed test may leave one that sleeps for minutes) before the workers are killed.
# The time limit's last resort does not cover that wait: pytest cancels faulthandler's pending
# dump when a test fails (its ``pytest_exception_interact`` hook).
CLOSE_TIMEOUT_S = 10.0


class _TestTimeout(Exception):
    pass


@pytest.fixture(autouse=True)
def _time_limit():
    """Fails the running test after TEST_TIMEOUT_S (a SIGALRM raises in the main thread as soon
    as Python code runs again); if that cannot happen (a native call that never returns), the
    process dumps every thread's traceback and exits 15 s later."""

    def on_alarm(signum, frame):
        raise _TestTimeout(f"test ran past {TEST_TIMEOUT_S} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, TEST_TIMEOUT_S)
    faulthandler.dump_traceback_later(TEST_TIMEOUT_S + 15.0, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(autouse=True, scope="session")
def _sb3_log_folder(tmp_path_factory):
    """Stable-Baselines3's ``learn`` makes a log folder ``SB3-<date>`` in the system's temporary
    directory on every call unless ``SB3_LOGDIR`` names one
    (``stable_baselines3.common.logger.configure``); the suite's go to pytest's own temporary
    directory instead (subprocesses inherit the variable)."""
    previous = os.environ.get("SB3_LOGDIR")
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3-logs"))
    yield
    if previous is None:
        del os.environ["SB3_LOGDIR"]
    else:
        os.environ["SB3_LOGDIR"] = previous


@pytest.fixture
def python_sigint_handler():
    """Python's own SIGINT handler (``KeyboardInterrupt``) for the test, whatever the test process
    inherited: a job started in the background by a non-interactive shell (``cmd &``, ``nohup``)
    starts with SIGINT ignored, and Python then installs no handler, so a Ctrl-C test would wait
    for a signal that never arrives."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def closing():
    """``closing(env)`` registers a vector env (ringenv's or Gymnasium's) to be closed at teardown
    and returns it. A Gymnasium ``VectorEnv`` (ringenv's included) is closed with
    ``timeout=CLOSE_TIMEOUT_S``: a call still pending is waited for that long, then its workers
    are killed."""
    envs = []

    def register(env):
        envs.append(env)
        return env

    yield register
    errors = []
    for env in reversed(envs):
        try:
            if not getattr(env, "closed", False):
                if hasattr(env, "close_extras"):  # a Gymnasium VectorEnv: a bounded wait
                    env.close(timeout=CLOSE_TIMEOUT_S)
                else:
                    env.close()
        except Exception as e:  # close the others anyway, then report
            errors.append(e)
    if errors:
        raise errors[0]


@pytest.fixture
def cuda():
    """The CUDA device as a ``torch.device``, or a skip saying why there is none (the GPU tests
    run where a device exists and print the reason elsewhere); synchronises it at teardown."""
    from ringenv._staging import parse_device
    from ringenv.errors import CudaUnavailableError

    try:
        device = parse_device("cuda")
    except CudaUnavailableError as e:
        pytest.skip(f"no CUDA device: {e}")
    import torch

    yield device
    torch.cuda.synchronize(device)


#: The repository root.
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def worker_binary() -> str:
    """ringenv's own worker binary, ``ringenv-worker`` (built with the SDK; it answers ``describe``
    like any SDK binary), built once per session with cargo into the workspace's target directory
    (offline first: ringenv's own build downloaded every crate it needs)."""
    if shutil.which("cargo") is None:
        pytest.skip("cargo is not installed: no worker binary can be built")
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    done = None
    for offline in (["--offline"], []):
        done = subprocess.run(["cargo", "build", *offline, "-p", "ringenv-worker", "--bin", "ringenv-worker",
                               "--target-dir", str(target)], cwd=REPO, capture_output=True, text=True, timeout=900)
        if done.returncode == 0:
            break
    assert done is not None and done.returncode == 0, done.stderr[-3000:]
    path = target / "debug" / "ringenv-worker"
    assert os.access(path, os.X_OK), path
    return str(path)


@pytest.fixture(scope="session")
def symbolic_worker() -> str:
    """The worker binary of the example crate ``examples/symbolic`` (``BlocksWorld-v0``, typed
    arguments), built by the crate's own ``cargo test`` (its unit tests, doctests and the binary's
    tests must pass) into the workspace's target directory, offline first."""
    if shutil.which("cargo") is None:
        pytest.skip("cargo is not installed: no worker binary can be built")
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    env = {k: v for k, v in os.environ.items() if k != "CARGO_TARGET_DIR"}
    done = None
    for offline in (["--offline"], []):
        done = subprocess.run(["cargo", "test", *offline, "--target-dir", str(target)], cwd=REPO / "examples" / "symbolic",
                              env=env, capture_output=True, text=True, timeout=900)
        if done.returncode == 0:
            break
    assert done is not None and done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    path = target / "debug" / "symbolic"
    assert os.access(path, os.X_OK), path
    return str(path)
