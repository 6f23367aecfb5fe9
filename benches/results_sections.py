"""Sections of ``benches/RESULTS.md`` that one script owns: the lines between that script's two
markers (``<!-- NAME:begin -->``, ``<!-- NAME:end -->``), replaced by its own run and kept as they
are by every other writer of the file (``benches/grid.py``, ``benches/ray_scaling.py``,
``scripts/bench.py``)."""

from __future__ import annotations

from typing import List, Optional


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
