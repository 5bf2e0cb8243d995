"""`leviathan data batch` against the batches the trainer consumed: the metrics log's batch_sha256
(hashed by the trainer from the tensors it trains on, gathered over ranks) equals the command's
for 1, 2 and 4 ranks (gloo on CPU), for each rank's rows, and across a resume on another world
size."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from leviathan.cli import main
from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig, train_config
from leviathan.train.metrics_log import read_metrics
from leviathan.train.trainer import train

STEPS = 6
BATCH = 8
CONTEXT = 64  # the micro scale's


def _cli_train(shards: Path, run_dir: Path, micro_batch: int) -> list[str]:
    argv = ["-m", "leviathan.cli", "train", "--scale", "micro", "--vocab", "gpt2"]
    argv += ["--variant", "leviathan", "--train", str(shards / "train.bin")]
    argv += ["--run-dir", str(run_dir), "--set", f"total_tokens={BATCH * CONTEXT * STEPS}"]
    argv += ["--set", f"global_batch={BATCH}", "--set", f"micro_batch={micro_batch}"]
    for value in ("progress=false", "validation.every=0", "checkpoint.every=0", "threads=1"):
        argv += ["--runtime", value]
    return argv


def _ranks(n: int, shards: Path, run_dir: Path) -> subprocess.Popen[str]:
    launcher = [sys.executable, "-m", "leviathan.torchrun", "--standalone"]
    launcher += ["--nproc-per-node", str(n)]  # --standalone: on a port the system picks
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    argv = launcher + _cli_train(shards, run_dir, BATCH // n)
    return subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)


def fingerprints(run_dir: Path) -> list[tuple[int, str]]:
    return [
        (r["step"], r["batch_sha256"]) for r in read_metrics(run_dir / "metrics.jsonl", "train")
    ]


def batch(capsys: pytest.CaptureFixture[str], shards: Path, step: int, *extra: str) -> Any:
    argv = ["data", "batch", "--train", str(shards / "train.bin"), "--context", str(CONTEXT)]
    argv += ["--global-batch", str(BATCH), "--step", str(step), "--json", *extra]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def one_rank(gpt2_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("one") / "run"
    cfg = train_config(
        "micro", "gpt2", "leviathan", total_tokens=BATCH * CONTEXT * STEPS, global_batch=BATCH
    )
    train(
        cfg,
        train_bins=[gpt2_shards / "train.bin"],
        val_bin=None,
        run_dir=run_dir,
        runtime=RuntimeConfig(
            progress=False,
            validation=ValidationConfig(every=0),
            checkpoint=CheckpointConfig(every=0),
        ),
    )
    return run_dir


@pytest.fixture(scope="module")
def two_then_four(gpt2_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 ranks, stopped by SIGTERM after a step; resumed on 4 ranks to the end."""
    run_dir = tmp_path_factory.mktemp("two") / "run"
    proc = _ranks(2, gpt2_shards, run_dir)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and '"kind": "train"' in metrics.read_text():
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err
    resumed = _ranks(4, gpt2_shards, run_dir)
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    return run_dir


@pytest.mark.slow
def test_the_command_shows_the_batches_one_rank_trained_on(
    one_rank: Path, gpt2_shards: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logged = fingerprints(one_rank)
    assert [s for s, _ in logged] == list(range(1, STEPS + 1))
    assert len({f for _, f in logged}) == STEPS  # every step a batch of its own
    for step, fingerprint in logged:
        shown = batch(capsys, gpt2_shards, step)
        assert shown["batch_sha256"] == fingerprint
        assert [r["row"] for r in shown["rows"]] == list(range(BATCH))
    # another seed orders the windows otherwise: not the trainer's batch
    assert batch(capsys, gpt2_shards, 1, "--seed", "1")["batch_sha256"] != logged[0][1]


@pytest.mark.slow
def test_each_ranks_rows_across_a_resume_on_another_world_size(
    two_then_four: Path, one_rank: Path, gpt2_shards: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    starts = read_metrics(two_then_four / "metrics.jsonl", "start")
    assert [s["world_size"] for s in starts] == [2, 4]
    stopped_at = starts[-1]["step"]
    assert 0 < stopped_at < STEPS
    logged = fingerprints(two_then_four)
    assert [s for s, _ in logged] == list(range(1, STEPS + 1))  # each step once
    assert logged == fingerprints(one_rank)  # the same batches, whatever the ranks
    for step, fingerprint in logged:
        world = 2 if step <= stopped_at else 4
        digests = b""
        for rank in range(world):
            rows = batch(capsys, gpt2_shards, step, "--rank", str(rank), "--world-size", str(world))
            assert [r["row"] for r in rows["rows"]] == list(
                range(rank * BATCH // world, (rank + 1) * BATCH // world)
            )
            digests += b"".join(bytes.fromhex(r["sha256"]) for r in rows["rows"])
        # the ranks' rows, in rank order, are the rows the trainer's ranks hashed
        assert hashlib.sha256(digests).hexdigest() == fingerprint


def test_the_command_reads_the_windows_from_the_shard(
    gpt2_shards: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import numpy as np

    from leviathan.data.loader import TrainLoader

    shown = batch(capsys, gpt2_shards, 3, "--decode")
    loader = TrainLoader(gpt2_shards / "train.bin", context=CONTEXT, global_batch=BATCH)
    x, y = loader.batch(2)  # the loader's position 2: optimizer step 3
    tokens = np.fromfile(gpt2_shards / "train.bin", dtype=np.uint16)
    for row, (xr, yr) in zip(shown["rows"], zip(x, y, strict=True), strict=True):
        window = tokens[row["offset"] : row["offset"] + CONTEXT + 1].astype("<i8")
        assert row["sha256"] == hashlib.sha256(window.tobytes()).hexdigest()
        assert window[:-1].tolist() == xr.tolist() and window[1:].tolist() == yr.tolist()
        assert row["offset"] == row["window"] * CONTEXT  # one shard: offsets are window x T
        assert isinstance(row["text"], str) and row["text"]
