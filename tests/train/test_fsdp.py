"""FSDP2 (`runtime.parallel: fsdp`) and its distributed checkpoints on CPU gloo ranks (torchrun):
the same losses as DDP and as one process, a kill mid-save leaves the previous checkpoint
loadable, a run stopped on 4 ranks resumes on 2, one stopped on 2 resumes on one process and
one stopped on one process resumes on 2, and the export of an FSDP run equals the DDP run's. Tolerance: rel 1e-4 on the losses (as DDP against one process: the gradients are summed
in another order, fp32); on the weights after a few AdamW steps 1e-5, and 1e-4 on the output
head, whose rows of tokens absent from the batches get gradients at the roundoff level, which
AdamW's division by their root mean square turns into steps of that order (observed: 5.5e-5,
against a learning rate of 3e-3)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from leviathan.checkpoint.integrity import verify_checkpoint
from leviathan.train.metrics_log import read_metrics

STEPS = 6
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
pytestmark = pytest.mark.slow


def args(shards: Path, run_dir: Path, scale: str = "micro", *extra: str) -> list[str]:
    steps = {"micro": ["--set", f"total_tokens={8 * 64 * STEPS}", "--set", "global_batch=8"]}
    steps["tiny"] = ["--set", f"total_tokens={8 * 256 * 2}", "--set", "global_batch=8"]
    return [
        "-m",
        "leviathan.cli",
        "train",
        "--scale",
        scale,
        "--vocab",
        "gpt2",
        "--variant",
        "leviathan",
        "--train",
        str(shards / "train.bin"),
        "--val",
        str(shards / "val.bin"),
        "--run-dir",
        str(run_dir),
        *steps[scale],
        *[
            "--runtime",
            "progress=false",
            "--runtime",
            "validation.windows=2",
            "--runtime",
            "threads=1",
        ],
        *extra,
    ]


def launch(ranks: int, argv: list[str], *, parallel: str = "fsdp") -> list[str]:
    """The command of a run on `ranks` gloo ranks (one process for 1)."""
    micro = ["--set", f"micro_batch={8 // ranks}", "--runtime", f"parallel={parallel}"]
    if ranks == 1:
        return [sys.executable, *argv, *micro]
    # --standalone: a rendezvous on a port the system picks, free of other launches' ports
    torchrun = [sys.executable, "-m", "leviathan.torchrun", "--standalone"]
    return [*torchrun, "--nproc-per-node", str(ranks), *argv, *micro]


def losses(run_dir: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(run_dir / "metrics.jsonl", "train")]


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / "final" / "model.safetensors")


@pytest.fixture(scope="module")
def runs(gpt2_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The micro scale, STEPS steps of 8 sequences, checkpoints every 3: one process, DDP on 2
    ranks, FSDP on 2 and on 4 ranks."""
    root = tmp_path_factory.mktemp("fsdp")
    every = ["--runtime", "checkpoint.every=3", "--runtime", "validation.every=3"]
    out = {}
    for name, ranks, parallel in (("one", 1, "ddp"), ("ddp2", 2, "ddp"), ("fsdp2", 2, "fsdp")):
        out[name] = root / name
        cmd = launch(ranks, args(gpt2_shards, out[name], "micro", *every), parallel=parallel)
        subprocess.run(cmd, check=True, env=ENV, timeout=600)
    out["fsdp4"] = root / "fsdp4"
    cmd = launch(4, args(gpt2_shards, out["fsdp4"], "micro", *every))
    subprocess.run(cmd, check=True, env=ENV, timeout=600)
    return out


