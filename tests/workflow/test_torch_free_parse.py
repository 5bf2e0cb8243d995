"""A CPU study's workflow parses and plans without importing torch.

Every Snakemake invocation parses the Snakefile, and so does every job it submits (each SLURM
job re-runs Snakemake on its node): the modules the parse imports stay torch-free, their torch
imports inside the functions that need them, so that planning costs no torch start-up. A GPU
study imports torch while planning, on purpose: its jobs' preemption grace follows from the
size of each checkpoint, counted on the model (leviathan.study.cluster).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from workflow_helpers import ROOT, SNAKEMAKE, job_counts, tool_env, workflow_copy


def _without_torch(tmp_path: Path) -> dict[str, str]:
    """The tools' environment with a `torch` that refuses to import, ahead of the real one."""
    blocker = tmp_path / "no_torch" / "torch"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("torch imported while planning")\n')
    env = tool_env()
    env["PYTHONPATH"] = os.pathsep.join([str(blocker.parent), str(ROOT / "src")])
    return env


@pytest.mark.parametrize("configfile", [None, "config/tiny.yaml"])
def test_a_cpu_study_plans_without_torch(tmp_path: Path, configfile: str | None) -> None:
    work = tmp_path / "work"
    work.mkdir()
    workflow_copy(work)
    files = ["--configfile", configfile] if configfile else []
    out = subprocess.run(
        [SNAKEMAKE, "all", "-n", "--profile", "profiles/local", *files],
        cwd=work,
        env=_without_torch(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "torch imported while planning" not in out.stdout + out.stderr, out.stderr[-4000:]
    assert out.returncode == 0, out.stderr[-3000:]
    assert job_counts(out.stdout + out.stderr)["train"] >= 2  # it planned the cells


def test_the_blocker_blocks(tmp_path: Path) -> None:
    """The check above would see a torch import: the same environment cannot import it."""
    out = subprocess.run(
        [str(Path(SNAKEMAKE).parent / "python"), "-c", "import torch"],
        env=_without_torch(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0 and "torch imported while planning" in out.stderr
