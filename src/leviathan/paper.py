"""Access to the paper's reported figures (config/paper_reported.yaml, their one home)."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from leviathan.layout import PAPER_REPORTED

ENV_VAR = "LEVIATHAN_PAPER_REPORTED"


def repo_root() -> Path:
    """The checkout this package runs from (src/leviathan/ -> repository root)."""
    return Path(__file__).resolve().parents[2]


def reported_path() -> Path:
    return Path(os.environ.get(ENV_VAR) or repo_root() / PAPER_REPORTED)


@cache
def reported() -> dict[str, Any]:
    path = reported_path()
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: the paper's reported figures are missing; run from a checkout of the "
            f"project or set {ENV_VAR} to the path of {PAPER_REPORTED}"
        )
    return yaml.safe_load(path.read_text())
