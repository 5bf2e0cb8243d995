"""`leviathan <name>` is the module leviathan/commands/<name>.py, and nothing else adds it."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import leviathan.commands
from leviathan.cli import build_parser
from leviathan.commands import COMMANDS


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def test_each_command_is_the_module_of_its_name() -> None:
    assert _commands(build_parser()) == list(COMMANDS)
    for name in COMMANDS:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(f"leviathan.commands.{name}").register(sub)
        assert _commands(parser) == [name], f"leviathan/commands/{name}.py must add `{name}` only"


def test_every_command_module_is_listed() -> None:
    here = Path(leviathan.commands.__file__).parent
    modules = {p.stem for p in here.glob("*.py")} - {"__init__"}
    assert modules == set(COMMANDS)