def test_fsdp_on_2_and_4_ranks_follows_ddp_and_one_process(runs: dict[str, Path]) -> None:
    one = losses(runs["one"])
    assert len(one) == STEPS
    for name in ("ddp2", "fsdp2", "fsdp4"):
        assert losses(runs[name]) == pytest.approx(one, rel=1e-4), name
    # (DDP on 2 ranks x micro-batch 4 follows one process x micro-batch 8: this is the DDP test)
    for name, ranks in (("ddp2", 2), ("fsdp4", 4)):
        start = read_metrics(runs[name] / "metrics.jsonl", "start")[0]
        assert start["world_size"] == ranks, name
    # the weights: whole, the same names and shapes as DDP's, within the tolerance
    ddp, fsdp = final_weights(runs["ddp2"]), final_weights(runs["fsdp4"])
    assert ddp.keys() == fsdp.keys()
    for k in ddp:
        assert ddp[k].dtype == fsdp[k].dtype and ddp[k].shape == fsdp[k].shape, k
        atol = 1e-4 if k == "io.head.weight" else 1e-5
        torch.testing.assert_close(fsdp[k], ddp[k], rtol=1e-4, atol=atol, msg=k)
    # a distributed checkpoint: the optimizer's shards, one file per rank, all hashed
    final = runs["fsdp4"] / "checkpoints" / "final"
    shards = sorted(p.name for p in (final / "optim").glob("*.distcp"))
    assert len(shards) == 4
    verified = verify_checkpoint(final)
    assert {f"optim/{s}" for s in shards} <= set(verified.files)


def test_tiny_scale_fsdp_on_2_ranks_follows_one_process(gpt2_shards: Path, tmp_path: Path) -> None:
    for name, ranks in (("one", 1), ("fsdp2", 2)):
        cmd = launch(
            ranks, args(gpt2_shards, tmp_path / name, "tiny", "--runtime", "validation.every=0")
        )
        subprocess.run(cmd, check=True, env=ENV, timeout=600)
    assert len(losses(tmp_path / "one")) == 2
    assert losses(tmp_path / "fsdp2") == pytest.approx(losses(tmp_path / "one"), rel=1e-4)


# the run's first step ends only once its rank has the signal: a fast run cannot finish before
# the test's SIGTERM reaches it (the stop is at step 1, whatever the machine's load)
HELD = """
import sys, time
from leviathan.train.preemption import PreemptionWatch
asked = PreemptionWatch.requested
def held(self):
    while not self.signum:
        time.sleep(0.01)
    return asked(self)
PreemptionWatch.requested = held
from leviathan.cli import main
sys.exit(main(sys.argv[1:]))
"""


def stopped_by_sigterm(cmd: list[str], run_dir: Path) -> tuple[Path, int, str]:
    """Runs `cmd` and sends SIGTERM to it (to the launcher under torchrun) once the run has
    logged a training step: it exits 128 + SIGTERM with one step checkpoint. That checkpoint,
    its step and the run's stderr."""
    proc = subprocess.Popen(cmd, env=ENV, stderr=subprocess.PIPE, text=True)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 600  # a bound on a hung run, not a timing assert
    while proc.poll() is None and (
        not metrics.exists() or '"kind": "train"' not in metrics.read_text()
    ):
        assert time.monotonic() < deadline, "the run never logged a training step"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=300)[1]
    assert proc.returncode == 128 + signal.SIGTERM, err
    saved = [p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("step_")]
    assert len(saved) == 1, err
    stopped_at = int(saved[0].name.split("_")[1])
    assert 0 < stopped_at < STEPS
    return saved[0], stopped_at, err


