"""Errors of the evaluation layer: each says what is wrong and how to fix it.

All are `ValueError`s, so the `leviathan` command prints them without a traceback.
"""

from __future__ import annotations


class EvalInputError(ValueError):
    """An input of an evaluation is missing, malformed or disagrees with another input."""


class HubUnreachable(EvalInputError):
    """A dataset must come from the Hugging Face Hub, which cannot be reached from here."""
