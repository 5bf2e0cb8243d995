"""The plan recalibrated from measured step times: metrics logs written by the trainer's own
telemetry (`TrainTelemetry`, the records a run writes), the recalibrated plan against a hand
computation from those records, and the WARNING when a run slower than predicted cannot finish
within its time limit and the profile's retries."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from leviathan import layout
from leviathan.cells import Cell, config_cells
from leviathan.checkpoint import files
from leviathan.cost.budget import profile_retries
from leviathan.cost.plan import study_plans
from leviathan.cost.recalibrate import recalibrate, render_recalibration, status_lines
from leviathan.model.accounting import account
from leviathan.study.config import resolve
from leviathan.study.resolve import cell_train_config
from leviathan.train.config import RuntimeConfig
from leviathan.train.distributed import DistInfo
from leviathan.train.metrics_log import MetricsLog, read_metrics
from leviathan.train.telemetry import StepRecord, TrainTelemetry

H100 = "NVIDIA H100 80GB HBM3"  # the device name torch reports on an H100 SXM


def _config(tmp_path: Path, resources: dict[str, Any]) -> dict[str, Any]:
    path = tmp_path / "study.yaml"
    study = {"scales": ["micro"], "vocabs": ["gpt2"], "variants": ["tied", "leviathan"]}
    path.write_text(
        yaml.safe_dump(
            {
                "studies": {"s": {**study, "seeds": [0]}},
                "corpus": {"name": "embedded", "kind": "embedded"},
                "train": {"micro": {"total_tokens": 8 * 64 * 40}},
                "resources": {"micro": resources},
            }
        )
    )
    return resolve([str(path)], root=layout.repo_root())


def _cell(config: dict[str, Any], variant: str) -> Cell:
    return next(c for c in config_cells(config) if c.variant == variant)


def _log_run(config: dict[str, Any], cell: Cell, seconds: Sequence[float], device: str) -> Path:
    """A run's metrics log as the trainer writes it: its start record, then one train record
    per step taking `seconds[i]` (on `device`, as torch names it)."""
    cfg = cell_train_config(config, cell)
    path = layout.metrics_file(layout.run_dir(cell))
    log = MetricsLog(path)
    telemetry = TrainTelemetry(
        log,
        cfg=cfg,
        runtime=RuntimeConfig(progress=False, log_line_s=0),
        info=DistInfo(0, 1, 0, torch.device("cpu")),
        flops_per_token=account(cfg.model_config(), cfg.context).train_flops,
    )
    telemetry.device = device
    telemetry.start(0, params=1, resumed_from=None, set_aside=None, because=None)
    for step, s in enumerate(seconds, 1):
        telemetry.record_step(StepRecord(step, 5.0, 1e-3, 1.0, s))
    log.close()
    return path


def _flops_per_step(config: dict[str, Any], cell: Cell) -> float:
    cfg = cell_train_config(config, cell)
    return float(account(cfg.model_config(), cfg.context).train_flops) * cfg.tokens_per_step


def test_the_plan_recalibrates_from_a_measured_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, {"gpus": 1, "gpu_model": "h100", "runtime": 60})
    tied, lev = _cell(config, "tied"), _cell(config, "leviathan")
    plans = study_plans(config)
    assert recalibrate(config, plans) == []  # nothing has run: the prediction stands
    # the first step compiles (12 s); the others 0.4-0.6 s on the H100
    path = _log_run(config, tied, [12.0, 0.5, 0.4, 0.6, 0.5, 0.45], H100)
    records = read_metrics(path, "train")
    step_s = statistics.median(r["step_s"] for r in records[1:])  # 0.5
    rows = {r.plan.cell: r for r in recalibrate(config, plans, retries=2)}
    steps = cell_train_config(config, tied).max_steps
    assert rows[tied].source == "measured" and rows[tied].step_s == pytest.approx(step_s)
    assert rows[tied].remaining_h == pytest.approx((steps - 6) * step_s / 3600)
    assert rows[tied].remaining_gpu_hours == pytest.approx((steps - 6) * step_s / 3600 * 1)
    # leviathan is unmeasured: the tied pace times the counted FLOPs ratio, from step 0
    ratio = _flops_per_step(config, lev) / _flops_per_step(config, tied)
    assert ratio != 1.0
    assert rows[lev].step_s == pytest.approx(step_s * ratio)
    assert rows[lev].remaining_h == pytest.approx(steps * step_s * ratio / 3600)
    assert rows[lev].source == f"{tied.key} x FLOPs ratio"
    # printed beside the plan's prediction, with the study's remaining GPU-hours
    text = "\n".join(render_recalibration(list(rows.values())))
    left = ((steps - 6) * step_s + steps * step_s * ratio) / 3600
    assert f"remaining: {left:,.1f} GPU-hours at the measured paces" in text
    lev_line = next(x for x in text.splitlines() if x.startswith(f"  {lev.key} "))
    predicted = next(p.gpu_hours for p in plans if p.cell == lev)  # one GPU: its wall hours
    assert lev_line.split()[1:4] == [
        f"{predicted:,.2f}",
        f"{steps * step_s * ratio / 3600:,.2f}",
        f"{steps * step_s * ratio / 3600:,.2f}",
    ]
    # `leviathan status`: the study's remaining hours and its expected finish
    now = 1_800_000_000.0
    line = status_lines(config, now=now)[0]
    end_h = max((steps - 6) * step_s, steps * step_s * ratio) / 3600
    finish = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(now + end_h * 3600))
    assert f"remaining: {left:,.1f} GPU-hours" in line and finish in line


def test_a_cpu_record_does_not_recalibrate_a_gpu_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, {"gpus": 1, "gpu_model": "h100", "runtime": 60})
    _log_run(config, _cell(config, "tied"), [1.0, 2.0], "cpu")
    rows = recalibrate(config, study_plans(config), retries=2)
    lev = next(r for r in rows if r.plan.cell.variant == "leviathan")
    assert lev.step_s is None and lev.source == ""  # no pace on its device: the plan's
    assert lev.remaining_h == pytest.approx(lev.predicted_wall_h)


def test_a_run_slower_than_predicted_warns_when_it_cannot_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CPU records on a CPU study: a 20-minute limit, the shipped profile's retries."""
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, {"gpus": 0, "cpus": 1, "mem_mb": 3000, "runtime": 20})
    tied, lev = _cell(config, "tied"), _cell(config, "leviathan")
    steps = cell_train_config(config, tied).max_steps
    retries = profile_retries()
    allowed_s = 20 * 60 * (retries + 1)
    ratio = _flops_per_step(config, lev) / _flops_per_step(config, tied)
    # a pace that crosses the limit but finishes within the retries: no warning
    within = 0.9 * allowed_s / steps / max(1.0, ratio)
    _log_run(config, tied, [within] * 3, "cpu")
    rows = recalibrate(config, study_plans(config), retries=retries)
    tied_row = next(r for r in rows if r.plan.cell == tied)
    assert tied_row.wall_h is not None and tied_row.wall_h > 20 / 60  # crosses one limit
    assert [r.warning() for r in rows] == [None, None]
    # slower still: its own job and leviathan's (by the FLOPs ratio) cannot finish
    slow = 1.1 * allowed_s / steps
    layout.metrics_file(layout.run_dir(tied)).unlink()
    _log_run(config, tied, [slow] * 3, "cpu")
    rows = recalibrate(config, study_plans(config), retries=retries)
    warned = {r.plan.cell: r.warning() for r in rows}
    assert warned[tied] is not None and warned[tied].count("\n") == 0
    assert warned[tied].startswith(f"WARNING: {tied.key} at its measured pace")
    assert (
        f"{steps * slow / 3600:,.1f} h" in warned[tied]
        and "resources.micro.runtime" in warned[tied]
    )
    assert (warned[lev] is not None) == (steps * slow * ratio > allowed_s)
    assert warned[tied] in status_lines(config)
    # once its final checkpoint is written, the cell is done: nothing left, nothing to warn of
    final = files.final_dir(layout.run_dir(tied))
    final.mkdir(parents=True)
    (final / files.STATE).write_text("{}")
    done = next(r for r in recalibrate(config, study_plans(config), retries) if r.plan.cell == tied)
    assert (done.remaining_h, done.warning()) == (0.0, None)


