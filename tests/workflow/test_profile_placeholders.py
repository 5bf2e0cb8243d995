"""The shipped SLURM profile's `<your-...>` placeholders are refused as the workflow loads, so a
dry run says so in one line before any job; filled in (profile or command line), it plans."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from workflow_helpers import snakemake, workflow_copy

from leviathan.study.placeholders import placeholder_error, placeholders


def test_placeholders_in_default_and_set_resources() -> None:
    args = ["mem_mb=8000", "slurm_account=<your-account>", "slurm_partition='gpu'", "tmpdir=x"]
    rules = {
        "train": {"slurm_extra": SimpleNamespace(raw="'--qos=<your-qos>'")},
        "eval_val": {"slurm_partition": "<your-partition>", "mem_mb": 4000},
        "report": {"slurm_partition": SimpleNamespace(raw="cpu")},
    }
    assert placeholders(args, rules) == [
        "slurm_account=<your-account>",
        "train:slurm_extra='--qos=<your-qos>'",
        "eval_val:slurm_partition=<your-partition>",
    ]
    filled = ["mem_mb=8000", "slurm_account=proj42", "slurm_partition=gpu"]
    settings = SimpleNamespace(
        default_resources=SimpleNamespace(args=filled), overwrite_resources={}
    )
    assert placeholder_error(settings) is None
    settings.default_resources.args = args
    error = placeholder_error(settings)
    assert error is not None and "\n" not in error
    assert "slurm_account=<your-account>" in error and "--default-resources" in error


def test_the_shipped_profile_is_refused_by_the_dry_run(tmp_path: Path) -> None:
    work = workflow_copy(tmp_path)
    out = snakemake(work, "-n", "--profile", "profiles/slurm", "all")
    assert out.returncode != 0
    said = out.stdout + out.stderr
    refusal = [line for line in said.splitlines() if "placeholders" in line]
    assert len(refusal) == 1, said
    assert "slurm_account=<your-account>" in refusal[0]
    assert "slurm_partition=<your-partition>" in refusal[0]
    assert "Job stats" not in said  # nothing planned
