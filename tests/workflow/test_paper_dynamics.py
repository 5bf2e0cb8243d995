"""The paper's study plans its dynamics: 3 seeds of the 200m main cells (seeds_by_scale), the
val evaluation of every kept checkpoint (evaluate.along), their GPU-hours and disk in the plan
that `leviathan config show` prints."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from workflow_helpers import ROOT

from leviathan.cells import Cell, config_cells
from leviathan.cost.disk import study_disk
from leviathan.cost.plan import plan_cell
from leviathan.cost.plan_eval import plan_evals
from leviathan.cost.plan_text import render_plan
from leviathan.study.config import check_names, resolve

PAPER = ROOT / "config" / "paper.yaml"


@pytest.fixture(scope="module")
def paper() -> dict[str, Any]:
    return resolve([PAPER], root=ROOT)


def _off(config: dict[str, Any]) -> dict[str, Any]:
    """The config with one seed everywhere and no evaluation along training."""
    out = copy.deepcopy(config)
    out["studies"]["main"].pop("seeds_by_scale")
    out["runtime"]["checkpoint"]["keep_at"] = ""
    out["evaluate"]["along"] = False
    return out


def test_the_200m_main_cells_train_three_seeds(paper: dict[str, Any]) -> None:
    seeds: dict[tuple[str, str, str], list[int]] = {}
    for c in config_cells(paper):
        seeds.setdefault((c.scale, c.vocab, c.variant), []).append(c.seed)
    assert seeds[("200m", "o200k_base", "tied")] == [0, 1, 2]
    assert seeds[("200m", "o200k_base", "leviathan")] == [0, 1, 2]
    assert all(s == [0] for k, s in seeds.items() if k[:2] != ("200m", "o200k_base"))
    # the 4 cells more cost 4 x a 200m o200k cell's training (the plan's ~3.5 GPU-hours each)
    one = _off(paper)
    extra = {c for c in config_cells(paper)} - {c for c in config_cells(one)}
    assert {(c.variant, c.seed) for c in extra} == {
        (v, s) for v in ("tied", "leviathan") for s in (1, 2)
    }
    hours = [plan_cell(paper, c).gpu_hours for c in extra]
    seed0 = {
        v: plan_cell(paper, Cell("200m", "o200k_base", v, 0, "pile")).gpu_hours
        for v in ("tied", "leviathan")
    }
    assert sorted(hours) == sorted(seed0[c.variant] for c in extra)  # the seed changes no cost
    assert 10 < sum(h or 0.0 for h in hours) < 16


def test_seeds_by_scale_names_only_the_studys_scales(paper: dict[str, Any]) -> None:
    config = copy.deepcopy(paper)
    config["studies"]["main"]["seeds_by_scale"] = {"tiny": [0, 1]}
    with pytest.raises(
        ValueError, match=r"studies.main.seeds_by_scale: 'tiny' is not one of the study's scales"
    ):
        check_names(config)


def test_the_plan_counts_the_evaluations_along_training(paper: dict[str, Any]) -> None:
    cell = Cell("1.2b", "o200k_base", "leviathan", 0, "pile")
    evals = {e.evaluation: e for e in plan_evals(paper, cell)}
    val, along = evals["val"], evals["along"]
    kept = 11 + 91_935 // 2_000  # log2:512:2000 on 91,935 steps: 0, 1, ..., 512, then every 2,000
    assert along.jobs == kept
    assert along.tokens == kept * 65_536 * 512
    assert along.flops is not None and val.flops is not None
    assert math.isclose(along.flops, kept * val.flops)
    assert along.gpu_hours is not None and val.gpu_hours is not None
    assert math.isclose(along.gpu_hours, kept * val.gpu_hours)
    assert along.job_hours == pytest.approx(val.gpu_hours)  # each job is one val evaluation
    assert along.fits and along.gpu_hours > along.runtime_hours  # the sum is no one job's
    assert "along" not in {e.evaluation for e in plan_evals(_off(paper), cell)}


def test_config_show_counts_their_cost(paper: dict[str, Any]) -> None:
    """The totals line adds the along evaluations' GPU-hours, the disk line the kept weights."""
    text, off = render_plan(paper, memory=False), render_plan(_off(paper), memory=False)
    assert "along tok" in text and "along tok" not in off
    assert "evaluate.along" in text
    plans = [plan_cell(paper, c) for c in config_cells(paper)]
    along = sum(
        e.gpu_hours or 0.0
        for p in plans
        for e in plan_evals(paper, p.cell, p.mfu)
        if e.evaluation == "along"
    )
    total = sum(e.gpu_hours or 0.0 for p in plans for e in plan_evals(paper, p.cell, p.mfu))
    assert along > 5.0  # hundreds of val jobs, the 1.2b ones ~0.1 GPU-hours each
    assert f"+ evaluation {total:,.1f} =" in text
    disk = study_disk(paper, plans)
    assert disk.kept_checkpoints == sum(p.kept_checkpoints * p.params * 4 for p in plans) > 0
    assert "kept checkpoints" in text and "kept checkpoints" not in off
