"""`leviathan status`: every cell's state, step, loss and ETA, read from real run directories
(one real training; the other states made from copies of it the way they arise: a final
checkpoint not yet written, a log that stopped, an error line in the job's log)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from leviathan import layout
from leviathan.cells import Cell, config_cells
from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig
from leviathan.train.metrics_log import read_metrics, rewind_metrics
from leviathan.train.trainer import train
from leviathan.workflow.resolve import cell_train_config
from leviathan.workflow.status import cell_status, render_status

VARIANTS = ["albert", "flat_mlp", "leviathan", "tied", "untied"]
CONFIG = {
    "studies": {"s": {"scales": ["micro"], "vocabs": ["gpt2"], "variants": VARIANTS, "seeds": [0]}},
    "train": {"micro": {"total_tokens": 8 * 64 * 6}},
    "corpus": {"name": "embedded", "kind": "embedded"},
}


def _cell(variant: str) -> Cell:
    return Cell("micro", "gpt2", variant, 0, "embedded")


def _copy_unfinished(done: Cell, to: Cell, step: int, age_s: float) -> Path:
    """`done`'s run, copied to `to`'s run directory, as it was at `step` `age_s` seconds ago."""
    run = Path(layout.run_dir(to))
    shutil.copytree(layout.run_dir(done), run)
    shutil.rmtree(layout.final_dir(run))
    rewind_metrics(layout.metrics_file(run), step, run / "aside.jsonl")
    then = time.time() - age_s
    os.utime(layout.metrics_file(run), (then, then))
    return run


@pytest.mark.slow  # one 6-step training of the micro model (~8 s)
def test_status_tells_every_state_apart(
    gpt2_shards: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    done = _cell("tied")
    train(
        cell_train_config(CONFIG, done),
        train_bins=[gpt2_shards / "train.bin"],
        val_bin=None,
        run_dir=layout.run_dir(done),
        runtime=RuntimeConfig(
            progress=False,
            validation=ValidationConfig(every=0),
            checkpoint=CheckpointConfig(every=2),
        ),
    )
    _copy_unfinished(done, _cell("untied"), 4, age_s=5)  # running
    _copy_unfinished(done, _cell("albert"), 2, age_s=3600)  # stopped: preempted
    _copy_unfinished(done, _cell("flat_mlp"), 4, age_s=3600)  # stopped by an error
    log = Path(layout.cell_log("train", _cell("flat_mlp")))
    log.parent.mkdir(parents=True)
    log.write_text("step 4/6 | loss 10.1\nleviathan train: error: non-finite training loss\n")
    rows = {r.cell.variant: r for r in (cell_status(CONFIG, c) for c in config_cells(CONFIG))}
    assert {v: r.state for v, r in rows.items()} == {
        "tied": "done",
        "untied": "running",
        "albert": "preempted",
        "flat_mlp": "failed",
        "leviathan": "not started",
    }
    losses = {
        r["step"]: r["loss"]
        for r in read_metrics(layout.metrics_file(layout.run_dir(done)), "train")
    }
    assert (rows["tied"].step, rows["tied"].total, rows["tied"].loss) == (6, 6, losses[6])
    assert (rows["albert"].step, rows["albert"].loss) == (2, losses[2])
    assert (rows["leviathan"].step, rows["leviathan"].loss) == (0, None)
    assert rows["untied"].eta_s is not None and rows["untied"].eta_s > 0
    assert all(rows[v].eta_s is None for v in ("tied", "albert", "flat_mlp", "leviathan"))
    table = render_status(list(rows.values())).splitlines()
    assert table[0].split() == ["cell", "state", "step", "loss", "ETA"]
    assert table[-1] == "1 not started, 1 running, 1 preempted, 1 done, 1 failed"
    assert any(line.startswith("micro/gpt2/albert/seed0") and " 2/6 " in line for line in table)


def test_the_command_reads_the_configfile_as_snakemake_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml
    from workflow_helpers import ROOT

    from leviathan.cli import main

    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(CONFIG))
    monkeypatch.chdir(ROOT)
    assert main(["status", "--configfile", str(study)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[1:-1]] == [c.key for c in config_cells(CONFIG)]
    assert all(line.split()[-3] == "0/6" for line in out[1:-1] if "not started" in line)


def _log(run: Path, steps: range) -> Path:
    """A run's metrics log as the trainer writes it (its writer): a start, then train records."""
    from leviathan.train.metrics_log import MetricsLog

    path = layout.metrics_file(run)
    log = MetricsLog(path)
    log.write({"kind": "start", "step": 0})
    for step in steps:
        log.write({"kind": "train", "step": step, "loss": 10.0 / step})
    log.close()
    return path


def test_a_cell_whose_log_cannot_be_read_is_marked_and_the_others_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml
    from workflow_helpers import ROOT

    from leviathan.cli import main

    schema = tmp_path / layout.CONFIG_SCHEMA  # the command runs in a workflow's directory
    schema.parent.mkdir(parents=True)
    shutil.copy(ROOT / layout.CONFIG_SCHEMA, schema)
    monkeypatch.chdir(tmp_path)
    _log(Path(layout.run_dir(_cell("tied"))), range(1, 4))
    torn = _log(Path(layout.run_dir(_cell("untied"))), range(1, 3))
    with open(torn, "a") as fh:
        fh.write('{"kind": "train", "lo')  # a write cut short
    no_step = _log(Path(layout.run_dir(_cell("albert"))), range(1, 2))
    with open(no_step, "a") as fh:
        fh.write('{"kind": "train", "loss": 1.0}\n')  # whole, but not the trainer's
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(CONFIG))
    assert main(["status", "--configfile", str(study)]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in out[1:-1] if line.startswith("micro/")}
    assert set(rows) == {c.key for c in config_cells(CONFIG)}  # every cell has its row
    assert rows[_cell("tied").key][-3:-1] == ["3/6", "3.333"]
    assert rows[_cell("untied").key][-3:] == ["?/6", "?", "?"]
    assert rows[_cell("albert").key][-3:] == ["?/6", "?", "?"]
    errors = [line for line in out if line.startswith("  error: ")]
    assert len(errors) == 2
    assert out[out.index(errors[0]) - 1].startswith(_cell("albert").key)  # below its row
    assert f"{no_step}: a record without a readable step" in errors[0]
    assert f"{torn}:4: not a whole JSON record" in errors[1]
    assert out[-1].endswith("; 2 with a metrics log that cannot be read")


@pytest.mark.parametrize("stale", ["-5", "0", "nan", "inf"])
def test_stale_after_is_a_positive_number_of_seconds(
    stale: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from leviathan.cli import main

    assert main(["status", f"--stale-after={stale}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert f"--stale-after {float(stale)}: give a positive number of seconds" in err[0]
