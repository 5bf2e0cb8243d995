"""Formatting and lint are the tool's (ruff, configured in pyproject.toml), not by hand."""

from __future__ import annotations

import ast
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


MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60  # its code: the docstring is not counted


def _function_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines from `def` to its last, less its docstring's."""
    lines = (node.end_lineno or node.lineno) - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        if isinstance(first.value.value, str):
            lines -= (first.end_lineno or first.lineno) - first.lineno + 1
    return lines


def oversized(path: Path, root: Path = ROOT) -> list[str]:
    """The module itself if over MAX_MODULE_LINES, and each function over MAX_FUNCTION_LINES."""
    text, name = path.read_text(), path.relative_to(root)
    found = []
    if (n := len(text.splitlines())) > MAX_MODULE_LINES:
        found.append(f"{name}: {n} lines")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if (n := _function_lines(node)) > MAX_FUNCTION_LINES:
                found.append(f"{name}:{node.lineno} {node.name}: {n} lines")
    return found


def test_modules_and_functions_stay_small() -> None:
    """One job per module and per function: src/, the workflow's Python and the benchmarks."""
    files = [p for d in ("src", "workflow", "bench") for p in sorted((ROOT / d).rglob("*.py"))]
    found = [line for path in files for line in oversized(path)]
    assert not found, "split these by job:\n" + "\n".join(found)


def test_the_size_check_counts_code_not_docstrings(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1))
    doc = '    """A docstring\n    of three\n    lines."""\n'
    (tmp_path / "ok.py").write_text(f"def f():\n{doc}{body}\n")
    (tmp_path / "long.py").write_text(f"def f():\n{body}\n    return 1\n")
    (tmp_path / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert oversized(tmp_path / "ok.py", tmp_path) == []
    assert oversized(tmp_path / "long.py", tmp_path) == [
        f"long.py:1 f: {MAX_FUNCTION_LINES + 1} lines"
    ]
    assert oversized(tmp_path / "big.py", tmp_path) == [f"big.py: {MAX_MODULE_LINES + 1} lines"]
