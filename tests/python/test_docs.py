"""The examples in ringenv's public docstrings run and give what they show."""

import doctest
import re
from pathlib import Path

import pytest

import ringenv


def test_package_docstring_example_runs():
    result = doctest.testmod(ringenv, verbose=False)
    assert result.attempted >= 4, "the package docstring lost its example"
    assert result.failed == 0


def _switch_blocks():
    """The README's Python blocks that show a one-line switch (they say "instead of:")."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    return [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "instead of:" in b]


def test_readme_shows_the_one_line_switch_for_gymnasium_torchrl_and_sb3():
    blocks = _switch_blocks()
    switched = {lib for lib in ("gymnasium", "torchrl", "stable_baselines3") if any(
        f"instead of: from {lib}" in b for b in blocks)}
    assert switched == {"gymnasium", "torchrl", "stable_baselines3"}, switched


@pytest.mark.parametrize("block", _switch_blocks(), ids=lambda b: b.split("instead of: from ")[1].split()[0])
def test_readme_switch_block_runs(block):
    namespace: dict = {"__name__": "readme_block"}
    exec(compile(block, "README.md", "exec"), namespace)


# --- The docs and the code's comments state what is, not how it came to be ----------------------

#: Words and forms that tell a history of the work rather than what the code or the docs are. Each
#: is a regular expression, matched case-insensitively within one line. ``session`` counts only
#: where it means a stretch of work: the phrases of :data:`_NOT_WORK_SESSIONS` (a process session,
#: an interactive interpreter, pytest's scope) are removed from a line before it is matched.
#: ``lent``/``lending`` count only for machines: a batch of observations *lent* to the caller
#: (``ringenv/_leases.py``) is the code's own term.
HISTORY_WORDS = {
    "an issue number": r"\bissues?[ -]#?\d+",
    "a work session": r"\bsessions?\b",
    "a lent machine": (r"\b(?:first|second|third|fourth|fifth|sixth|seventh|next|last|each|one|a|the|this)"
                       r"\s+lending\b|\blendings\b|\blent\b[^.;]*\b(?:machine|GPU|H100|H200)\b"
                       r"|\b(?:machine|GPU|H100|H200)\b[^.;]*\blent\b"),
    "an audit": r"\baudit(?!wheel)",
    "a commit hash": r"`(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}`",
    "a dated run": r"\b20\d\d-\d\d-\d\d\b",
    "the 2-core VM": r"\b2-core VM",
}
_NOT_WORK_SESSIONS = re.compile(
    r"interactive (?:interpreter )?session|session \(process group\)|session leader|session id"
    r"|setsid|scope=\"session\"|pytest session|\(session\)|login session", re.I)
_HISTORY = {what: re.compile(rx, re.I) for what, rx in HISTORY_WORDS.items()}

#: Where the rule applies: the README, docs/, and the comments and docstrings of the source.
#: ``benches/RESULTS.md`` is exempt: its tables carry their run's date and commit by design.
_SOURCE_DIRS = ("runtime/src", "workers/src", "bindings/src", "bindings/python/ringenv", "scripts")


def _comment_lines_rust(text: str):
    for number, line in enumerate(text.splitlines(), 1):
        if "//" in line:
            yield number, line[line.index("//"):]


def _comment_lines_shell(text: str):
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        if stripped.startswith("#"):
            yield number, stripped
        elif " #" in line:
            yield number, line[line.index(" #"):]


def _comment_lines_python(text: str):
    """The lines of ``text``'s comments and docstrings (module, class and function docstrings,
    and ``#:`` attribute docs, which are comments)."""
    import ast
    import io
    import tokenize

    lines = text.splitlines()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                yield tok.start[0], tok.string
    except (tokenize.TokenError, SyntaxError):  # pragma: no cover - every file here parses
        pass
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                for number in range(body[0].lineno, body[0].end_lineno + 1):
                    yield number, lines[number - 1]


def _scanned_lines(root: Path):
    """``(path, line number, text)`` of every line the history rule applies to."""
    for path in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        generated = False  # the demo's table (scripts/demo.py --markdown) carries its run's date
        for number, line in enumerate(path.read_text().splitlines(), 1):
            generated = (generated or "<!-- demo-table:start -->" in line) and "<!-- demo-table:end -->" not in line
            if not generated:
                yield path, number, line
    files = [p for d in _SOURCE_DIRS for p in sorted((root / d).rglob("*")) if p.is_file()]
    files += sorted((root / "benches").glob("*.py"))
    for path in files:
        if path.suffix == ".rs":
            lines = _comment_lines_rust(path.read_text())
        elif path.suffix in (".py", ".pyi"):
            lines = _comment_lines_python(path.read_text())
        elif path.suffix == ".sh":
            lines = _comment_lines_shell(path.read_text())
        else:
            continue
        for number, line in lines:
            yield path, number, line


def history_hits(root: Path):
    """``"path:line: what: text"`` for each line under ``root`` that matches :data:`HISTORY_WORDS`."""
    hits = []
    for path, number, line in _scanned_lines(root):
        for what, rx in _HISTORY.items():
            text = _NOT_WORK_SESSIONS.sub("", line) if what == "a work session" else line
            if rx.search(text):
                hits.append(f"{path.relative_to(root)}:{number}: {what}: {line.strip()[:120]}")
    return hits


def test_history_rule_catches_each_form_and_spares_the_code_terms():
    caught = ["see issue 12", "a later session found it", "the fifth lending", "on a lent H100 machine",
              "after an outside audit", "built at `b2509ba`", "run on 2026-11-24", "on the 2-core VM"]
    spared = ["a batch lent to the caller", "run in a session (process group) of its own",
              "an interactive session", "lending starts at 64 KiB", "`1000000` steps", "`cafebabe`",
              "a two-core machine", "checked by `auditwheel show`"]
    def matches(line):
        return [w for w, rx in _HISTORY.items()
                if rx.search(_NOT_WORK_SESSIONS.sub("", line) if w == "a work session" else line)]
    assert all(matches(line) for line in caught), [line for line in caught if not matches(line)]
    assert not any(matches(line) for line in spared), {line: matches(line) for line in spared}


def test_docs_and_comments_state_what_is_not_its_history():
    """README.md, docs/ and the source's comments and docstrings hold no issue numbers, work
    sessions, lent machines, audits, commit hashes, dated runs or "the 2-core VM" (history lives
    in git; benchmark tables with their dates live in benches/RESULTS.md)."""
    hits = history_hits(Path(__file__).resolve().parents[2])
    assert not hits, "history in the docs or comments:\n" + "\n".join(hits)


def test_every_test_docs_reliability_names_exists():
    """Each ``tests/...::name`` in docs/RELIABILITY.md is a test of that file, and each file it
    names exists, so a promise never points at a test that was renamed or removed."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "RELIABILITY.md").read_text()
    named = re.findall(r"`((?:tests|scripts|fuzz)/[\w/]+\.(?:py|rs))(?:::(\w+))?`", text)
    assert len(named) >= 40, "docs/RELIABILITY.md lost its tests"
    missing = []
    for path, name in named:
        source = root / path
        if not source.exists():
            missing.append(path)
        elif name and not re.search(rf"\b(?:def|fn) {name}\b", source.read_text()):
            missing.append(f"{path}::{name}")
    assert not missing, missing
