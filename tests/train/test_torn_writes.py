"""Writes cut short: a torn metrics line is set aside at the restart (a WARNING names the files)
instead of blocking every resume; a full disk while saving a checkpoint or appending a record is
one line naming the path, the bytes and the fix, and nothing of the state before is lost. The
full disk is real: a tmpfs of a few pages or megabytes (needs root; skipped, saying why,
elsewhere)."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from test_checkpoint import manager
from test_integrity import with_manifest
from test_trainer import cli

from leviathan.checkpoint import store
from leviathan.checkpoint.integrity import verify_checkpoint
from leviathan.io import DiskFull
from leviathan.layout import manifest_path
from leviathan.train.config import RuntimeConfig, ValidationConfig, train_config
from leviathan.train.metrics_log import MetricsLog, read_metrics, rewind_metrics
from leviathan.train.trainer import train


def write_records(path: Path, steps: range) -> None:
    log = MetricsLog(path)
    for step in steps:
        log.write({"kind": "train", "step": step, "loss": 1.0 / step})
    log.close()


def test_a_torn_metrics_line_is_set_aside_at_the_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "metrics.jsonl"
    write_records(path, range(1, 10))
    with open(path, "a") as fh:
        fh.write('{"kind": "train", "loss": 0.1, "st')  # the write a kill or full disk cut
    with caplog.at_level(logging.WARNING, logger="leviathan.train"):
        moved = rewind_metrics(path, 8, tmp_path / "aside.jsonl")
    assert moved == 1  # step 9: after the checkpoint
    assert [r["step"] for r in read_metrics(path)] == list(range(1, 9))
    torn = tmp_path / "metrics.torn-1.jsonl"
    assert torn.read_text() == '{"kind": "train", "loss": 0.1, "st\n'
    warning = caplog.records[-1].getMessage()
    assert str(path) in warning
    assert str(torn) in warning
    write_records(path, range(9, 10))  # the resumed run appends whole records after them
    assert [r["step"] for r in read_metrics(path)] == list(range(1, 10))


def test_an_unreadable_metrics_line_is_named_by_its_reader(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    write_records(path, range(1, 3))
    with open(path, "a") as fh:
        fh.write('{"kind": "tr')
    with pytest.raises(ValueError, match=r"metrics.jsonl:3: not a whole JSON record"):
        read_metrics(path)


def test_a_torn_last_line_of_a_finished_run_is_set_aside_by_its_rerun(
    random_shards: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The advice of a reader of a torn log (rerun the training command) works for a finished
    run too: the rerun trains nothing and sets the torn line aside. A kill while the end record
    is written comes before the log's manifest (written once the log is closed), so the torn
    log has none; one that has a manifest was edited after it, which the rerun refuses
    (tests/train/test_anchors.py)."""
    train_bin, val_bin = random_shards
    cfg = train_config("micro", "gpt2", "tied", total_tokens=8 * 64 * 2)
    runtime = RuntimeConfig(progress=False, validation=ValidationConfig(every=0, windows=2))
    kw = {"train_bins": [train_bin], "val_bin": val_bin, "run_dir": tmp_path, "runtime": runtime}
    train(cfg, **kw)  # type: ignore[arg-type]
    metrics = tmp_path / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    assert '"kind": "end"' in lines[-1]
    metrics.write_text("".join(lines[:-1]) + lines[-1][:20])  # the end record cut short
    manifest_path(metrics).unlink()  # the kill came before the log was anchored
    with pytest.raises(ValueError, match=r"rerun the run's training command, which sets such"):
        read_metrics(metrics)
    with caplog.at_level(logging.WARNING, logger="leviathan.train"):
        again = train(cfg, **kw)  # type: ignore[arg-type]
    assert again.start_step == again.steps == 2  # nothing trained again
    assert metrics.read_text() == "".join(lines[:-1])  # every whole record, unchanged
    assert [r["kind"] for r in read_metrics(metrics)][-1] == "val"
    torn = tmp_path / "metrics.torn-1.jsonl"
    assert torn.read_text() == lines[-1][:20] + "\n"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(metrics) in warnings[0] and str(torn) in warnings[0]


def test_a_record_that_is_no_object_is_named_by_its_reader(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    write_records(path, range(1, 3))
    with open(path, "a") as fh:
        fh.write("[1, 2]\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl:3: not a whole JSON record \(a JSON list"):
        read_metrics(path)


def test_disk_full_at_a_save_is_one_line_and_keeps_the_older_checkpoint(
    small_fs: Callable[[str], Path],
) -> None:
    root = small_fs("60m")  # one checkpoint of the micro model (40 MB) fits, not two
    m = with_manifest(manager(root))
    m.save_step(1, None)
    with pytest.raises(DiskFull) as caught:
        m.save_step(2, None)
    text = str(caught.value)
    assert "\n" not in text
    assert f"no space left on the filesystem of {root / 'step_00000002'}" in text
    needed = store.tensor_bytes([m.model.state_dict(), m.optimizer.state_dict()])
    assert f"needs about {needed:,} bytes" in text
    assert f"resumes from the newest checkpoint left, {root / 'step_00000001'}" in text
    assert sorted(p.name for p in root.iterdir()) == ["step_00000001"]  # no half-written dir
    assert with_manifest(manager(root)).restore(restart_on_mismatch=False).step == 1


def test_disk_full_at_a_metrics_record_is_one_line_and_cuts_no_record(
    small_fs: Callable[[str], Path],
) -> None:
    root = small_fs("8k")  # two pages
    path = root / "metrics.jsonl"
    log = MetricsLog(path)
    step = 0
    while path.stat().st_size < 3900:  # the first page nearly full
        step += 1
        log.write({"kind": "train", "step": step, "pad": "x" * 40})
    (root / "filler").write_bytes(b"\0" * 4096)  # the second page taken
    before = path.read_bytes()
    with pytest.raises(DiskFull, match=rf"{path}: writing it needs about \d+ bytes"):
        log.write({"kind": "train", "step": step + 1, "pad": "x" * 400})
    log.close()
    assert path.read_bytes() == before
    assert [r["step"] for r in read_metrics(path)] == list(range(1, step + 1))


@pytest.mark.slow
def test_leviathan_train_on_a_full_disk_says_so_in_one_line(
    small_fs: Callable[[str], Path], gpt2_shards: Path
) -> None:
    """A real run on a 60 MB filesystem: its first checkpoint (step 4) fits, the next does not;
    `leviathan train` ends with one line and exit 2, and step 4 is intact."""
    run_dir = small_fs("60m") / "run"
    argv = cli(gpt2_shards, run_dir, "--runtime", "checkpoint.every=4")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    # beside the progress lines (`step N/M | ...`), one line
    lines = [ln for ln in done.stderr.strip().splitlines() if not ln.startswith("step ")]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("leviathan train: error: no space left on the filesystem of ")
    assert "resumes from the newest checkpoint left" in lines[0]
    step4 = run_dir / "checkpoints" / "step_00000004"
    assert sorted(p.name for p in step4.parent.iterdir()) == ["step_00000004"]
    assert verify_checkpoint(step4).files == (  # intact: every file as its manifest records
        "model.safetensors",
        "optim.pt",
        "rng.pt",
        "state.json",
    )
