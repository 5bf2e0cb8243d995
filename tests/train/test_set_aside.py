"""A run of another config set aside by the workflow's restart_on_mismatch is a WARNING on
stderr (the job's log) naming the folder it went to and why."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig, train_config
from leviathan.train.trainer import train

QUIET = RuntimeConfig(
    progress=False,
    log_line_s=0,
    validation=ValidationConfig(every=0),
    checkpoint=CheckpointConfig(every=2),
)


@pytest.mark.slow  # two 4-step trainings of the micro model (~10 s)
def test_setting_a_run_aside_warns_naming_the_folder_and_why(
    gpt2_shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = train_config("micro", "gpt2", "tied", total_tokens=8 * 64 * 4)
    run = tmp_path / "run"
    kw = {"train_bins": [gpt2_shards / "train.bin"], "val_bin": None, "run_dir": run}
    train(cfg, runtime=QUIET, **kw)
    assert "WARNING" not in capsys.readouterr().err
    again = train(cfg.with_(lr=1e-3), runtime=replace(QUIET, restart_on_mismatch=True), **kw)
    assert again.start_step == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "WARNING" in line]
    assert len(err) == 1
    assert f"as {run / 'checkpoints.stale-1'} " in err[0]
    assert "lr: checkpoint 0.003 != now 0.001" in err[0]
    assert (run / "checkpoints.stale-1" / "final").is_dir()
