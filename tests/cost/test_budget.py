"""The budget `leviathan config show` prints first, held against the plan's own rows for the
paper's study (config/paper.yaml): each figure recomputed here from the rows, the peak GPUs by
a sweep of its own, and the printed totals against the plan's printed ones."""

from __future__ import annotations

import re
from typing import Any

import pytest

from leviathan import layout
from leviathan.cells import Cell
from leviathan.cost.budget import (
    DOWNLOAD_MB_S,
    PREDICTION_MARGIN,
    TOKENIZE_MB_S_PER_CPU,
    render_budget,
    study_budget,
)
from leviathan.cost.disk import study_disk
from leviathan.cost.plan import CellPlan, study_plans
from leviathan.cost.plan_eval import EvalPlan, plan_evals
from leviathan.cost.plan_text import render_plan
from leviathan.study.cluster import rule_threads, scale_resources
from leviathan.study.config import resolve
from leviathan.study.corpus_size import corpus_bytes


@pytest.fixture(scope="module")
def paper() -> tuple[dict[str, Any], list[CellPlan], dict[Cell, list[EvalPlan]]]:
    config = resolve([str(layout.repo_root() / "config" / "paper.yaml")], root=layout.repo_root())
    plans = study_plans(config)
    return config, plans, {p.cell: plan_evals(config, p.cell, p.mfu) for p in plans}


def _peak_by_events(jobs: list[tuple[float, float, int]]) -> int:
    """The most GPUs held at once: +GPUs at each start, -GPUs at each end (ends first)."""
    events = sorted([(s, 1, g) for s, e, g in jobs if e > s] + [(e, 0, -g) for s, e, g in jobs])
    held = peak = 0
    for _, _, delta in events:
        held += delta
        peak = max(peak, held)
    return peak


def test_the_budget_sums_the_plans_own_rows(paper: Any, tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)  # no run folders: nothing set aside counts in the disk
    config, plans, evals = paper
    budget = study_budget(config, plans, evals, study_disk(config, plans))
    assert all(p.gpu_hours for p in plans) and len(plans) == 18  # 14 cells + 4 seeds at 200m
    train = sum(p.gpu_hours for p in plans)
    evaluation = sum(e.gpu_hours or 0.0 for es in evals.values() for e in es)
    assert budget.train_gpu_hours == pytest.approx(train)
    assert budget.eval_gpu_hours == pytest.approx(evaluation)
    # the data step: each vocabulary's text tokenized at the stated rate, the largest fetched
    need = corpus_bytes(config)
    cpu_h = sum(need.values()) / (TOKENIZE_MB_S_PER_CPU * 1e6) / 3600
    assert budget.data_cpu_hours == pytest.approx(cpu_h)
    assert budget.download_bytes == max(need.values()) == study_disk(config, plans).corpus_text
    assert budget.from_hub  # the paper's corpus: the Pile mirror on the Hub
    start = budget.download_bytes / (DOWNLOAD_MB_S * 1e6) / 3600 + max(need.values()) / (
        TOKENIZE_MB_S_PER_CPU * 1e6
    ) / 3600 / rule_threads(config, "tokenize")
    assert budget.data_wall_h == pytest.approx(start)
    # each training job: GPU-hours over its GPUs, on its nodes; then its evaluations, 1 GPU each
    jobs, node_h, ends = [], 0.0, []
    for p in plans:
        wall = p.gpu_hours / p.gpus
        node_h += wall * scale_resources(config, p.cell.scale)["nodes"]
        jobs.append((start, start + wall, p.gpus))
        for e in evals[p.cell]:  # along training: e.jobs jobs at once, one kept checkpoint each
            jobs.append((start + wall, start + wall + e.gpu_hours / e.jobs, e.jobs))
            node_h += e.gpu_hours
        ends.append(start + wall + max(e.gpu_hours / e.jobs for e in evals[p.cell]))
    assert budget.node_hours == pytest.approx(node_h)
    assert budget.critical_path_h == pytest.approx(max(ends))
    assert budget.peak_gpus == _peak_by_events(jobs) >= sum(p.gpus for p in plans)
    assert budget.disk.total == study_disk(config, plans).total


def test_the_printed_budget_agrees_with_the_printed_plan(
    paper: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    config, plans, evals = paper
    budget = render_budget(study_budget(config, plans, evals, study_disk(config, plans)))
    text = "\n".join(budget)
    plan = render_plan(config, memory=False, plans=plans)
    total = re.search(
        r"total GPU-hours: training ([\d,.]+) \+ evaluation ([\d,.]+) = ([\d,.]+)", plan
    )
    assert total is not None
    train, evaluation, both = total.groups()
    assert f"GPU-hours {both} (training {train} + evaluation {evaluation})" in text
    margin = re.search(r"with the margin ([\d,.]+)", text)
    assert margin is not None  # the first: the GPU-hours' (the plan prints one decimal)
    with_margin = float(both.replace(",", "")) * (1 + PREDICTION_MARGIN)
    assert float(margin[1].replace(",", "")) == pytest.approx(with_margin, abs=0.12)
    disk = re.search(r"disk at most ([\d,.]+ [KMGT]?B) \(peak\), ([\d,.]+ [KMGT]?B) once", plan)
    assert disk is not None and f"disk peak {disk[1]}, {disk[2]} once" in text
    assert "docs/gpu.md" in text  # the margin's basis is named
