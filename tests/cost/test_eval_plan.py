"""The evaluation jobs of a study: their resources per scale, the device check before any data,
and what the plan predicts for them (tokens, FLOPs, GPU-hours) and for the study's disk."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from workflow_helpers import ROOT

from leviathan.cells import Cell, config_cells
from leviathan.cost.disk import study_disk
from leviathan.cost.plan import cell_mfu, plan_cell
from leviathan.cost.plan_eval import (
    EVAL_MFU_SHARE,
    LM_EVAL_TASK_SIZES,
    WIKITEXT_TOKENS,
    plan_evals,
)
from leviathan.cost.plan_text import render_plan
from leviathan.study.actions import eval_device
from leviathan.study.cluster import eval_resources
from leviathan.study.config import resolve
from leviathan.study.resolve import cell_train_config

PAPER = ROOT / "config" / "paper.yaml"


@pytest.fixture(scope="module")
def paper() -> dict[str, Any]:
    return resolve([PAPER], root=ROOT)


def test_every_paper_evaluation_job_gets_one_gpu(paper: dict[str, Any]) -> None:
    for scale in ("200m", "400m", "1.2b"):
        job = eval_resources(paper, scale)
        assert job["gpu"] == 1
        assert job["gpu_model"] == "h100"
        assert job["threads"] == 8


def test_a_gpu_scale_without_eval_resources_names_the_fix(paper: dict[str, Any]) -> None:
    config = copy.deepcopy(paper)
    del config["eval_resources"]["400m"]
    with pytest.raises(ValueError, match=r"eval_resources has no entry for scale '400m'.*add "):
        eval_resources(config, "400m")
    # a CPU-trained scale evaluates with its training job's resources
    cpu = {"resources": {"micro": {"gpus": 0, "cpus": 3, "mem_mb": 1234, "runtime": 7}}}
    assert eval_resources(cpu, "micro")["mem_mb"] == 1234


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_a_gpu_job_without_a_gpu_stops_before_loading_anything(paper: dict[str, Any]) -> None:
    with pytest.raises(RuntimeError, match="eval_resources.1.2b.gpus: 0"):
        eval_device(paper, "1.2b")
    cpu = copy.deepcopy(paper)
    cpu["eval_resources"]["1.2b"]["gpus"] = 0
    assert eval_device(cpu, "1.2b") == "auto"


def test_evaluation_plan_re_derived(paper: dict[str, Any]) -> None:
    """Tokens from the configured sample and the stated task sizes; FLOPs per token the
    forward pass without the input generator (the table is materialised), re-derived here
    from the layer shapes: 2 x (block weights + head) + attention's 4 T D per layer."""
    cell = Cell("1.2b", "o200k_base", "leviathan", 0, "pile")
    evals = {e.evaluation: e for e in plan_evals(paper, cell)}
    tc = cell_train_config(paper, cell)
    cfg = tc.model_config()
    D, L, T, V, F = cfg.d_model, cfg.n_layers, tc.context, cfg.vocab_size, cfg.ffn_hidden
    per_token = 2 * L * (4 * D * D + 3 * D * F) + 4 * T * D * L + 2 * V * D
    assert evals["val"].tokens == 65_536 * 512
    assert evals["wikitext"].tokens == WIKITEXT_TOKENS
    assert evals["lm_eval"].tokens == sum(d * r * t for d, r, t in LM_EVAL_TASK_SIZES.values())
    for e in evals.values():
        assert e.flops is not None
        assert e.tokens is not None
        assert math.isclose(e.flops, per_token * e.tokens, rel_tol=1e-12)
        hours = e.flops / (989e12 * cell_mfu(paper, cell).mfu * EVAL_MFU_SHARE) / 3600
        assert e.gpu_hours is not None
        assert math.isclose(e.gpu_hours, hours, rel_tol=1e-9)
        assert e.runtime_hours == 4.0
        assert e.fits


def test_study_disk_re_derived(paper: dict[str, Any]) -> None:
    plans = [plan_cell(paper, c) for c in config_cells(paper)]
    disk = study_disk(paper, plans)
    step = 262_144
    o200k = math.ceil(24.1e9 / step) * step  # 1.2b's budget in whole steps
    assert disk.corpus_text == math.ceil(o200k * 5.0 * 1.1)
    small = math.ceil(4.2e9 / step) * step  # 200m's budget (gpt2: uint16, cl100k: uint32)
    assert disk.shards == math.ceil(o200k * 1.1) * 4 + math.ceil(small * 1.1) * (2 + 4)
    # keep_last: 2 step checkpoints per cell, besides the final one
    assert disk.step_checkpoints == 2 * disk.final_checkpoints
    assert disk.final_checkpoints == sum(p.params * 4 * 3 for p in plans)
    assert disk.dvc_cache == 0  # .dvc/config links (hardlink,symlink): no second copy
    # the weights kept for the evaluation along training (runtime.checkpoint.keep_at)
    assert disk.kept_checkpoints == sum(p.kept_checkpoints * p.params * 4 for p in plans)
    assert (
        disk.total
        == sum((disk.corpus_text, disk.shards, disk.step_checkpoints, disk.final_checkpoints))
        + disk.kept_checkpoints
        + disk.dvc_cache
    )
    # the paper config drops a finished cell's step checkpoints: the peak keeps them, the end not
    assert paper["runtime"]["checkpoint"]["drop_steps_at_final"] is True
    assert disk.at_end == disk.total - disk.step_checkpoints
    runtime = copy.deepcopy(paper["runtime"])
    runtime["checkpoint"]["drop_steps_at_final"] = False
    kept = study_disk({**paper, "runtime": runtime})
    assert kept.at_end == kept.total == disk.total
    assert "removed as each cell is final" in disk.line()
    assert "kept after each cell is final" in kept.line()


