"""`leviathan status`: every cell's state, step, loss and ETA, read from real run directories
(one real training; the other states made from copies of it the way they arise: a final
checkpoint not yet written, a real process holding the run's lock, an exit record written by
the trainer's own writer, an error line in the job's log, a log written just now with no lock
held). A live cell is a subprocess holding the lock, with a pipe handshake: no sleeps."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from leviathan import layout
from leviathan.cells import Cell, config_cells
from leviathan.checkpoint.files import checkpoints_dir, final_dir, step_dir
from leviathan.study.resolve import cell_train_config
from leviathan.study.status import cell_status, render_status, run_state
from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig
from leviathan.train.exit_record import amend_reason, read_exit, record_exit
from leviathan.train.metrics_log import read_metrics, rewind_metrics
from leviathan.train.preemption import Preempted
from leviathan.train.trainer import train

VARIANTS = ["albert", "factored_mlp", "flat_mlp", "leviathan", "tied", "untied"]
CONFIG = {
    "studies": {"s": {"scales": ["micro"], "vocabs": ["gpt2"], "variants": VARIANTS, "seeds": [0]}},
    "train": {"micro": {"total_tokens": 8 * 64 * 6}},
    "corpus": {"name": "embedded", "kind": "embedded"},
}


def _cell(variant: str) -> Cell:
    return Cell("micro", "gpt2", variant, 0, "embedded")


def _copy_unfinished(done: Cell, to: Cell, step: int) -> Path:
    """`done`'s run, copied to `to`'s run directory, as it was at `step` (its log just written,
    no exit record: a run killed outright)."""
    run = Path(layout.run_dir(to))
    shutil.copytree(layout.run_dir(done), run)
    shutil.rmtree(final_dir(run))
    layout.exit_file(run).unlink()
    rewind_metrics(layout.metrics_file(run), step, run / "aside.jsonl")
    return run


HOLD = (
    "import sys\n"
    "from leviathan.lock import hold_lock\n"
    "with hold_lock(sys.argv[1], 'run directory', folder=True):\n"
    "    print('held', flush=True)\n"
    "    sys.stdin.readline()\n"  # until the test lets go
)


@contextmanager
def holding(run: Path | str) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the lock of run directory `run` while the block runs (it has
    said so on its stdout); it lets go when the block ends."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0


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
    assert read_exit(layout.run_dir(done))["outcome"] == "finished"  # the trainer's record
    _copy_unfinished(done, _cell("untied"), 4)  # running: a process holds its lock
    albert = _copy_unfinished(done, _cell("albert"), 2)  # preempted: its exit record says so
    saved = step_dir(checkpoints_dir(albert), 2)
    with pytest.raises(Preempted), record_exit(albert):
        raise Preempted(signal.SIGTERM, saved)
    _copy_unfinished(done, _cell("flat_mlp"), 4)  # stopped by an error
    log = Path(layout.cell_log("train", _cell("flat_mlp")))
    log.parent.mkdir(parents=True)
    log.write_text("step 4/6 | loss 10.1\nleviathan train: error: non-finite training loss\n")
    _copy_unfinished(done, _cell("factored_mlp"), 4)  # stale: its log just written, no lock
    with holding(layout.run_dir(_cell("untied"))):
        rows = {r.cell.variant: r for r in (cell_status(CONFIG, c) for c in config_cells(CONFIG))}
    assert {v: r.state for v, r in rows.items()} == {
        "tied": "done",
        "untied": "running",
        "albert": "preempted",
        "flat_mlp": "failed",
        "factored_mlp": "stopped",
        "leviathan": "not started",
    }
    assert rows["albert"].note == f"stopped by signal SIGTERM; resume from {saved}"
    assert rows["factored_mlp"].note is not None and "no exit record" in rows["factored_mlp"].note
    losses = {
        r["step"]: r["loss"]
        for r in read_metrics(layout.metrics_file(layout.run_dir(done)), "train")
    }
    assert (rows["tied"].step, rows["tied"].total, rows["tied"].loss) == (6, 6, losses[6])
    assert (rows["albert"].step, rows["albert"].loss) == (2, losses[2])
    assert (rows["leviathan"].step, rows["leviathan"].loss) == (0, None)
    assert rows["untied"].eta_s is not None and rows["untied"].eta_s > 0
    assert all(rows[v].eta_s is None for v in set(VARIANTS) - {"untied"})
    table = render_status(list(rows.values())).splitlines()
    assert table[0].split() == ["cell", "state", "step", "loss", "ETA"]
    assert table[-1] == "1 not started, 1 running, 1 stopped, 1 preempted, 1 failed, 1 done"
    albert_row = next(i for i, line in enumerate(table) if line.startswith(_cell("albert").key))
    assert " 2/6 " in table[albert_row]
    assert table[albert_row + 1] == f"  preempted: {rows['albert'].note}"  # below its row


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
    above = [line for line in out[: out.index(errors[0])] if not line.startswith("  ")]
    assert above[-1].startswith(_cell("albert").key)  # below its row (and its note)
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


def test_running_only_while_a_process_holds_the_lock(tmp_path: Path) -> None:
    """A live cell (a process holding its lock), then the same cell once it let go with its log
    written just now and no exit record (stale: not running), then one killed outright."""
    run = tmp_path / "run"
    _log(run, range(1, 3))
    with holding(run):
        assert run_state(run) == ("running", None)
    state, note = run_state(run)  # the log is as recent as before: no lock, not running
    assert state == "stopped" and note is not None and note.startswith("no exit record")
    killed = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert killed.stdout is not None and killed.stdout.readline().strip() == "held"
    killed.kill()  # SIGKILL: its lock file stays, naming it, and holds no lock
    killed.wait()
    assert f"process {killed.pid} on" in layout.lock_file(run, True).read_text()
    assert run_state(run)[0] == "stopped"


@pytest.mark.parametrize(
    ("raised", "state", "reason"),
    [
        (KeyboardInterrupt(), "stopped", "stopped at once by Ctrl-C"),
        (ValueError("non-finite training loss at step 3:\n  lower lr"), "failed", "lower lr"),
    ],
)
def test_a_stopped_or_failed_cell_by_its_exit_record(
    tmp_path: Path, raised: BaseException, state: str, reason: str
) -> None:
    run = tmp_path / "run"
    _log(run, range(1, 3))
    with pytest.raises(type(raised)), record_exit(run):
        raise raised
    got, note = run_state(run)
    assert got == state and note is not None and reason in note and "\n" not in note
    with record_exit(run):  # the next attempt: the record of the last is gone while it runs
        assert not layout.exit_file(run).exists()
    assert read_exit(run)["outcome"] == "finished"  # type: ignore[index]


def test_the_command_amends_only_its_own_exit_record(tmp_path: Path) -> None:
    """A command that learns more after the trainer ended (the micro-batch that fits) amends
    the reason its process wrote; a record another process wrote is left alone."""
    run = tmp_path / "run"
    _log(run, range(1, 3))
    with pytest.raises(RuntimeError), record_exit(run):
        raise RuntimeError("out of memory: try micro_batch 2")
    amend_reason(run, "out of memory:\n try micro_batch 1")
    record = read_exit(run)
    assert record is not None and record["reason"] == "out of memory: try micro_batch 1"
    assert "micro_batch 1" in (run_state(run)[1] or "")
    layout.exit_file(run).write_text(
        layout.exit_file(run).read_text().replace(f'"pid": {os.getpid()}', '"pid": 1')
    )
    amend_reason(run, "a reason of another process's record")
    assert read_exit(run)["reason"] == "out of memory: try micro_batch 1"  # type: ignore[index]


def test_a_run_on_another_host_by_its_exit_record_else_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen from another host (its name patched for the probe), a lock file cannot be checked:
    the holder's own exit record decides; without one, whether the run still shows signs of
    life (its lock file, written at its start, or its metrics log, written since)."""
    import socket

    from leviathan.lock import hold_lock

    run = tmp_path / "run"
    log = _log(run, range(1, 3))
    here = socket.gethostname()
    with hold_lock(run, "run directory", folder=True):
        written = max(log.stat().st_mtime, layout.lock_file(run, True).stat().st_mtime)
        with monkeypatch.context() as m:
            m.setattr(socket, "gethostname", lambda: "another-host")
            state, note = run_state(run, now=written + 60, stale_s=900)
            assert state == "running"
            assert note is not None and f"process {os.getpid()} on {here}" in note
            assert run_state(run, now=written + 901, stale_s=900)[0] == "stopped"
        with pytest.raises(ValueError), record_exit(run):
            raise ValueError("a bad shard")  # the holder's record, written before it lets go
        with monkeypatch.context() as m:
            m.setattr(socket, "gethostname", lambda: "another-host")
            assert run_state(run, now=written + 60) == ("failed", "a bad shard")


