"""Formatting and lint are the tool's (ruff, configured in pyproject.toml), not by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True
    )


def test_ruff_format_leaves_the_tree_unchanged() -> None:
    out = _ruff("format", "--check", ".")
    assert out.returncode == 0, f"run `make fmt` (ruff format):\n{out.stdout}{out.stderr}"


def test_ruff_lint_passes() -> None:
    out = _ruff("check", "--output-format", "concise", ".")
    assert out.returncode == 0, (
        f"ruff check (`make fmt` fixes the fixable):\n{out.stdout}{out.stderr}"
    )


def test_no_hand_formatting_markers() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    marked = [f for f in tracked if "# fmt: " + "skip" in (ROOT / f).read_text()]
    assert not marked, f"formatting is ruff's: drop the markers in {marked}"