def test_the_dvc_cache_counts_a_copy_only_where_dvc_copies(tmp_path: Path) -> None:
    from leviathan.cost.disk import dvc_cache_copies

    config = tmp_path / "config"
    config.write_text('[cache]\n    type = "hardlink,symlink"\n')
    assert not dvc_cache_copies(config)
    config.write_text('[cache]\n    type = "reflink,copy"\n')
    assert dvc_cache_copies(config)
    config.write_text("[core]\n    analytics = false\n")  # DVC's default: reflink,copy
    assert dvc_cache_copies(config)


def test_the_plan_prints_training_and_evaluation_gpu_hours_and_the_disk(
    paper: dict[str, Any],
) -> None:
    text = render_plan(paper, memory=False)
    totals = [line for line in text.splitlines() if line.startswith("total GPU-hours: training")]
    assert len(totals) == 1
    train, evaluation, total = (float(x.replace(",", "")) for x in _numbers(totals[0]))
    assert math.isclose(train + evaluation, total, abs_tol=0.06)
    assert 0 < evaluation < train
    assert "disk at most" in text
    assert "WARNING" not in text


def _numbers(line: str) -> list[str]:
    import re

    return re.findall(r"[\d,]+\.\d", line)


def test_eval_rule_resources_follow_the_scale_and_keep_the_profiles_default(
    paper: dict[str, Any],
) -> None:
    from types import SimpleNamespace

    from leviathan.study.cluster import eval_rule_resources

    config = copy.deepcopy(paper)
    config["eval_resources"]["1.2b"]["slurm_partition"] = "gpu-big"
    rules = eval_rule_resources(config, ["slurm_partition='everyday'", "mem_mb=1000"])
    big, small = SimpleNamespace(scale="1.2b"), SimpleNamespace(scale="200m")
    assert rules["mem_mb"](big) == 64000
    assert rules["mem_mb"](small) == 32000
    assert rules["gpu"](big) == rules["gpu"](small) == 1
    assert rules["slurm_partition"](big) == "gpu-big"
    assert rules["slurm_partition"](small) == "everyday"
    assert "slurm_partition" not in eval_rule_resources(paper, None)


def _slow_cell_plan(paper: dict[str, Any], runtime_min: int) -> tuple[dict[str, Any], Any]:
    """The 1.2b leviathan cell on A100s (312 TFLOP/s, a third of an H100's) with a time limit."""
    config = copy.deepcopy(paper)
    config["resources"]["1.2b"] |= {"gpu_model": "a100", "runtime": runtime_min}
    return config, plan_cell(config, Cell("1.2b", "o200k_base", "leviathan", 0, "pile"))


def test_training_beyond_its_time_limit_names_the_attempts_and_warns_past_the_retries(
    paper: dict[str, Any],
) -> None:
    from leviathan.cost.budget import training_time_warnings

    config, plan = _slow_cell_plan(paper, 1440)  # the A100 / 24 h example
    wall = plan.gpu_hours / plan.gpus
    assert wall > 24  # the example is a real overrun
    needed = math.ceil(wall / 24)
    (warning,) = training_time_warnings(config, [plan], retries=needed - 2)
    assert warning.startswith("WARNING: 1.2b/o200k_base/leviathan/seed0 trains ~")
    assert f"{needed} attempts" in warning
    assert "raise resources.1.2b.runtime" in warning
    (note,) = training_time_warnings(config, [plan], retries=needed - 1)
    assert note.startswith("note: ")


def test_the_papers_h100_cells_fit_their_limits_and_the_plan_prints_the_warning(
    paper: dict[str, Any],
) -> None:
    from leviathan.cost.budget import profile_retries, training_time_warnings

    plans = [plan_cell(paper, c) for c in config_cells(paper)]
    assert training_time_warnings(paper, plans, retries=0) == []
    assert profile_retries() == 2  # profiles/slurm/config.yaml
    config, _ = _slow_cell_plan(paper, 300)  # 5 h: more attempts than 2 retries + 1
    assert "WARNING: 1.2b/o200k_base/leviathan/seed0 trains" in render_plan(config, memory=False)


def test_the_disk_line_counts_what_runs_have_set_aside(
    paper: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from leviathan import layout

    monkeypatch.chdir(tmp_path)
    before = study_disk(paper)
    assert "set aside" not in before.line()
    run = Path(
        layout.run_dir(Cell("400m", "o200k_base", "tied", 0, layout.config_results_key(paper)))
    )
    for name, size in (
        ("checkpoints.stale-1/step_00000100/optim.pt", 3000),
        ("checkpoints/step_00000200.damaged-1/model.safetensors", 500),
        ("metrics.torn-1.jsonl", 70),
        ("checkpoints/step_00000300/model.safetensors", 9000),  # a kept checkpoint: planned
    ):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(b"x" * size)
    after = study_disk(paper)
    assert after.set_aside == 3000 + 500 + 70
    assert after.total - before.total == 3570
    assert "set aside 3.6 KB (checkpoints of other configs" in after.line()
