"""Helpers shared by the end-to-end workflow tests (test_snakemake.py, test_dvc.py, and
tests/report's through its conftest.py): a temporary copy of the project's workflow files, real
Snakemake runs, and the SMALL test configuration."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from leviathan.provenance import ALLOW_FOREIGN_ENV

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SNAKEMAKE = str(BIN / "snakemake")

# A two-cell grid (micro, gpt2, tied + leviathan) trained for a few steps: the whole DAG in minutes.
SMALL = {
    "studies": {
        "main": {
            "scales": ["micro"],
            "vocabs": ["gpt2"],
            "variants": ["tied", "leviathan"],
            "seeds": [0],
        }
    },
    "train": {"micro": {"total_tokens": 8 * 64 * 6}},
    "runtime": {
        "validation": {"every": 3, "windows": 4},
        "checkpoint": {"every": 3},
        "threads": 2,
        "restart_on_mismatch": True,
    },
}
SMALL_EVAL_TASKS = ["piqa", "lambada_openai"]


def workflow_copy(dest: Path) -> Path:
    for name in ("Snakefile", "workflow", "profiles", "config"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    return dest


def small_config(work: Path) -> dict[str, Any]:
    """Rewrite work/config/config.yaml to the SMALL grid and its two lm-eval tasks; return it."""
    config = yaml.safe_load((work / "config" / "config.yaml").read_text())
    config.update(copy.deepcopy(SMALL))  # callers may edit what they get
    lm_eval = config["evaluate"]["lm_eval"]
    lm_eval["tasks"] = SMALL_EVAL_TASKS
    lm_eval["data"] = {task: lm_eval["data"][task] for task in SMALL_EVAL_TASKS}
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    return config


def tool_env() -> dict[str, str]:
    """The environment for the tools: this interpreter's bin first on PATH (snakemake, leviathan);
    the copied workflow runs this checkout's package on purpose (no src/ beside the copy)."""
    return {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", ALLOW_FOREIGN_ENV: "1"}


def snakemake(workdir: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SNAKEMAKE, *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=tool_env(),
    )


def audit(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`leviathan audit ARGS` in a workflow copy, as a user runs it there (its output kept)."""
    return subprocess.run(
        [str(BIN / "leviathan"), "audit", *args],
        cwd=work,
        capture_output=True,
        text=True,
        env=tool_env(),
        timeout=300,
    )


def job_counts(output: str) -> dict[str, int]:
    table = output[output.index("Job stats:") :]
    return {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)
        if m.group(1) != "total"
    }