def test_the_commands_print_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`leviathan config show` (the budget first, then the recalibration) and `leviathan
    status` (the remaining hours, the WARNING) in a workflow's directory with one slow run."""
    import shutil

    from leviathan.cli import main

    schema = tmp_path / layout.CONFIG_SCHEMA  # the commands run in a workflow's directory
    schema.parent.mkdir(parents=True)
    shutil.copy(layout.repo_root() / layout.CONFIG_SCHEMA, schema)
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, {"gpus": 0, "cpus": 1, "mem_mb": 3000, "runtime": 20})
    tied = _cell(config, "tied")
    steps = cell_train_config(config, tied).max_steps
    _log_run(config, tied, [3 * 20 * 60 * (profile_retries() + 1) / steps] * 2, "cpu")
    study = str(tmp_path / "study.yaml")
    assert main(["config", "show", "--configfile", study, "--no-memory"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("budget (every figure summed from the plan's rows")
    recal = out.index(next(x for x in out if x.startswith("recalibrated from the measured")))
    assert recal < out.index(next(x for x in out if x.startswith("# resolved config of:")))
    assert any(x.startswith(f"WARNING: {tied.key} at its measured pace") for x in out)
    assert main(["status", "--configfile", study]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(x.startswith("remaining: ") and "training ends ~" in x for x in out)
    assert any(x.startswith(f"WARNING: {tied.key} at its measured pace") for x in out)
