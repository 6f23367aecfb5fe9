"""``ringenv top``: a live terminal view of the ringenv pools running for this user.

``top`` finds the ``ringenv`` memfds this user's processes hold, maps each read-only (after
``ringenv._native.pool_snapshot`` accepts it; a refused one is listed as ignored) and shows the
counters its processes keep; impossible counters mark the pool as corrupt. Texts from a segment
are printed literally, never as markup, control characters escaped."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ringenv import _native
from ringenv.cli._common import UsageError
from ringenv.errors import _env_ids_text

#: The longest ``--interval`` (seconds): a day.
INTERVAL_MAX_S = 86_400.0
#: The highest pid Linux can give (``PID_MAX_LIMIT`` on 64-bit, ``include/linux/threads.h``).
PID_MAX_LIMIT = 1 << 22
#: The least width of ``--wide`` output (its lines may be wider than the terminal).
WIDE_COLUMNS = 160
#: Exit status on SIGTERM (128 + the signal's number, as a shell reports it).
TERMINATED = 128 + signal.SIGTERM

DESCRIPTION = """\
Shows the ringenv pools of this user, refreshed every --interval seconds, until Ctrl-C or SIGTERM
(or after --iterations refreshes; --once prints one view and exits). Per worker: steps/s, busy
and waiting share of wall time, restarts and the last error; --wide adds env ids, env steps and
futex sleeps. Rates are measured between two refreshes. Reading a pool never changes it, and a
pool does no work for it."""

Key = Tuple[int, int]  # (pid, segment fd) of the process holding a pool's segment

_MAX_ERROR_CHARS = 60
#: Characters of the last error column at most (cut in the middle: ``_printable_middle``).
_MAX_LAST_ERROR_CHARS = 80
_MAX_REFUSED_LINES = 5


class _Terminated(Exception):
    """SIGTERM arrived."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    p.add_argument("--iterations", type=int, default=None, help="stop after this many refreshes")
    p.add_argument("--once", action="store_true", help="print one view (rates over one interval) and exit")
    p.add_argument("--wide", action="store_true", help="also show env ids, env steps and futex sleeps per second")


def _snapshots(refused: Optional[List[str]] = None) -> Dict[Key, dict]:
    """The checked pools of this user, by ``(pid, fd)``; why the other segments found were
    refused is appended to ``refused``."""
    snaps = {}
    for entry in _native.list_pools():
        key = (entry["pid"], entry["fd"])
        try:
            snaps[key] = _native.pool_snapshot(*key)
        except FileNotFoundError:  # ended between listing and reading
            continue
        except OSError as e:  # not a segment this ringenv reads
            if refused is not None:
                refused.append(f"/proc/{key[0]}/fd/{key[1]}: {e}")
    return snaps


def corrupt(snap: dict, now_ns: int) -> List[str]:
    """What in ``snap`` (a :func:`ringenv._native.pool_snapshot`) cannot be, read at ``now_ns``
    (Unix epoch); empty for a plausible pool."""
    why = []
    up_ns = now_ns - snap["created_unix_ns"]
    if snap["created_unix_ns"] == 0 or up_ns < 0:
        why.append("created in the future" if up_ns < 0 else "no creation time")
    if snap["main_pid"] != snap["pid"]:
        why.append(f"its recorded main process {snap['main_pid']} does not hold it (ended, or overwritten)")
    if snap["commands"] > max(up_ns, 0):
        why.append(f"{snap['commands']:,} commands, more than one a nanosecond")
    for w, ws in enumerate(snap["workers"]):
        if ws["pid"] > PID_MAX_LIMIT:  # (0: not started yet)
            why.append(f"worker {w}'s pid {ws['pid']} is beyond the kernel's")
        if ws["restarts"] == 2**32 - 1:
            why.append(f"worker {w} restarted 2^32 - 1 times")
        if ws["env_steps"] > ws["commands"] * len(ws["env_ids"]):
            why.append(f"worker {w} made more env steps than its commands can")
        if ws["busy_ns"] > max(up_ns, 0) or ws["wait_ns"] > max(up_ns, 0):
            why.append(f"worker {w} was busy or waiting longer than the pool exists")
    return why


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


def _table(snap: dict, old: Optional[dict], seconds: float, width: Optional[int], wide: bool) -> Table:
    names = ["worker", "pid", *(["env ids", "env steps"] if wide else []), "steps/s", "busy %", "wait %",
             *(["sleeps/s"] if wide else []), "restarts"]
    rows = []
    for w, ws in enumerate(snap["workers"]):
        ow = old["workers"][w] if old and w < len(old["workers"]) else None
        busy = _rate(ws["busy_ns"] / 1e9, ow and ow["busy_ns"] / 1e9, seconds)
        wait = _rate(ws["wait_ns"] / 1e9, ow and ow["wait_ns"] / 1e9, seconds)
        fmt = lambda v, f, scale=1: "-" if v is None else format(v * scale, f)  # noqa: E731
        cells = {"worker": str(w) + (" (inline)" if ws["pid"] == snap["pid"] else ""), "pid": str(ws["pid"]),
                 "env ids": _env_ids_text(ws["env_ids"]), "env steps": f"{ws['env_steps']:,}",
                 "steps/s": fmt(_rate(ws["env_steps"], ow and ow["env_steps"], seconds), ",.0f"),
                 "busy %": fmt(busy, ".0f", 100), "wait %": fmt(wait, ".0f", 100),
                 "sleeps/s": fmt(_rate(ws["sleeps"], ow and ow["sleeps"], seconds), ",.0f"),
                 "restarts": str(ws["restarts"])}
        rows.append([cells[n] for n in names] + [ws["last_error"]])
    # Each column as wide as its widest cell; the last error gets what is left of the line (at
    # least its heading, at most _MAX_LAST_ERROR_CHARS), its middle cut (where a long text is least
    # telling).
    widths = [max(len(n), *(len(r[i]) for r in rows)) for i, n in enumerate(names)]
    room = _MAX_LAST_ERROR_CHARS if width is None else width - sum(widths) - 2 * len(names)
    room = max(len("last error"), min(room, _MAX_LAST_ERROR_CHARS))
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for n in names:
        t.add_column(n, justify="left" if n == "env ids" else "right", no_wrap=True)
    t.add_column("last error", no_wrap=True, max_width=room)
    for r in rows:
        t.add_row(*(Text(c) for c in r[:-1]), Text(_printable_middle(r[-1], room)))
    return t


