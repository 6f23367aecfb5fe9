"""``ringenv top``: a live terminal view of the ringenv pools running on this machine.

Each pool advertises itself in a per-user runtime directory; ``top`` maps each pool's shared
memory segment read-only and reads the counters its main process and workers keep (steps, busy
and waiting time, futex sleeps, restarts, last error). Attaching and detaching never touches the
run: nothing is written to the pool.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple, Union

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ringenv import _native
from ringenv.cli._common import UsageError

DESCRIPTION = """\
Shows the ringenv pools of this user, refreshed every --interval seconds, until Ctrl-C (or after
--iterations refreshes; --once prints one view and exits). Per worker: env steps, steps/s, busy
and waiting share of wall time, futex sleeps per second, restarts and the last error. Rates are
measured between two refreshes. Reading a pool never changes it."""

Key = Tuple[int, int]  # (main pid, segment fd)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    p.add_argument("--iterations", type=int, default=None, help="stop after this many refreshes")
    p.add_argument("--once", action="store_true", help="print one view (rates over one interval) and exit")


def _snapshots() -> Dict[Key, dict]:
    snaps = {}
    for entry in _native.list_pools():
        try:
            snaps[(entry["pid"], entry["fd"])] = _native.pool_snapshot(entry["pid"], entry["fd"])
        except OSError:  # ended between listing and reading
            continue
    return snaps


def _rate(now: float, before: Optional[float], seconds: float) -> Optional[float]:
    return None if before is None or seconds <= 0 else max(0.0, now - before) / seconds


def _view(current: Dict[Key, dict], previous: Dict[Key, dict], seconds: float, ended: List[Key]):
    if not current and not ended:
        return Text("no ringenv pools running for this user")
    parts: List[Union[Table, Text]] = []
    for key, snap in sorted(current.items()):
        old = previous.get(key)
        up = time.time() - snap["created_unix_ns"] / 1e9
        title = (f"pool of pid {snap['main_pid']}: {snap['num_envs']} envs, {len(snap['workers'])} workers, "
                 f"up {up:,.0f} s, {snap['commands']:,} commands, main process slept {snap['main_sleeps']:,} times")
        t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
        for name in ("worker", "pid", "env ids", "env steps", "steps/s", "busy %", "wait %", "sleeps/s", "restarts",
                     "last error"):
            t.add_column(name, justify="left" if name in ("env ids", "last error") else "right", no_wrap=True)
        for w, ws in enumerate(snap["workers"]):
            ow = old["workers"][w] if old and w < len(old["workers"]) else None
            steps_s = _rate(ws["env_steps"], ow and ow["env_steps"], seconds)
            busy = _rate(ws["busy_ns"] / 1e9, ow and ow["busy_ns"] / 1e9, seconds)
            wait = _rate(ws["wait_ns"] / 1e9, ow and ow["wait_ns"] / 1e9, seconds)
            sleeps = _rate(ws["sleeps"], ow and ow["sleeps"], seconds)
            fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
            t.add_row(str(w), str(ws["pid"]), f"{ws['env_ids'][0]}..{ws['env_ids'][1]}", f"{ws['env_steps']:,}",
                      fmt(steps_s, ",.0f"), fmt(None if busy is None else 100 * busy, ".0f"),
                      fmt(None if wait is None else 100 * wait, ".0f"), fmt(sleeps, ",.0f"), str(ws["restarts"]),
                      ws["last_error"][:60])
        parts.append(t)
    for pid, fd in ended:
        parts.append(Text(f"pool of pid {pid} (segment fd {fd}) ended"))
    return Group(*parts)


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if not args.interval > 0:
        raise UsageError(f"argument --interval: must be a positive number of seconds, got {args.interval}")
    if args.iterations is not None and args.iterations < 1:
        raise UsageError(f"argument --iterations: must be at least 1, got {args.iterations}")
    # Piped output (a log, a test) gets room for every column instead of the 80-column default.
    console = Console() if sys.stdout.isatty() else Console(width=200)
    previous = _snapshots()
    if args.once:
        time.sleep(args.interval)
        current = _snapshots()
        console.print(_view(current, previous, args.interval, [k for k in previous if k not in current]))
        return 0
    ended: List[Key] = []
    refreshes = 0
    with Live(_view(previous, {}, 0.0, []), console=console, auto_refresh=False) as live:
        while args.iterations is None or refreshes < args.iterations:
            time.sleep(args.interval)
            current = _snapshots()
            ended = [k for k in previous if k not in current] + [k for k in ended if k not in current][:5]
            live.update(_view(current, previous, args.interval, ended), refresh=True)
            previous = current
            refreshes += 1
    return 0
