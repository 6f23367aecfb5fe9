"""scripts/disk_check.sh, which scripts/setup.sh and scripts/test.sh run before they write
gigabytes: under the space asked for it stops with a message naming the step, the mount and what
is free; with enough, or with RINGENV_DISK_CHECK=0, it lets the step go on.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "disk_check.sh"


def run(need_gib: int, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), str(need_gib), "The step under test"],
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=60)


def test_more_than_the_disk_holds_stops_with_the_step_the_mount_and_the_free_space():
    free_gib = shutil.disk_usage(SCRIPT.parent).free / 2**30
    result = run(int(free_gib) + 1024)
    assert result.returncode == 1, result
    message = result.stderr
    assert message.startswith(f"The step under test needs about {int(free_gib) + 1024} GiB free on /"), message
    reported = float(re.search(r"; ([0-9.]+) GiB are free\.", message).group(1))
    assert abs(reported - free_gib) < 1.0, (reported, free_gib)
    assert "RINGENV_DISK_CHECK=0" in message


def test_the_check_passes_with_room_and_can_be_turned_off():
    assert run(0).returncode == 0
    skipped = run(10**6, RINGENV_DISK_CHECK="0")
    assert skipped.returncode == 0 and skipped.stderr == "", skipped
