"""The ``ringenv`` command (also ``python -m ringenv.cli``).

``ringenv tune ENV`` measures ENV through ringenv with each worker count and recommends one;
``ringenv top`` shows the pools running on this machine, live. See docs/CLI.md.

``ringenv --version`` prints the package version.

Exit status: 0 on success, 1 when a measurement fails (an env that cannot be built or stepped),
2 for a bad command line (one line on stderr naming the argument), 130 on Ctrl-C, 143 when
``top`` gets SIGTERM.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Optional, Sequence

from ringenv.cli._common import RunError, UsageError

__all__ = ["main", "build_parser"]

_DESCRIPTION = """\
ringenv's command line: 'ringenv tune ENV' measures ENV through ringenv with each worker count and
recommends one; 'ringenv top' shows the pools running on this machine, live. 'ringenv COMMAND --help' lists a
command's options (docs/CLI.md in ringenv's repository has examples). Exit status: 0 done, 1 a
measurement failed, 2 bad arguments, 130 interrupted, 143 terminated (SIGTERM)."""


class _Formatter(argparse.HelpFormatter):
    """Fills each paragraph of a description to the terminal's width (``COLUMNS``, else 80),
    keeping the blank lines between paragraphs."""

    def _fill_text(self, text, width, indent):
        return "\n\n".join(textwrap.fill(" ".join(p.split()), width, initial_indent=indent,
                                         subsequent_indent=indent) for p in text.split("\n\n"))


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors become :class:`UsageError` (one line, exit status 2)
    instead of a usage block and ``sys.exit``."""

    def error(self, message):
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    import ringenv
    from ringenv.cli import top, tune

    parser = _Parser(prog="ringenv", description=_DESCRIPTION,
                     formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"ringenv {ringenv.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module, summary in [("tune", tune, "measure ENV with each worker count, with and without the "
                                                 "inline share, and recommend one"),
                                  ("top", top, "show the ringenv pools running on this machine, live")]:
        p = sub.add_parser(name, help=summary, description=module.DESCRIPTION,
                           formatter_class=_Formatter)
        module.add_arguments(p)
        p.set_defaults(run=module.run)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the ``ringenv`` command with ``argv`` (default ``sys.argv[1:]``); returns the exit
    status (0, 1, 2 or 130) rather than exiting, except for ``--help``, which returns 0."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = "ringenv" + (f" {argv[0]}" if argv and argv[0] in ("tune", "top") else "")
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as e:  # --help, or argparse exiting by itself
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        return args.run(args, argv)
    except UsageError as e:
        print(f"{prog}: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except RunError as e:
        print(f"{prog}: error: {_one_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def _one_line(e: BaseException) -> str:
    return " ".join(line.strip() for line in str(e).splitlines() if line.strip())
