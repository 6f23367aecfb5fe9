"""``ringenv top``: a live terminal view of the ringenv pools running on this machine.

Each pool advertises itself under an abstract socket name of this user; ``top`` asks each one for
its shared memory segment, maps it read-only and reads the counters its main process and workers
keep (steps, busy and waiting time, futex sleeps, restarts, last error). Attaching and detaching
never touches the run: nothing is written to the pool.

Any local user can bind a name under this user's prefix, so an advertisement is checked before
anything is read (``ringenv._native.pool_snapshot``): the listener must be this user's and the
process the name claims, and what it hands over a sealed memfd of this user whose header this
ringenv accepts. Refused advertisements are listed as ignored, never shown as pools. Texts from the
segment (an env's error message) are printed literally: never as markup, control characters
escaped.
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
from ringenv.errors import _env_ids_text

#: The longest ``--interval`` (seconds): a day.
INTERVAL_MAX_S = 86_400.0

DESCRIPTION = """\
Shows the ringenv pools of this user, refreshed every --interval seconds, until Ctrl-C (or after
--iterations refreshes; --once prints one view and exits). Per worker: env steps, steps/s, busy
and waiting share of wall time, futex sleeps per second, restarts and the last error. Rates are
measured between two refreshes. Reading a pool never changes it."""

Key = str  # the advertisement's abstract socket name
Ended = Tuple[int, int]  # (main pid, segment fd) of a pool that ended

# Seconds a pool may take to hand over its segment (it answers at once unless stopped or hostile).
_TIMEOUT = 1.0
_MAX_ERROR_CHARS = 60
#: Characters of the last error column (cut in the middle: ``_printable_middle``).
_MAX_LAST_ERROR_CHARS = 80
_MAX_REFUSED_LINES = 5


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    p.add_argument("--iterations", type=int, default=None, help="stop after this many refreshes")
    p.add_argument("--once", action="store_true", help="print one view (rates over one interval) and exit")


def _snapshots(refused: Optional[List[str]] = None) -> Dict[Key, dict]:
    """The verified pools of this user, by advertisement name; the reasons for refusing the other
    advertisements under this user's prefix are appended to ``refused``."""
    snaps = {}
    for entry in _native.list_pools():
        try:
            snap = _native.pool_snapshot(entry["pid"], entry["fd"], name=entry["name"], timeout=_TIMEOUT)
        except (FileNotFoundError, ConnectionRefusedError):  # ended between listing and reading
            continue
        except OSError as e:  # not a pool of this user, or not one this ringenv reads
            if refused is not None:
                refused.append(str(e))
            continue
        snap["fd"] = entry["fd"]
        snaps[entry["name"]] = snap
    return snaps


def _printable(text: str, limit: int = _MAX_ERROR_CHARS) -> str:
    """``text`` with every non-printable character (control codes, escape sequences, bidi
    overrides, line breaks) escaped as ``\\xNN`` / ``\\uNNNN``, cut to ``limit`` characters."""
    out = "".join(c if c.isprintable() else (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")
                  for c in text[:limit + 1])
    return out if len(out) <= limit else out[:limit - 1] + "\u2026"


def _printable_middle(text: str, limit: int = _MAX_LAST_ERROR_CHARS) -> str:
    """:func:`_printable`, but a long text keeps its first third and its last two thirds (where a
    panic's ``(panicked at file:line:column)`` and the env are), with ``…`` in between."""
    out = _printable(text, len(text) * 10 + 1)  # every character escaped, nothing cut (<= 10 chars each)
    if len(out) <= limit:
        return out
    head = (limit - 1) // 3
    return out[:head] + "\u2026" + out[len(out) - (limit - 1 - head):]


def _rate(now: float, before: Optional[float], seconds: float) -> Optional[float]:
    return None if before is None or seconds <= 0 else max(0.0, now - before) / seconds


def _view(current: Dict[Key, dict], previous: Dict[Key, dict], seconds: float, ended: List[Ended],
          refused: Sequence[str] = ()) -> Union[Group, Text]:
    """The rendered view. Every text is a ``rich.text.Text`` (never parsed as markup) and every
    text read from a segment goes through ``_printable``."""
    if not current and not ended and not refused:
        return Text("no ringenv pools running for this user")
    parts: List[Union[Table, Text]] = []
    if not current and not ended:
        parts.append(Text("no ringenv pools running for this user"))
    for key, snap in sorted(current.items()):
        old = previous.get(key)
        up = time.time() - snap["created_unix_ns"] / 1e9
        # A worker whose pid is the main process's is the inline share (AsyncVectorEnv's `inline`).
        inline = sum(1 for ws in snap["workers"] if ws["pid"] == snap["pid"])
        count = len(snap["workers"]) - inline
        workers = f"{count} worker{'' if count == 1 else 's'}" + (" + inline share" if inline else "")
        title = Text(f"pool of pid {snap['pid']}: {snap['num_envs']} envs, {workers}, "
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
            cells = [str(w) + (" (inline)" if ws["pid"] == snap["pid"] else ""), str(ws["pid"]), _env_ids_text(ws["env_ids"]), f"{ws['env_steps']:,}",
                     fmt(steps_s, ",.0f"), fmt(None if busy is None else 100 * busy, ".0f"),
                     fmt(None if wait is None else 100 * wait, ".0f"), fmt(sleeps, ",.0f"), str(ws["restarts"]),
                     _printable_middle(ws["last_error"])]
            t.add_row(*(Text(c) for c in cells))
        parts.append(t)
    for pid, fd in ended:
        parts.append(Text(f"pool of pid {pid} (segment fd {fd}) ended"))
    for reason in refused[:_MAX_REFUSED_LINES]:
        parts.append(Text(f"ignored advertisement {_printable(reason, 300)}", style="dim"))
    if len(refused) > _MAX_REFUSED_LINES:
        parts.append(Text(f"... and {len(refused) - _MAX_REFUSED_LINES} more ignored advertisements", style="dim"))
    return Group(*parts)


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if not 0 < args.interval <= INTERVAL_MAX_S:
        raise UsageError(f"argument --interval: must be a number of seconds above 0 and at most {INTERVAL_MAX_S:,.0f} "
                         f"(a day), got {args.interval}")
    if args.iterations is not None and args.iterations < 1:
        raise UsageError(f"argument --iterations: must be at least 1, got {args.iterations}")
    # Piped output (a log, a test) gets room for every column instead of the 80-column default.
    console = Console() if sys.stdout.isatty() else Console(width=200)
    refused: List[str] = []
    previous = _snapshots()
    if args.once:
        time.sleep(args.interval)
        current = _snapshots(refused)
        console.print(_view(current, previous, args.interval, _ended(previous, current), refused))
        return 0
    ended: List[Ended] = []
    refreshes = 0
    with Live(_view(previous, {}, 0.0, []), console=console, auto_refresh=False) as live:
        while args.iterations is None or refreshes < args.iterations:
            time.sleep(args.interval)
            refused = []
            current = _snapshots(refused)
            now_ended = _ended(previous, current)
            ended = now_ended + [k for k in ended if k not in now_ended][:5]
            live.update(_view(current, previous, args.interval, ended, refused), refresh=True)
            previous = current
            refreshes += 1
    return 0


def _ended(previous: Dict[Key, dict], current: Dict[Key, dict]) -> List[Ended]:
    return [(snap["pid"], snap["fd"]) for key, snap in previous.items() if key not in current]
