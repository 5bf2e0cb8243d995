"""The `leviathan` command: `leviathan <name>` is the module `leviathan/commands/<name>.py`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from leviathan import __version__

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
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:  # user errors: message, no traceback
        print(f"leviathan {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
