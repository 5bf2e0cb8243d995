"""The offline stand-ins of the evaluation data: hand-written files in the official schemas
(workflow/resources/smoke/) that let the default config run WikiText and the lm-eval tasks on
machines without the Hub. A number computed on them is not comparable to the paper's: every
evaluation output lists the stand-ins it read (`stand_in_data`), and every table, figure and
summary that shows such a number says so (leviathan.report)."""

from __future__ import annotations

import os

STAND_IN_DIR = "workflow/resources/smoke/"
STAND_IN_ALIAS = "(stand-in)"  # after a task's name where it ran on the stand-ins


def is_stand_in(path: str | os.PathLike[str]) -> bool:
    """Whether a data file is one of the offline stand-ins (relative or absolute path)."""
    p = "/" + str(path).replace(os.sep, "/").lstrip("/")
    return "/" + STAND_IN_DIR in p
