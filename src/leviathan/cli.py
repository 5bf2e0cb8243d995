"""The `leviathan` command: `leviathan <name>` is the module `leviathan/commands/<name>.py`."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from leviathan import __version__
from leviathan.io import DiskFull

Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def _registrars() -> list[Register]:
    from leviathan.commands import COMMANDS

    return [importlib.import_module(f"leviathan.commands.{name}").register for name in COMMANDS]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="leviathan",
        description="Leviathan reproduction pipeline (arXiv 2601.22040).",
    )
    parser.add_argument("--version", action="version", version=f"leviathan {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _registrars():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command. A user error (a bad value, key or file: ValueError, FileNotFoundError; a
    full disk: DiskFull) is one line on stderr and exit status 2; a reader that closes the
    pipe early (`leviathan params --json | head`) ends the command quietly, as `cat` does."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        # the reader is gone: send what is still buffered nowhere (else Python reports the
        # pipe again at exit) and stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, FileNotFoundError, DiskFull) as exc:  # user errors: one line
        print(f"leviathan {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
