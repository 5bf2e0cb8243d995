"""The Snakefile and its rules are formatted by snakefmt and pass Snakemake's own linter."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from workflow_helpers import BIN, ROOT, snakemake, workflow_copy

SNAKEFMT = shutil.which("snakefmt", path=str(BIN))


@pytest.mark.skipif(SNAKEFMT is None, reason="snakefmt is not installed (the `test` extra has it)")
def test_snakefmt_leaves_the_workflow_unchanged() -> None:
    out = subprocess.run(
        [str(SNAKEFMT), "--check", "Snakefile", "workflow/rules"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, f"run `make fmt` (snakefmt):\n{out.stdout}{out.stderr}"


def test_snakemake_lint_passes(tmp_path: Path) -> None:
    """`snakemake --lint` on the default config: it exits 1 on any lint, naming rule and line."""
    out = snakemake(workflow_copy(tmp_path), "--lint", "--cores", "1")
    assert out.returncode == 0, f"snakemake --lint:\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
    assert "Lints for" not in out.stdout + out.stderr
