"""The default layout counts the cores a process may *use*: its CPU affinity capped by its cgroup's
CPU quota (a container's ``--cpus``, a Kubernetes CPU limit). A process held to one core's worth
of time on a 2-core machine gets nothing from a worker process beside the inline share (the two
would take turns on that one core's time), so the default there is ``num_workers=0``, as under
``taskset -c 0``.

The quota is set with a cgroup (v1 ``cpu`` controller, or v2 ``cpu.max``) made for the test,
which needs a writable cgroup file system (root, as on the CI machine); elsewhere the tests skip,
saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Optional

import pytest

_CHILD = r"""
import json, os
from ringenv import _native
from ringenv._plan import plan_workers, usable_cores
print(json.dumps({"affinity": len(os.sched_getaffinity(0)), "available": _native.available_cores(),
                  "usable": usable_cores(), "plan": plan_workers(16, None, None, "python", 16, None)}))
"""


def _make_group(quota: float) -> Optional[Path]:
    """A new cgroup allowing ``quota`` cores' worth of CPU time, or ``None`` where none can be made."""
    name = f"ringenv-test-{uuid.uuid4().hex[:8]}"
    v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
    try:
        if (v1 / "cpu.cfs_quota_us").exists():
            group = v1 / name
            group.mkdir()
            period = int((group / "cpu.cfs_period_us").read_text())
            (group / "cpu.cfs_quota_us").write_text(str(int(quota * period)))
            return group
        if "cpu" in (v2 / "cgroup.subtree_control").read_text().split():
            group = v2 / name
            group.mkdir()
            (group / "cpu.max").write_text(f"{int(quota * 100000)} 100000")
            return group
    except OSError:
        pass
    return None


def _run_in(group: Optional[Path]) -> dict:
    def enter() -> None:
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120,
                          preexec_fn=enter)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("quota", [0.5, 1.0])
def test_a_cpu_quota_of_one_core_or_less_makes_the_default_step_every_env_in_this_process(quota):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs a process allowed on 2 or more cores, to tell the quota from the affinity")
    group = _make_group(quota)
    if group is None:
        pytest.skip("no writable cgroup cpu controller here (not root, or no cpu controller)")
    try:
        seen = _run_in(group)
    finally:
        group.rmdir()
    assert seen["affinity"] >= 2
    assert seen["available"] == 1 and seen["usable"] == 1
    assert seen["plan"] == [0, True]  # no worker process: this process steps all 16 envs


def test_without_a_quota_the_cores_are_the_affinity():
    seen = _run_in(None)
    assert seen["usable"] == seen["available"] <= seen["affinity"]
