"""Weights & Biases in its offline mode (no network): a run stopped by SIGTERM, or killed by
SIGKILL before W&B wrote what it was sent, and resumed is one W&B run (one id, stored in the run
directory) whose history holds each step once, with the values of the metrics log. The offline
files are read back record by record (below), a reader independent of the trainer's own
(`wandb_log.history_steps`), which is held to it on a W&B file cut at every length."""

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


def cli(shards: Path, run_dir: Path, every: int = 0) -> list[str]:
    """`leviathan train` of a STEPS-step micro run with W&B offline, a checkpoint every `every`
    steps (0: the final one only)."""
    argv = [sys.executable, "-m", "leviathan.cli", "train", "--scale", "micro", "--vocab", "gpt2"]
    argv += ["--variant", "leviathan", "--train", str(shards / "train.bin"), "--val"]
    argv += [str(shards / "val.bin"), "--run-dir", str(run_dir)]
    argv += ["--set", f"total_tokens={8 * 64 * STEPS}"]
    for value in (
        "progress=false",
        "validation.every=4",
        "validation.windows=4",
        f"checkpoint.every={every}",
    ):
        argv += ["--runtime", value]
    return argv + ["--runtime", "wandb.enabled=true", "--runtime", "wandb.mode=offline"]


ENV = {**os.environ, "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}


def start_and_stop(argv: list[str], metrics: Path, records: int, sig: int) -> None:
    """Start a training and send it `sig` once its log holds `records` train records."""
    proc = subprocess.Popen(argv, env=ENV, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and metrics.read_text().count('"kind": "train"') >= records:
            break
        time.sleep(0.02)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (128 + sig, -sig), err


def assert_each_step_once(run_dir: Path) -> list[Path]:
    """W&B's history of the run, over every attempt's file: each step once, with the metrics
    log's values; the attempts' files."""
    stored = json.loads((run_dir / "wandb.json").read_text())
    assert stored["last_step"] == STEPS
    files = sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert {f.name for f in files} == {f"run-{stored['id']}.wandb"}  # one W&B run
    rows = [row for f in files for row in history(f)]
    assert [step for step, _ in rows] == list(range(1, STEPS + 1))  # each step once
    metrics = run_dir / "metrics.jsonl"
    logged = {r["step"]: r for r in read_metrics(metrics, "train")}
    for step, items in rows:
        assert items["train/loss"] == logged[step]["loss"]
    vals = {r["step"]: r["val_loss"] for r in read_metrics(metrics, "val")}
    assert {s: i["val/val_loss"] for s, i in rows if "val/val_loss" in i} == vals
    return files


@pytest.mark.slow
def test_a_sigterm_resume_is_one_wandb_run_with_each_step_once(
    gpt2_shards: Path, tmp_path: Path
) -> None:
    pytest.importorskip("wandb", reason="the optional wandb package is not installed")
    run_dir = tmp_path / "run"
    start_and_stop(cli(gpt2_shards, run_dir), run_dir / "metrics.jsonl", 1, signal.SIGTERM)
    stopped = json.loads((run_dir / "wandb.json").read_text())
    subprocess.run(cli(gpt2_shards, run_dir), env=ENV, check=True)

    stored = json.loads((run_dir / "wandb.json").read_text())
    assert stored["id"] == stopped["id"]
    assert 0 < stopped["last_step"] < STEPS  # the preemption finished the W&B run
    files = assert_each_step_once(run_dir)
    assert len(files) == 2  # the first attempt and the resumed one
    config = next(
        r.config for r in wandb_records(files[0]) if r.WhichOneof("record_type") == "config"
    )
    keys = {item.key for item in config.update}
    assert {"train", "model", "runtime", "provenance"} <= keys


@pytest.mark.slow
def test_a_sigkill_loses_no_wandb_history(gpt2_shards: Path, tmp_path: Path) -> None:
    """Killed past its checkpoint of step 4, before W&B wrote all it was sent (or any): the
    stored last step never runs ahead of W&B's file, and the resumed run sends what W&B lacks,
    its own recomputed steps W&B has excepted."""
    pytest.importorskip("wandb", reason="the optional wandb package is not installed")
    run_dir = tmp_path / "run"
    start_and_stop(cli(gpt2_shards, run_dir, every=4), run_dir / "metrics.jsonl", 6, signal.SIGKILL)
    killed = json.loads((run_dir / "wandb.json").read_text())
    (first,) = sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert killed["last_step"] <= max((step for step, _ in history(first)), default=-1)
    subprocess.run(cli(gpt2_shards, run_dir, every=4), env=ENV, check=True)
    assert len(assert_each_step_once(run_dir)) == 2


@pytest.fixture(scope="module")
def wandb_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The transaction log of an offline W&B run (in a process of its own) that was sent
    steps 1..5 through the trainer's `WandbRun` and finished."""
    pytest.importorskip("wandb", reason="the optional wandb package is not installed")
    run_dir = tmp_path_factory.mktemp("wandb_run")
    code = (
        "import sys; from pathlib import Path\n"
        "from leviathan.train.config import WandbConfig\n"
        "from leviathan.train.wandb_log import WandbRun\n"
        "run = WandbRun(Path(sys.argv[1]), WandbConfig(enabled=True, mode='offline'), "
        "config={}, name='t')\n"
        "for s in range(1, 6): run.write({'kind': 'train', 'step': s, 'loss': 1 / s})\n"
        "run.close()\n"
    )
    subprocess.run([sys.executable, "-c", code, str(run_dir)], env=ENV, check=True)
    assert json.loads((run_dir / "wandb.json").read_text())["last_step"] == 5
    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    return path


def test_the_wandb_log_reader_reads_what_wandb_wrote_up_to_a_cut(
    wandb_file: Path, tmp_path: Path
) -> None:
    from leviathan.train.wandb_log import history_steps, persisted_step

    whole = [step for step, _ in history(wandb_file)]  # the independent reader
    assert whole == [1, 2, 3, 4, 5]
    assert list(history_steps(wandb_file)) == whole
    run_id = wandb_file.stem.removeprefix("run-")
    assert persisted_step(wandb_file.parents[2], run_id) == 5
    data = wandb_file.read_bytes()
    cut = tmp_path / wandb_file.name
    seen: list[int] = []
    for n in range(0, len(data) + 1, 7):  # a writer killed after any n bytes
        cut.write_bytes(data[:n])
        steps = list(history_steps(cut))
        assert steps == whole[: len(steps)]  # a prefix, never a partial record
        assert len(steps) >= len(seen)
        seen = steps
    last = data.rindex(b"train/loss")  # inside the last history record
    cut.write_bytes(data[:last] + bytes([data[last] ^ 1]) + data[last + 1 :])
    assert list(history_steps(cut)) == whole[:-1]  # its checksum fails: not read