def _view(current: Dict[Key, dict], previous: Dict[Key, dict], seconds: float, ended: Sequence[Key],
          refused: Sequence[str] = (), width: Optional[int] = None, wide: bool = False,
          now_ns: Optional[int] = None) -> RenderableType:
    """The rendered view, ``width`` columns wide (``None``: as wide as it needs). Every text is a
    ``rich.text.Text`` (never parsed as markup) and every text read from a segment goes through
    ``_printable``."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    parts: List[RenderableType] = []
    if not current and not ended:
        parts.append(Text("no ringenv pools running for this user"))
    for key, snap in sorted(current.items()):
        why = corrupt(snap, now_ns)
        if why:
            parts.append(Text(f"pool of pid {snap['pid']} (segment fd {snap['fd']}): corrupt counters, not shown: "
                              + _printable("; ".join(why), 400)))
            continue
        # A worker whose pid is the main process's is the inline share (AsyncVectorEnv's `inline`).
        inline = sum(1 for ws in snap["workers"] if ws["pid"] == snap["pid"])
        count = len(snap["workers"]) - inline
        workers = f"{count} worker{'' if count == 1 else 's'}" + (" + inline share" if inline else "")
        parts.append(Text(f"pool of pid {snap['pid']}: {snap['num_envs']} envs, {workers}, "
                          f"up {(now_ns - snap['created_unix_ns']) / 1e9:,.0f} s, {snap['commands']:,} commands, "
                          f"main process slept {snap['main_sleeps']:,} times"))
        parts.append(_table(snap, previous.get(key), seconds, width, wide))
    for pid, fd in ended:
        parts.append(Text(f"pool of pid {pid} (segment fd {fd}) ended"))
    for reason in refused[:_MAX_REFUSED_LINES]:
        parts.append(Text(f"ignored {_printable(reason, 300)}", style="dim"))
    if len(refused) > _MAX_REFUSED_LINES:
        parts.append(Text(f"... and {len(refused) - _MAX_REFUSED_LINES} more ignored segments", style="dim"))
    return Group(*parts)


def _ended(previous: Dict[Key, dict], current: Dict[Key, dict]) -> List[Key]:
    return [key for key in previous if key not in current]


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if not 0 < args.interval <= INTERVAL_MAX_S:
        raise UsageError(f"argument --interval: must be a number of seconds above 0 and at most {INTERVAL_MAX_S:,.0f} "
                         f"(a day), got {args.interval}")
    if args.iterations is not None and args.iterations < 1:
        raise UsageError(f"argument --iterations: must be at least 1, got {args.iterations}")

    # SIGTERM ends top between two frames, never in the middle of a line.
    state = {"printing": False, "terminated": False}

    def terminate(signum, frame):
        state["terminated"] = True
        if not state["printing"]:
            raise _Terminated()

    signal.signal(signal.SIGTERM, terminate)
    # Not a terminal (a pipe, a log): one frame after another, each flushed. The width is the
    # terminal's (COLUMNS, or 80 when not a terminal); --wide takes at least WIDE_COLUMNS.
    console = Console(highlight=False, emoji=False)
    if args.wide and console.width < WIDE_COLUMNS:
        console = Console(highlight=False, emoji=False, width=WIDE_COLUMNS)
    try:
        _loop(args, console, state)
    except _Terminated:
        print("ringenv top: terminated", file=sys.stderr)
        return TERMINATED
    finally:
        sys.stdout.flush()
    return 0


def _loop(args: argparse.Namespace, console: Console, state: Dict[str, bool]) -> None:
    def view(current, previous, seconds, ended, refused=()) -> RenderableType:
        return _view(current, previous, seconds, ended, refused, width=console.width, wide=args.wide)

    # Rates are over the time between two snapshots as measured, not the interval asked for.
    previous, then = _snapshots(), time.monotonic()
    if args.once:
        time.sleep(args.interval)
        refused: List[str] = []
        current = _snapshots(refused)
        console.print(view(current, previous, time.monotonic() - then, _ended(previous, current), refused))
        return
    live = console.is_terminal
    ended: List[Key] = []
    refreshes = 0
    screen = Live(view(previous, {}, 0.0, []), console=console, auto_refresh=False) if live else None
    with screen or contextlib.nullcontext():
        while args.iterations is None or refreshes < args.iterations:
            time.sleep(args.interval)
            refused = []
            current, now = _snapshots(refused), time.monotonic()
            now_ended = _ended(previous, current)
            ended = now_ended + [k for k in ended if k not in now_ended][:5]
            frame = view(current, previous, now - then, ended, refused)
            state["printing"] = True
            if screen is not None:
                screen.update(frame, refresh=True)
            else:
                console.print(frame)
                console.print()
                console.file.flush()
            state["printing"] = False
            if state["terminated"]:
                raise _Terminated()
            previous, then = current, now
            refreshes += 1

