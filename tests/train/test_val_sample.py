"""A validation record names its sample (the windows it is a mean over), and a resume that asks
for another sample is refused before the run's curve gets a point of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig, train_config
from leviathan.train.metrics_log import read_metrics
from leviathan.train.trainer import train
from leviathan.train.validation import check_val_sample


def _runtime(windows: int) -> RuntimeConfig:
    return RuntimeConfig(
        progress=False,
        validation=ValidationConfig(every=1, windows=windows),
        checkpoint=CheckpointConfig(every=1, keep_last=1),
    )


def _train(shards: Path, run_dir: Path, windows: int) -> None:
    train(
        train_config("micro", "gpt2", "leviathan", total_tokens=8 * 64 * 2),
        train_bins=[shards / "train.bin"],
        val_bin=shards / "val.bin",
        run_dir=run_dir,
        runtime=_runtime(windows),
    )


@pytest.mark.slow
def test_a_resume_with_another_validation_sample_is_refused(
    gpt2_shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "first"
    _train(gpt2_shards, first, windows=2)
    vals = read_metrics(first / "metrics.jsonl", "val")
    assert [v["step"] for v in vals] == [1, 2]
    assert all(v["sample"] == {"windows": 2} for v in vals)

    run_dir = tmp_path / "run"
    shutil.copytree(first, run_dir)
    shutil.rmtree(run_dir / "checkpoints" / "final")  # resumes from step 1
    metrics = (run_dir / "metrics.jsonl").read_bytes()
    with pytest.raises(ValueError, match=r"over validation\.windows=2 and this resume asks for "):
        _train(gpt2_shards, run_dir, windows=3)
    assert (run_dir / "metrics.jsonl").read_bytes() == metrics  # nothing of the other sample
    capsys.readouterr()
    _train(gpt2_shards, run_dir, windows=2)  # the same sample resumes
    assert "leviathan train: resumed from step 1 (" in capsys.readouterr().err
    assert read_metrics(run_dir / "metrics.jsonl", "start")[-1]["step"] == 1
    assert [v["sample"] for v in read_metrics(run_dir / "metrics.jsonl", "val")] == [
        {"windows": 2}
    ] * 2


def test_the_sample_compared_is_the_last_one_up_to_the_resumed_step(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    records = [
        {"kind": "val", "step": 1, "val_loss": 5.0},  # an older run's: no sample
        {"kind": "val", "step": 2, "val_loss": 4.0, "sample": {"windows": 8}},
        {"kind": "train", "step": 3, "loss": 4.0},
        {"kind": "val", "step": 4, "val_loss": 3.0, "sample": {"windows": 0}},  # rewound away
    ]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"kind": "va')
    check_val_sample(metrics, 3, {"windows": 8})
    check_val_sample(metrics, 1, {"windows": 64})  # nothing recorded up to step 1
    check_val_sample(tmp_path / "none.jsonl", 3, {"windows": 64})
    with pytest.raises(ValueError) as refused:
        check_val_sample(metrics, 3, {"windows": 0})
    assert "\n" not in str(refused.value)
    assert "resume with runtime.validation.windows=8" in str(refused.value)
