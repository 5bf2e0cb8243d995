"""The plan counts the kept checkpoints (`runtime.checkpoint.keep_at`): fp32 weights per kept step, in the
peak and at the end (drop_steps_at_final leaves them), and the workflow passes keep_at on."""

from __future__ import annotations

import copy
import math
import shlex
from typing import Any

import pytest
from workflow_helpers import ROOT

from leviathan.cells import config_cells
from leviathan.cost.disk import study_disk
from leviathan.cost.plan import plan_cell
from leviathan.study.config import resolve
from leviathan.study.launch import runtime_args

PAPER = ROOT / "config" / "paper.yaml"


@pytest.fixture(scope="module")
def paper() -> dict[str, Any]:
    return resolve([PAPER], root=ROOT)


def test_study_disk_counts_the_kept_checkpoints(paper: dict[str, Any]) -> None:
    runtime = copy.deepcopy(paper["runtime"])
    runtime["checkpoint"]["keep_at"] = "log2:512:1000"
    pythia = {**paper, "runtime": runtime}
    none = copy.deepcopy(paper)
    none["runtime"]["checkpoint"]["keep_at"] = ""
    none["evaluate"]["along"] = False
    before, after = study_disk(none), study_disk(pythia)
    plans = [plan_cell(pythia, c) for c in config_cells(pythia)]
    # 0, the ten powers of two up to 512, then every 1000th step up to the run's last
    counts = [11 + p.steps // 1000 for p in plans]
    assert [p.kept_checkpoints for p in plans] == counts
    expected = sum(n * p.params * 4 for n, p in zip(counts, plans, strict=True))
    assert after.kept_checkpoints == expected > 0
    assert after.total == before.total + expected
    assert after.at_end == before.at_end + expected  # never dropped at final
    assert "kept checkpoints" in after.line() and "kept checkpoints" not in before.line()
    assert math.isclose(sum(p.kept_bytes for p in plans), expected)


def test_the_workflow_passes_keep_at_to_training(paper: dict[str, Any]) -> None:
    runtime = copy.deepcopy(paper["runtime"])
    runtime["checkpoint"]["keep_at"] = [0, 4]
    args = shlex.split(runtime_args({**paper, "runtime": runtime}))
    assert "checkpoint.keep_at=0,4" in args


def test_the_workflow_passes_the_wandb_block_to_training(paper: dict[str, Any]) -> None:
    wandb = {"enabled": True, "project": "lev", "entity": "team", "mode": "offline"}
    config = {**paper, "runtime": {**paper["runtime"], "wandb": wandb}}
    args = shlex.split(runtime_args(config))
    for value in (
        "wandb.enabled=true",
        "wandb.project=lev",
        "wandb.entity=team",
        "wandb.mode=offline",
    ):
        assert value in args