@pytest.mark.parametrize(
    ("stop_on", "stop_parallel", "resume_on"), [(4, "fsdp", 2), (2, "fsdp", 1), (1, "ddp", 2)]
)
def test_a_run_stopped_by_sigterm_resumes_on_another_world_size_as_the_same_run(
    gpt2_shards: Path,
    runs: dict[str, Path],
    tmp_path: Path,
    stop_on: int,
    stop_parallel: str,
    resume_on: int,
) -> None:
    """SIGTERM to a run on `stop_on` ranks: every rank stops at one step with a checkpoint (a
    distributed one, one optimizer shard per rank, under FSDP on several ranks; the whole
    optimizer state in optim.pt on one process). The run resumes with runtime.parallel=fsdp on
    `resume_on` ranks (4 -> 2: the optimizer state resharded; 2 -> 1: its shards read whole;
    1 -> 2: each rank keeping its part) with the same batches: its losses are the uninterrupted
    run's."""
    run_dir, script = tmp_path / "run", tmp_path / "held.py"
    script.write_text(textwrap.dedent(HELD))
    every = ["--runtime", "checkpoint.every=0", "--runtime", "validation.every=0"]
    argv = args(gpt2_shards, run_dir, "micro", *every)
    held = [str(script), *argv[2:]]  # the script in place of `-m leviathan.cli`
    saved, stopped_at, err = stopped_by_sigterm(
        launch(stop_on, held, parallel=stop_parallel), run_dir
    )
    assert stopped_at == 1, err
    if stop_on > 1:
        assert len(list((saved / "optim").glob("*.distcp"))) == stop_on, err
    else:
        assert (saved / "optim.pt").is_file(), err

    resumed = subprocess.run(
        launch(resume_on, argv), env=ENV, timeout=600, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    start = read_metrics(run_dir / "metrics.jsonl", "start")[-1]
    assert (start["step"], start["world_size"]) == (stopped_at, resume_on)
    assert losses(run_dir) == pytest.approx(losses(runs["one"]), rel=1e-4)


# rank `RANK` kills itself with SIGKILL during its second checkpoint write: rank 0 once every
# shard is written, just before the rename; rank 1 inside its own shard's write
KILLER = """
import os, signal, sys
import leviathan.checkpoint.store as m
from torch.distributed.checkpoint import FileSystemWriter
rank, victim = int(os.environ["RANK"]), int(os.environ["VICTIM"])
calls = {"n": 0}
def kill_on_second(original):
    def wrapped(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2 and rank == victim:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*a, **k)
    return wrapped
if victim == 0:
    m.publish_dir = kill_on_second(m.publish_dir)
else:
    FileSystemWriter.write_data = kill_on_second(FileSystemWriter.write_data)
from leviathan.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("victim", [0, 1])
def test_sigkill_during_a_distributed_save_leaves_the_previous_checkpoint(
    gpt2_shards: Path, tmp_path: Path, victim: int
) -> None:
    script = tmp_path / "killer.py"
    script.write_text(textwrap.dedent(KILLER))
    run_dir = tmp_path / "run"
    every = ["--runtime", "checkpoint.every=2", "--runtime", "validation.every=0"]
    argv = args(gpt2_shards, run_dir, "micro", *every)[3:]  # after `-m leviathan.cli train`
    cmd = launch(2, [str(script), "train", *argv])
    proc = subprocess.run(cmd, env={**ENV, "VICTIM": str(victim)}, capture_output=True, text=True)
    assert proc.returncode != 0
    ckpts = run_dir / "checkpoints"
    assert [p.name for p in ckpts.iterdir() if not p.name.startswith(".")] == ["step_00000002"]
    verify_checkpoint(ckpts / "step_00000002")  # whole: every file as its manifest records
    assert any(p.name.endswith(".tmp") for p in ckpts.iterdir())  # the torn write, unpublished

    subprocess.run(launch(2, args(gpt2_shards, run_dir, "micro", *every)), check=True, env=ENV)
    start = read_metrics(run_dir / "metrics.jsonl", "start")[-1]
    assert start["step"] == 2
    assert not any(p.name.endswith(".tmp") for p in ckpts.iterdir())
    assert (ckpts / "final").is_dir()


def test_an_fsdp_runs_export_equals_the_ddp_runs(runs: dict[str, Path], tmp_path: Path) -> None:
    """`leviathan export` of the FSDP run's final checkpoint and of the DDP run's: the same
    files, config and tensor names, the tensors within the tolerance."""
    pytest.importorskip("transformers")
    out = {}
    for name in ("ddp2", "fsdp2"):
        out[name] = tmp_path / name
        cmd = [sys.executable, "-m", "leviathan.cli", "export", str(runs[name]), str(out[name])]
        subprocess.run(cmd, check=True, env=ENV)
    files = sorted(p.name for p in out["ddp2"].iterdir())
    assert files == sorted(p.name for p in out["fsdp2"].iterdir())
    assert (out["ddp2"] / "config.json").read_text() == (out["fsdp2"] / "config.json").read_text()
    a, b = (load_file(out[n] / "model.safetensors") for n in ("ddp2", "fsdp2"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-4, msg=k)  # the head's
