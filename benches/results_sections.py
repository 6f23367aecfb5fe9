"""Sections of ``benches/RESULTS.md`` that one script owns: the lines between its markers
(``<!-- NAME:begin -->``, ``<!-- NAME:end -->``), kept as they are by every other writer."""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

#: The owned sections (``ray``: ``ray_scaling.py``, ``wakeup``: ``wakeup_policy.py``, else
#: ``benches/<name>.py``) and whether a new one goes before the file's first ``## `` heading.
OWNED = {"grid": True, "ray": False, "async_share": False, "wakeup": False, "obs_copies": False,
         "text_obs": False, "idle_cpu": False, "startup": False,
         "wait_ab": False, "main_job": False, "train_loop": False, "main_cost": False,
         "staging_cost": False, "device_rows": False, "sched_ab": False}


def median_spread(values: Sequence[float], fmt: str = ",.0f") -> str:
    """A table cell of repeated measurements: ``median (min..max)``, each formatted with ``fmt``."""
    return f"{format(float(np.median(values)), fmt)} ({format(min(values), fmt)}..{format(max(values), fmt)})"


def markers(name: str) -> Tuple[str, str]:
    """The begin and end markers of the section ``name``."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def extract(text: str, begin: str, end: str) -> Optional[List[str]]:
    """The lines of ``text`` from ``begin`` to ``end`` (markers included), or ``None``."""
    if begin not in text or end not in text:
        return None
    return (begin + text.split(begin, 1)[1].split(end, 1)[0] + end).splitlines()


def replace(text: str, lines: List[str], begin: str, end: str, before_first_heading: bool) -> str:
    """``text`` with its section between ``begin`` and ``end`` replaced by ``lines``; a new one goes
    before the first ``## `` heading when ``before_first_heading``, else at the end."""
    block = "\n".join(lines)
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        return head + block + rest.split(end, 1)[1]
    if not before_first_heading:
        return text.rstrip("\n") + "\n\n" + block + "\n"
    out = text.splitlines()
    at = next((i for i, line in enumerate(out) if line.startswith("## ")), len(out))
    return "\n".join(out[:at] + lines + [""] + out[at:]) + ("\n" if text.endswith("\n") else "")


def write(path: Path, name: str, lines: List[str]) -> None:
    """Replaces (or adds) the section ``name`` of the results file at ``path``."""
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    begin, end = markers(name)
    path.write_text(replace(text, lines, begin, end, OWNED[name]))


def numbers(cast: Callable[[str], Any] = float, minimum: float = 0) -> Callable[[str], List[Any]]:
    """An argparse type: comma-separated values of ``cast``, each at least ``minimum``."""
    def parse(text: str) -> List[Any]:
        try:
            values = [cast(v) for v in text.split(",") if v.strip()]
        except ValueError:
            values = []
        if not values or min(values) < minimum:
            raise argparse.ArgumentTypeError(f"expected comma-separated numbers of at least {minimum:g}, got {text!r}")
        return values
    return parse


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    """A section script's ``--output``: its results file (default ``benches/RESULTS.md``), ``-`` for none."""
    parser.add_argument("--output", default=str(Path(__file__).resolve().parent / "RESULTS.md"),
                        help="the results file to write this run's section into; - for none")


def report_head(args: argparse.Namespace) -> Dict[str, Any]:
    """The start of a section script's report: the machine, ``args`` and the UTC start time."""
    from ringenv.cli._common import machine_info

    return {"machine": machine_info(), "args": args,
            "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def section_head(name: str, title: str, report: Dict[str, Any], after_start: str = "",
                 script: str = "") -> List[str]:
    """The first lines of the section ``name`` of ``script`` (default ``benches/NAME.py``): its
    marker, heading and the line naming the script, the machine and the start (``after_start``
    before its full stop)."""
    m, script = report["machine"], script or f"benches/{name}.py"
    return [
        markers(name)[0],
        f"## {title} (`{script}`)",
        "",
        f"Written by `{script}`; edit the script, not this section. "
        f"Machine: {m['cores']} cores usable, CPU {m.get('cpu_model') or 'unknown'}, {m['platform']}; "
        f"Python {m['python']}, ringenv {m['ringenv']}, gymnasium {m['gymnasium']}, numpy {m['numpy']}; "
        f"{report['started']}{after_start}.",
    ]


def publish(name: str, lines: List[str], output: str) -> None:
    """Prints the section ``name`` and writes it into ``output`` unless that is ``-``."""
    print("\n".join(lines))
    if output != "-":
        write(Path(output), name, lines)


def keep(old: str, new: str) -> str:
    """``new`` (a rewritten results file) with every owned section that ``old`` holds, as it was."""
    for name, before_first_heading in OWNED.items():
        begin, end = markers(name)
        lines = extract(old, begin, end)
        if lines:
            new = replace(new, lines, begin, end, before_first_heading)
    return new
