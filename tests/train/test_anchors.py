"""What a run's inputs and its log are held to: a training shard named twice, or a validation shard
among the training shards, refused in one line naming it; the log's records fixed by each
checkpoint through any number of rewinds at a resume."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from leviathan.cli import main
from leviathan.train.log_anchor import log_prefix, prefix_problem
from leviathan.train.metrics_log import MetricsLog, rewind_metrics


def _train(capsys: pytest.CaptureFixture[str], run: Path, *shards: str) -> tuple[int, str]:
    cell = ["--scale", "micro", "--vocab", "gpt2", "--variant", "tied"]
    rc = main(["train", *cell, *shards, "--run-dir", str(run), "--set", "total_tokens=512"])
    return rc, capsys.readouterr().err


def test_shards_in_two_roles_or_twice_are_refused_naming_them(
    gpt2_shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train, val = str(gpt2_shards / "train.bin"), str(gpt2_shards / "val.bin")
    copy = tmp_path / "copy.bin"  # the same tokens under another name are the same shard
    shutil.copy(train, copy)
    shutil.copy(f"{train}.json", f"{copy}.json")
    cases = {
        "the validation shard is also a training shard": ("--train", train, "--val", train),
        "is also a training shard (": ("--train", train, val, "--val", val),
        "given twice as a training shard": ("--train", train, str(copy), "--val", val),
    }
    for message, shards in cases.items():
        rc, err = _train(capsys, tmp_path / "run", *shards)
        assert rc != 0
        assert message in err, err
        assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run" / "checkpoints").exists()  # refused before any work


def test_a_checkpoints_record_of_the_log_holds_through_rewinds(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    for rec in (
        {"kind": "start", "step": 0},
        *({"kind": "train", "step": s, "loss": 1.0 / s} for s in range(1, 9)),
        {"kind": "val", "step": 8, "val_loss": 0.5},
    ):
        log.write(rec)
    at_8 = log_prefix(path, 8)  # what the checkpoint of step 8 records
    at_4 = log_prefix(path, 4)
    log.write({"kind": "train", "step": 9, "loss": 0.1})
    log.close()
    with open(path, "ab") as fh:
        fh.write(b'{"kind": "train", "st')  # a kill mid-write
    assert at_8 is not None and at_4 is not None
    assert prefix_problem(path, at_8) is None and prefix_problem(path, at_4) is None
    rewind_metrics(path, 8, tmp_path / "aside.jsonl")  # the restart from step 8
    assert prefix_problem(path, at_8) is None and prefix_problem(path, at_4) is None
    log = MetricsLog(path)
    log.write({"kind": "start", "step": 8})
    log.close()
    assert prefix_problem(path, at_8) is None
    text = path.read_text()
    path.write_text(text.replace('"loss": 0.5', '"loss": 0.25'))  # step 2's loss edited
    assert "were edited" in str(prefix_problem(path, at_4))
    assert "were edited" in str(prefix_problem(path, at_8))
    path.write_text(text[:100])
    assert "fewer than the" in str(prefix_problem(path, at_8))


def test_a_run_restarted_over_a_finished_one_anchors_its_own_log(
    gpt2_shards: Path, tmp_path: Path
) -> None:
    """A finished cell retrained with another config (its checkpoints set aside) ends with the
    manifest of its new log, not the refusal of the old one's."""
    from leviathan.io import read_json, sha256_file
    from leviathan.train.config import (
        CheckpointConfig,
        RuntimeConfig,
        ValidationConfig,
        train_config,
    )
    from leviathan.train.log_anchor import log_problems
    from leviathan.train.trainer import train

    runtime = RuntimeConfig(
        progress=False,
        restart_on_mismatch=True,
        validation=ValidationConfig(every=1, windows=2),
        checkpoint=CheckpointConfig(every=0),
    )
    bins = {"train_bins": [gpt2_shards / "train.bin"], "val_bin": gpt2_shards / "val.bin"}
    log = tmp_path / "run" / "metrics.jsonl"
    for lr in (1e-3, 2e-3):
        cfg = train_config("micro", "gpt2", "tied", total_tokens=8 * 64 * 2, lr=lr)
        train(cfg, **bins, run_dir=tmp_path / "run", runtime=runtime)
        assert read_json(f"{log}.json")["artifact"]["sha256"] == sha256_file(log)
        assert not log_problems(tmp_path / "run")
    assert (tmp_path / "run" / "checkpoints.stale-1").is_dir()
