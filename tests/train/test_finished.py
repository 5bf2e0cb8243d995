"""A rerun of a finished train job as Snakemake makes it (the declared output,
checkpoints/final/state.json, deleted first) trains no step: state.json is put back from the
final's manifest, byte for byte, with or without `drop_steps_at_final`, and one INFO line says
so. A final without state.json that its manifest cannot give back is set aside with a WARNING."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from leviathan import layout
from leviathan.checkpoint.integrity import STATE_FIELD, reinstate_state
from leviathan.checkpoint.store import latest_checkpoint
from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig, train_config
from leviathan.train.finished import set_aside_run
from leviathan.train.metrics_log import read_metrics
from leviathan.train.trainer import train

STEPS = 4
CFG = train_config("micro", "gpt2", "tied", total_tokens=8 * 64 * STEPS)


def _runtime(drop: bool) -> RuntimeConfig:
    return RuntimeConfig(
        progress=False,
        validation=ValidationConfig(every=2, windows=2),
        checkpoint=CheckpointConfig(every=2, keep_last=1, drop_steps_at_final=drop),
    )


def _train(shards: Path, run: Path, drop: bool):  # type: ignore[no-untyped-def]
    return train(
        CFG,
        train_bins=[shards / "train.bin"],
        val_bin=shards / "val.bin",
        run_dir=run,
        runtime=_runtime(drop),
    )


def _files(final: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(final.iterdir())}


@pytest.fixture(scope="module")
def finished(gpt2_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run, its step checkpoint step_2 kept beside its final."""
    run = tmp_path_factory.mktemp("finished") / "run"
    _train(gpt2_shards, run, drop=False)
    return run


def _copy(run: Path, tmp_path: Path, drop: bool) -> Path:
    """A copy of `run`; `drop`: as drop_steps_at_final leaves it (its final only)."""
    copy = Path(shutil.copytree(run, tmp_path / "run"))
    for step in (copy / "checkpoints").glob("step_*") if drop else ():
        shutil.rmtree(step)
    return copy


@pytest.mark.parametrize("drop", [True, False], ids=["drop_steps_at_final", "step_kept"])
def test_a_snakemake_rerun_of_a_finished_job_trains_no_step(
    finished: Path, gpt2_shards: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, drop: bool
) -> None:
    run = _copy(finished, tmp_path, drop)
    final = run / "checkpoints" / "final"
    assert bool(list(final.parent.glob("step_*"))) is not drop
    before, log = _files(final), (run / "metrics.jsonl").read_bytes()
    (final / "state.json").unlink()  # what Snakemake does before it reruns the job
    with caplog.at_level(logging.INFO, logger="leviathan.train"):
        again = _train(gpt2_shards, run, drop)
    assert (again.start_step, again.steps) == (STEPS, STEPS)
    assert _files(final) == before  # state.json as training wrote it; the manifest untouched
    assert (run / "metrics.jsonl").read_bytes() == log  # no step trained, no start record
    lines = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert [r.levelname for r in lines] == ["INFO"], [r.getMessage() for r in lines]
    assert f"{final} verified against its manifest" in lines[0].getMessage()
    assert "nothing to train" in lines[0].getMessage()
    assert not list(final.parent.glob("*.damaged-*"))


def test_a_final_whose_state_cannot_be_put_back_is_set_aside(
    finished: Path, gpt2_shards: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its manifest's copy edited (it no longer hashes as recorded): the final is set aside
    with a WARNING, kept, and the run resumes from its newest step checkpoint."""
    run = _copy(finished, tmp_path, drop=False)
    final = run / "checkpoints" / "final"
    mpath = final / "model.safetensors.json"
    manifest = json.loads(mpath.read_text())
    manifest[STATE_FIELD]["val_loss"] = 0.5
    mpath.write_text(json.dumps(manifest))
    (final / "state.json").unlink()
    with caplog.at_level(logging.INFO, logger="leviathan.train"):
        again = _train(gpt2_shards, run, drop=False)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "state.json: missing" in warnings[0], warnings
    assert f"set aside as {final}.damaged-1" in warnings[0]
    assert (final.parent / "final.damaged-1" / "model.safetensors").is_file()
    assert again.start_step == 2 and (final / "state.json").is_file()
    start = read_metrics(run / "metrics.jsonl", "start")[-1]
    assert start["damaged"][0]["file"] == "state.json"


@pytest.mark.slow  # the command as the train rule runs it (a Python process with torch)
def test_the_train_command_says_the_run_finished_in_one_info_line(
    finished: Path, gpt2_shards: Path, tmp_path: Path
) -> None:
    run = _copy(finished, tmp_path, drop=True)
    (run / "checkpoints" / "final" / "state.json").unlink()
    argv = [sys.executable, "-m", "leviathan.cli", "train", "--scale", "micro", "--vocab"]
    argv += ["gpt2", "--variant", "tied", "--train", str(gpt2_shards / "train.bin")]
    argv += ["--val", str(gpt2_shards / "val.bin"), "--run-dir", str(run)]
    argv += ["--set", f"total_tokens={8 * 64 * STEPS}", "--runtime", "progress=false"]
    argv += ["--runtime", "validation.every=2", "--runtime", "validation.windows=2"]
    argv += ["--runtime", "checkpoint.drop_steps_at_final=true"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("INFO: "), out.stderr
    assert "nothing to train" in lines[0]
    assert json.loads(out.stdout)["start_step"] == STEPS


def test_retraining_sets_the_old_run_aside(finished: Path, tmp_path: Path) -> None:
    """Every checkpoint and the metrics log moved aside, kept: the next training starts afresh."""
    run = _copy(finished, tmp_path, drop=False)
    weights = (run / "checkpoints/final/model.safetensors").read_bytes()
    aside = set_aside_run(run)
    assert aside == run / "checkpoints.stale-1"
    assert (aside / "final" / "model.safetensors").read_bytes() == weights
    assert (aside / "step_00000002").is_dir()
    assert (aside / "metrics.jsonl").is_file() and not (run / "metrics.jsonl").exists()
    assert (aside / "metrics.jsonl.json").is_file()
    assert latest_checkpoint(run / "checkpoints") is None
    assert set_aside_run(tmp_path / "none") is None and not (tmp_path / "none").exists()


def test_leviathan_retrain_sets_a_cells_run_aside_and_names_its_target(
    finished: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from leviathan.cli import main

    root = Path(__file__).resolve().parents[2]
    for name in ("config", "workflow"):
        (tmp_path / name).symlink_to(root / name)
    cell = ["--scale", "micro", "--vocab", "gpt2", "--variant", "tied"]
    monkeypatch.chdir(tmp_path)
    assert main(["target", *cell]) == 0
    target = capsys.readouterr().out.strip()
    run = tmp_path / layout.run_of(target)
    shutil.copytree(finished, run)
    assert main(["retrain", *cell]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == target
    assert "checkpoints.stale-1" in err and "starts at step 0" in err
    assert (run / "checkpoints.stale-1" / "final" / "model.safetensors").is_file()
    assert not (run / "checkpoints").exists()


def test_an_empty_final_folder_is_no_checkpoint(tmp_path: Path) -> None:
    """Snakemake makes the output's folder before a first job runs: nothing to put back."""
    (tmp_path / "final").mkdir()
    assert reinstate_state(tmp_path / "final") is None
    assert not any((tmp_path / "final").iterdir())
    (tmp_path / "final" / "optim.pt").write_bytes(b"")
    damage = reinstate_state(tmp_path / "final")
    assert damage is not None and damage.file == "model.safetensors.json"
