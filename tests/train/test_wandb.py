"""Weights & Biases in its offline mode (no network): a run stopped by SIGTERM and resumed is one
W&B run (one id, stored in the run directory) whose history holds each step once, with the
values of the metrics log. The offline files are read back record by record (below)."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from leviathan.train.metrics_log import read_metrics

STEPS = 8
BLOCK = 32768  # the .wandb file's block size (LevelDB's log format, which W&B writes)


def wandb_records(path: Path) -> list[Any]:
    """The protobuf records of an offline run's `.wandb` file: a 7-byte header (":W&B", magic,
    version), then LevelDB log blocks of 32 KiB whose chunks (crc32, length, type: 1 full, 2
    first, 3 middle, 4 last) carry serialized `wandb_internal_pb2.Record`s."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a .wandb file"
    pos, chunks, pending = 7, [], b""
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a chunk header: padding
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 1:
            chunks.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            chunks.append(pending + chunk)
    return [pb.Record.FromString(c) for c in chunks]


def history(path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for record in wandb_records(path):
        if record.WhichOneof("record_type") == "history":
            items = {
                i.key or "/".join(i.nested_key): json.loads(i.value_json)
                for i in record.history.item
            }
            rows.append((int(record.history.step.num), items))
    return rows


def cli(shards: Path, run_dir: Path) -> list[str]:
    argv = [sys.executable, "-m", "leviathan.cli", "train", "--scale", "micro", "--vocab", "gpt2"]
    argv += ["--variant", "leviathan", "--train", str(shards / "train.bin"), "--val"]
    argv += [str(shards / "val.bin"), "--run-dir", str(run_dir)]
    argv += ["--set", f"total_tokens={8 * 64 * STEPS}"]
    for value in (
        "progress=false",
        "validation.every=4",
        "validation.windows=4",
        "checkpoint.every=0",
    ):
        argv += ["--runtime", value]
    return argv + ["--runtime", "wandb.enabled=true", "--runtime", "wandb.mode=offline"]


@pytest.mark.slow
def test_a_sigterm_resume_is_one_wandb_run_with_each_step_once(
    gpt2_shards: Path, tmp_path: Path
) -> None:
    pytest.importorskip("wandb", reason="the optional wandb package is not installed")
    run_dir = tmp_path / "run"
    env = {**os.environ, "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}
    proc = subprocess.Popen(cli(gpt2_shards, run_dir), env=env, stderr=subprocess.PIPE, text=True)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and '"kind": "train"' in metrics.read_text():
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    stopped = json.loads((run_dir / "wandb.json").read_text())
    subprocess.run(cli(gpt2_shards, run_dir), env=env, check=True)

    stored = json.loads((run_dir / "wandb.json").read_text())
    assert stored["id"] == stopped["id"] and stored["last_step"] == STEPS
    assert 0 < stopped["last_step"] < STEPS
    files = sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2  # the first attempt and the resumed one ...
    assert {f.name for f in files} == {f"run-{stored['id']}.wandb"}  # ... of one W&B run
    rows = [row for f in files for row in history(f)]
    assert [step for step, _ in rows] == list(range(1, STEPS + 1))  # each step once
    logged = {r["step"]: r for r in read_metrics(metrics, "train")}
    for step, items in rows:
        assert items["train/loss"] == logged[step]["loss"]
    vals = {r["step"]: r["val_loss"] for r in read_metrics(metrics, "val")}
    assert {s: i["val/val_loss"] for s, i in rows if "val/val_loss" in i} == vals
    config = next(
        r.config for r in wandb_records(files[0]) if r.WhichOneof("record_type") == "config"
    )
    keys = {item.key for item in config.update}
    assert {"train", "model", "runtime", "provenance"} <= keys
