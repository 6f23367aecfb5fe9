"""Sections of ``benches/RESULTS.md`` that one script owns: the lines between that script's two
markers (``<!-- NAME:begin -->``, ``<!-- NAME:end -->``), replaced by its own run and kept as they
are by every other writer of the file (:data:`OWNED` lists them; ``benches/run_all.py`` rewrites
the rest of the file and keeps them all, :func:`keep`)."""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

#: The owned sections, by name, and whether a new one goes before the file's first ``## ``
#: heading (else at the end): ``grid`` (``benches/grid.py``), ``ray`` (``benches/ray_scaling.py``),
#: ``async_share``, ``wakeup`` (``benches/wakeup_policy.py``), ``obs_copies``, ``text_obs``,
#: ``idle_cpu``, ``startup`` and ``info_kinds`` (each ``benches/<name>.py``).
OWNED = {"grid": True, "ray": False, "async_share": False, "wakeup": False, "obs_copies": False,
         "text_obs": False, "idle_cpu": False, "startup": False, "info_kinds": False}


def median_spread(values: Sequence[float], fmt: str = ",.0f") -> str:
    """A table cell of repeated measurements: their median, then ``(min..max)``, each formatted
    with ``fmt`` (``format``'s spec)."""
    return f"{format(float(np.median(values)), fmt)} ({format(min(values), fmt)}..{format(max(values), fmt)})"


def markers(name: str) -> Tuple[str, str]:
    """The begin and end markers of the section ``name``."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def extract(text: str, begin: str, end: str) -> Optional[List[str]]:
    """The section of ``text`` between ``begin`` and ``end`` as lines (markers included), or
    ``None`` when ``text`` has no such section."""
    if begin not in text or end not in text:
        return None
    return (begin + text.split(begin, 1)[1].split(end, 1)[0] + end).splitlines()


def replace(text: str, lines: List[str], begin: str, end: str, before_first_heading: bool) -> str:
    """``text`` with its section between ``begin`` and ``end`` replaced by ``lines`` (markers
    included); without one, ``lines`` go before the first ``## `` heading when
    ``before_first_heading``, else at the end."""
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
    """Replaces (or adds) the section ``name`` of the results file at ``path`` with ``lines``
    (markers included); a file that does not exist yet starts as ``# Benchmark results``."""
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
    """Adds a section script's ``--output`` option: the results file its section goes into
    (default: ``benches/RESULTS.md``), ``-`` for none."""
    parser.add_argument("--output", default=str(Path(__file__).resolve().parent / "RESULTS.md"),
                        help="the results file to write this run's section into; - for none")


def report_head(args: argparse.Namespace) -> Dict[str, Any]:
    """The start of a section script's report: the machine (``ringenv.cli._common.machine_info``),
    the parsed ``args`` and the UTC time the run started."""
    from ringenv.cli._common import machine_info

    return {"machine": machine_info(), "args": args,
            "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def section_head(name: str, title: str, report: Dict[str, Any], after_start: str = "") -> List[str]:
    """The first lines of the section ``name`` that the script ``benches/NAME.py`` owns: its begin
    marker, the heading ``## TITLE (`benches/NAME.py`)``, a blank line, and the line that says the
    section is written by that script, with the machine and the run's start (``report`` from
    :func:`report_head`), ``after_start`` (e.g. ``", load 0.30 at start"``) before its full stop."""
    m, script = report["machine"], f"benches/{name}.py"
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
    """Prints the section ``name`` (``lines``, markers included) and writes it into the results
    file ``output`` unless that is ``-`` (see :func:`write`)."""
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
