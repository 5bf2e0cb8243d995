"""Every signal safe: SIGTERM/SIGUSR1 in the final phase (the final validation, the final save,
after it) end with a usable checkpoint and the resume message; Ctrl-C (SIGINT) checkpoints like
SIGTERM, a second Ctrl-C stops at once. The signals are real, sent to real `leviathan train`
processes; where a phase lasts too short to hit from outside, the process sends the signal to
itself as that phase begins (a patch in its own interpreter, not in the code under test)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_trainer import assert_bitwise_equal, cli, wait_for_training, weights

from leviathan.study.status import run_state
from leviathan.train.exit_record import read_exit
from leviathan.train.metrics_log import read_metrics

# Runs `leviathan train ARGS` after patching PHASE to signal its own process as it begins.
AT_PHASE = """
import os, signal, sys
from leviathan.cli import main
from leviathan.train import checkpoint, telemetry, trainer

phase, signum, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def signalling(cls, name, when=lambda *a: True):
    real = getattr(cls, name)
    def patched(self, *args, **kw):
        if when(self, *args):
            os.kill(os.getpid(), signum)
        return real(self, *args, **kw)
    setattr(cls, name, patched)

if phase == "final validation":
    signalling(trainer.Trainer, "_validate", lambda self, step, *_: step == self.cfg.max_steps)
elif phase == "final save":
    signalling(checkpoint.CheckpointManager, "save_final")
elif phase == "after the final save":
    signalling(telemetry.TrainTelemetry, "end")
elif phase == "long preemption save":  # the save after a Ctrl-C, made slow: room for a second
    real = checkpoint.CheckpointManager.save_step
    def slow(self, step, loss, *, wait=False):
        if wait:
            print("saving", file=sys.stderr, flush=True)
            import time; time.sleep(3600)
        return real(self, step, loss, wait=wait)
    checkpoint.CheckpointManager.save_step = slow
sys.exit(main(argv))
"""


def at_phase(phase: str, signum: int, argv: list[str]) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-c", AT_PHASE, phase, str(int(signum)), *argv[3:]]
    return subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("phase", "signum"),
    [
        ("final validation", signal.SIGTERM),
        ("final save", signal.SIGUSR1),
        ("after the final save", signal.SIGTERM),
    ],
)
def test_a_signal_in_the_final_phase_ends_with_the_final_checkpoint(
    gpt2_shards: Path, reference_run: Path, tmp_path: Path, phase: str, signum: int
) -> None:
    run_dir = tmp_path / "run"
    proc = at_phase(phase, signum, cli(gpt2_shards, run_dir, "--runtime", "checkpoint.every=4"))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signum, err
    final = run_dir / "checkpoints" / "final"
    said = f"stopped by signal {signal.Signals(signum).name}; resume from {final}"
    assert said in err
    record = read_exit(run_dir)  # the run's exit record says the same
    assert record is not None and (record["outcome"], record["reason"]) == ("preempted", said)
    assert_bitwise_equal(weights(run_dir), weights(reference_run))
    again = subprocess.run(cli(gpt2_shards, run_dir), capture_output=True, text=True, check=True)
    assert '"start_step": 12' in again.stdout  # the rerun finds the run complete
    assert read_exit(run_dir)["outcome"] == "finished"  # type: ignore[index]
    assert [r["kind"] for r in read_metrics(run_dir / "metrics.jsonl")][-1] == "end"


@pytest.mark.slow
def test_ctrl_c_checkpoints_and_exits_130_then_resumes_bitwise(
    gpt2_shards: Path, reference_run: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    argv = cli(gpt2_shards, run_dir, "--runtime", "checkpoint.every=0")
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    wait_for_training(run_dir)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "Ctrl-C: writing a checkpoint at the end of this step" in err
    assert "Traceback" not in err
    saved = [p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("step_")]
    assert len(saved) == 1
    assert f"stopped by signal SIGINT; resume from {saved[0]}" in err
    assert run_state(run_dir) == ("stopped", f"stopped by signal SIGINT; resume from {saved[0]}")
    subprocess.run(argv, check=True, capture_output=True)
    assert_bitwise_equal(weights(run_dir), weights(reference_run))


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once(gpt2_shards: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    argv = cli(gpt2_shards, run_dir, "--runtime", "checkpoint.every=4")
    proc = at_phase("long preemption save", signal.SIGINT, argv)
    assert proc.stderr is not None
    wait_for_training(run_dir)
    proc.send_signal(signal.SIGINT)
    for line in proc.stderr:  # until the first Ctrl-C's save has begun
        if "saving" in line:
            break
    time.sleep(1.2)  # a second Ctrl-C, not the first one's copy
    proc.send_signal(signal.SIGINT)
    try:  # the save lasts an hour: an exit within minutes is the second Ctrl-C's, at once
        err = proc.communicate(timeout=600)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("a second Ctrl-C did not stop the run during its save")
    assert proc.returncode == 128 + signal.SIGINT, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("leviathan train: stopped at once by Ctrl-C; ")
    assert read_exit(run_dir)["outcome"] == "stopped"  # type: ignore[index]
    assert "Traceback" not in err
    checkpoints = run_dir / "checkpoints"  # nothing half-written left (maybe nothing at all)
    assert not checkpoints.exists() or not list(checkpoints.glob(".*"))
