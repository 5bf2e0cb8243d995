"""The `leviathan` command: one subcommand per pipeline step.

Each step module exposes `register(subparsers)`, adding its subcommand(s) with
`set_defaults(func=...)`; `func(args)` returns the process exit code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from leviathan import __version__

Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def _registrars() -> list[Register]:
    from leviathan.data import cli as data_cli
    from leviathan.eval import cli as eval_cli
    from leviathan.export import cli as export_cli
    from leviathan.model import cli as model_cli
    from leviathan.report import cli as report_cli
    from leviathan.train import cli as train_cli
    from leviathan.workflow import cli as workflow_cli

    return [
        model_cli.register,
        data_cli.register,
        train_cli.register,
        eval_cli.register,
        export_cli.register,
        workflow_cli.register,
        report_cli.register,
    ]


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