@pytest.mark.slow  # one Snakemake dry run of the two-cell grid (~15 s)
def test_will_rerun_where_snakemakes_dry_run_plans_the_train_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two done cells on the same shards: one finished after the shards were written, one
    before (its shards since rebuilt). Snakemake decides from the files' times alone here (no
    job of this copy has run, so it has no metadata; a rule script newer than an output counts
    as changed code, so every file is dated after the copy's): it plans the second only."""
    from workflow_helpers import small_config, tool_env, workflow_copy

    from leviathan.cli import main

    work = workflow_copy(tmp_path)
    config = small_config(work)
    monkeypatch.chdir(work)
    for key, value in tool_env().items():
        monkeypatch.setenv(key, value)
    corpus = config["corpus"]["name"]
    older_cell, newer_cell = config_cells(config)
    then = max(p.stat().st_mtime for p in work.rglob("*")) + 10  # after the rule scripts
    for age, files in enumerate(
        [
            [Path(layout.final_marker(older_cell))],
            [layout.corpus_file(layout.corpus_dir(corpus), split) for split in layout.SPLITS],
            [Path(p) for p in layout.token_files(layout.tokens_dir(corpus, "gpt2")).values()],
            [Path(layout.final_marker(newer_cell))],
        ]
    ):
        for path in files:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
            os.utime(path, (then + 60 * age, then + 60 * age))
    assert main(["status"]) == 0  # fast by default: Snakemake is not asked
    assert capsys.readouterr().out.splitlines()[-1] == "2 done"
    assert main(["status", "--rerun"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "1 done, 1 will rerun"
    rows = {line.split()[0]: i for i, line in enumerate(out[1:-1], 1) if line[0] != " "}
    assert out[rows[older_cell.key]].split()[1:3] == ["will", "rerun"]
    assert out[rows[older_cell.key] + 1] == (
        "  will rerun: Snakemake would retrain it: updated input files"
    )
    assert out[rows[newer_cell.key]].split()[1] == "done"


ATTEMPT = """
import sys
from types import SimpleNamespace
from leviathan.study.logs import rule_log
rule_log(SimpleNamespace(log=[sys.argv[1]], rule="train", wildcards={"scale": "micro"}))
print(sys.argv[2], flush=True)
"""


def test_only_the_newest_attempt_of_a_job_log_tells_a_failure(tmp_path: Path) -> None:
    """A job log keeps every attempt (study/logs.py): an attempt killed outright, with no
    last word, is not failed because the attempt before it was."""
    from leviathan.study.status import _job_failed

    log = tmp_path / "seed0.log"

    def attempt(last_line: str) -> None:
        argv = [sys.executable, "-c", ATTEMPT, str(log), last_line]
        subprocess.run(argv, check=True)

    attempt("leviathan train: error: the GPU fell off the bus")
    assert _job_failed(log)
    attempt("step 5 of 100")  # then SIGKILL: nothing more
    assert "attempt 2 of rule train" in log.read_text()
    assert not _job_failed(log)
