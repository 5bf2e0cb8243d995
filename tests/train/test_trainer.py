"""End-to-end trainer tests on the micro preset with real token shards of the embedded corpus."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from leviathan.data.loader import DataMismatchError
from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig, train_config
from leviathan.train.errors import ConfigMismatch, NonFiniteLoss
from leviathan.train.metrics_log import read_metrics
from leviathan.train.trainer import train

STEPS = 12
QUIET = RuntimeConfig(
    progress=False,
    validation=ValidationConfig(every=4, windows=4),
    checkpoint=CheckpointConfig(every=4, keep_last=2),
)


def cfg(**changes):
    return train_config("micro", "gpt2", "leviathan", total_tokens=8 * 64 * STEPS, **changes)


def run_train(shards: Path, run_dir: Path, **changes):
    return train(
        cfg(**changes),
        train_bins=[shards / "train.bin"],
        val_bin=shards / "val.bin",
        run_dir=run_dir,
        runtime=QUIET,
    )


def cli(shards: Path, run_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "leviathan.cli",
        "train",
        "--scale",
        "micro",
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
        "--set",
        f"total_tokens={8 * 64 * STEPS}",
        "--runtime",
        "progress=false",
        "--runtime",
        "validation.windows=4",
        "--runtime",
        "validation.every=4",
        *extra,
    ]


def wait_for_training(run_dir: Path, timeout: float = 120) -> None:
    """Until the run's metrics log holds a training step's record (or `timeout` seconds)."""
    metrics = run_dir / "metrics.jsonl"
    deadline = time.time() + timeout
    while (
        not metrics.exists() or '"kind": "train"' not in metrics.read_text()
    ) and time.time() < deadline:
        time.sleep(0.05)


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / "final" / "model.safetensors")


def assert_bitwise_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.slow
def test_loss_decreases_and_artifacts_are_complete(reference_run: Path) -> None:
    train_rows = read_metrics(reference_run / "metrics.jsonl", "train")
    val_rows = read_metrics(reference_run / "metrics.jsonl", "val")
    assert [r["step"] for r in train_rows] == list(range(1, STEPS + 1))
    assert [r["step"] for r in val_rows] == [4, 8, STEPS]  # val_every=4, and once at the end
    assert train_rows[-1]["loss"] < train_rows[0]["loss"] - 1.0
    assert val_rows[-1]["val_loss"] < val_rows[0]["val_loss"]
    assert train_rows[0]["mfu"] == "unknown"  # CPU: no peak, no guess
    # what the report's throughput table reads: no CUDA memory on a CPU, no compile here
    assert train_rows[0]["peak_memory"] is None and train_rows[-1]["compile_s"] == 0.0
    (start,) = read_metrics(reference_run / "metrics.jsonl", "start")
    assert (start["device"], start["world_size"], start["compile"]) == ("cpu", 1, False)
    final = reference_run / "checkpoints" / "final"
    assert {p.name for p in final.iterdir()} == {
        "model.safetensors",
        "model.safetensors.json",
        "optim.pt",
        "rng.pt",
        "state.json",
    }
    for name in ("step_00000004", "step_00000008"):  # every visible checkpoint has its manifest
        assert (reference_run / "checkpoints" / name / "model.safetensors.json").is_file()
    steps = sorted(p.name for p in (reference_run / "checkpoints").iterdir())
    assert steps == ["final", "step_00000004", "step_00000008"]  # keep_last=2 (12 is final)
    assert not (reference_run / ".lock").exists()  # the run directory's lock went with its process


@pytest.mark.slow
def test_dvclive_live_view_holds_the_runs_curves(reference_run: Path) -> None:
    """runtime dvclive=true: every scalar of metrics.jsonl, per step, in DVCLive's own files
    (what `dvc plots show` and the VS Code extension read while training runs); nothing else
    of the project is touched (no dvc.yaml written, no experiment)."""
    import csv
    import json

    live = reference_run / "dvclive"
    train_rows = read_metrics(reference_run / "metrics.jsonl", "train")
    val_rows = read_metrics(reference_run / "metrics.jsonl", "val")
    with open(live / "plots" / "metrics" / "train" / "loss.tsv") as fh:
        loss = list(csv.DictReader(fh, delimiter="\t"))
    assert [int(r["step"]) for r in loss] == [r["step"] for r in train_rows]
    assert [float(r["loss"]) for r in loss] == pytest.approx([r["loss"] for r in train_rows])
    with open(live / "plots" / "metrics" / "val" / "val_loss.tsv") as fh:
        val = list(csv.DictReader(fh, delimiter="\t"))
    assert [float(r["val_loss"]) for r in val] == pytest.approx([r["val_loss"] for r in val_rows])
    summary = json.loads((live / "metrics.json").read_text())
    assert summary["end"]["val_loss"] == pytest.approx(val_rows[-1]["val_loss"])
    assert not (live / "dvc.yaml").exists()
    assert not (reference_run / "dvc.yaml").exists()


def test_checkpoint_manifest_chains_to_the_token_shards(
    gpt2_shards: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datetime as dt
    import json

    from leviathan.eval.checkpoint import read_checkpoint
    from leviathan.io import sha256_file
    from leviathan.manifest import read_manifest
    from leviathan.provenance import config_sha256

    monkeypatch.chdir(tmp_path)  # paths in manifests are relative to the working directory
    monkeypatch.setenv("SLURM_JOB_ID", "777")
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    c = train_config("micro", "gpt2", "leviathan", total_tokens=8 * 64 * 2)
    result = train(
        c,
        train_bins=[gpt2_shards / "train.bin"],
        val_bin=gpt2_shards / "val.bin",
        run_dir="run",
        runtime=RuntimeConfig(
            progress=False,
            validation=ValidationConfig(every=0, windows=2),
            checkpoint=CheckpointConfig(every=1, keep_last=5),
        ),
    )
    final = Path("run") / "checkpoints" / "final"
    assert result.final_checkpoint == final
    m = read_manifest(final / "model.safetensors", artifact_type="checkpoint")
    assert m["artifact"]["sha256"] == sha256_file(final / "model.safetensors")
    assert m["artifact"]["path"] == "run/checkpoints/final/model.safetensors"  # not the temp dir
    assert m["checkpoint_dir"] == "run/checkpoints/final"
    shards = {r: read_manifest(gpt2_shards / f"{r}.bin") for r in ("train", "val")}
    # each with the check that was made (the default verify_shards: size and the sampled
    # fingerprint; the validation shard: its manifest's hash, the file not read)
    checks = {"train": "size + sampled fingerprint", "val": "none"}
    assert [{k: v for k, v in rec.items() if k != "check"} for rec in m["inputs"]] == [
        {
            "role": f"{r}_tokens",
            "path": str(gpt2_shards / f"{r}.bin"),
            "sha256": shards[r]["artifact"]["sha256"],
        }
        for r in ("train", "val")
    ]
    for rec, r in zip(m["inputs"], ("train", "val"), strict=True):
        assert rec["check"].startswith(checks[r])
    assert shards["train"]["artifact"]["sha256"] == sha256_file(gpt2_shards / "train.bin")
    state = json.loads((final / "state.json").read_text())
    assert m["config"] == state["train_config"] == c.to_dict()
    assert m["config_sha256"] == config_sha256(c.to_dict())  # the whole config as run
    # the run's identity: the config but micro_batch (a memory knob, recorded, not hashed)
    identity = {k: v for k, v in c.to_dict().items() if k != "micro_batch"}
    assert config_sha256(identity) == state["train_fingerprint"] == m["train_fingerprint"]
    assert m["files"]["state.json"] == sha256_file(final / "state.json")
    assert (m["step"], m["tokens"], m["model_config"]) == (
        2,
        state["tokens"],
        state["model_config"],
    )
    assert m["env"]["slurm_job_id"] == "777"
    assert m["env"]["device"] == "cpu"
    assert m["env"]["packages"]["torch"]
    started, finished = (dt.datetime.fromisoformat(m[k]) for k in ("started_utc", "finished_utc"))
    assert before <= started <= finished
    # step checkpoints carry one too, and all of the run share its start
    step1 = read_manifest(
        Path("run") / "checkpoints" / "step_00000001" / "model.safetensors",
        artifact_type="checkpoint",
    )
    assert step1["step"] == 1
    assert step1["started_utc"] == m["started_utc"]
    assert step1["artifact"]["path"] == "run/checkpoints/step_00000001/model.safetensors"
    assert not list((Path("run") / "checkpoints").glob(".*"))  # no temp dirs left
    # evaluation records the manifest of the checkpoint it read
    rec = read_checkpoint("run").record()
    assert rec["manifest"] == "run/checkpoints/final/model.safetensors.json"
    assert rec["manifest_sha256"] == sha256_file(final / "model.safetensors.json")


@pytest.mark.slow
def test_sigkill_then_restart_is_bitwise_identical(
    gpt2_shards: Path, reference_run: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(cli(gpt2_shards, run_dir, "--runtime", "checkpoint.every=4"))
    target = run_dir / "checkpoints" / "step_00000004" / "state.json"
    deadline = time.time() + 120
    while not target.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (run_dir / "checkpoints" / "final").exists()
    subprocess.run(cli(gpt2_shards, run_dir, "--runtime", "checkpoint.every=4"), check=True)
    starts = read_metrics(run_dir / "metrics.jsonl", "start")
    assert starts[-1]["step"] >= 4
    assert starts[-1]["resumed_from"]
    assert_bitwise_equal(weights(run_dir), weights(reference_run))


@pytest.mark.slow
def test_sigterm_checkpoints_and_exits_nonzero_then_resumes(
    gpt2_shards: Path, reference_run: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        cli(gpt2_shards, run_dir, "--runtime", "checkpoint.every=0"),
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = run_dir / "metrics.jsonl"
    wait_for_training(run_dir)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)  # a hang guard; stopping early is shown by no final
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM" in err
    assert "resume from" in err
    saved = [p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("step_")]
    assert len(saved) == 1
    assert not (run_dir / "checkpoints" / "final").exists()
    stopped_at = int(saved[0].split("_")[1])
    subprocess.run(cli(gpt2_shards, run_dir, "--runtime", "checkpoint.every=0"), check=True)
    assert read_metrics(metrics, "start")[-1]["step"] == stopped_at
    assert_bitwise_equal(weights(run_dir), weights(reference_run))


@pytest.mark.slow
def test_resume_with_other_config_or_data_is_refused(
    gpt2_shards: Path, reference_run: Path, tmp_path: Path, make_other_shard
) -> None:
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(reference_run, run_dir)
    shutil.rmtree(run_dir / "checkpoints" / "final")
    with pytest.raises(ConfigMismatch, match=r"lr: checkpoint 0.003 != now 0.001"):
        run_train(gpt2_shards, run_dir, lr=1e-3)
    with pytest.raises(DataMismatchError, match="refusing to resume"):
        train(cfg(), train_bins=[make_other_shard], val_bin=None, run_dir=run_dir, runtime=QUIET)
    # the workflow's choice: set the old checkpoints aside (kept) and start afresh
    from dataclasses import replace

    fresh = train(
        cfg(lr=1e-3),
        train_bins=[gpt2_shards / "train.bin"],
        val_bin=None,
        run_dir=run_dir,
        runtime=replace(QUIET, restart_on_mismatch=True),
    )
    assert fresh.start_step == 0
    assert (run_dir / "checkpoints.stale-1" / "step_00000008" / "state.json").is_file()
    start = read_metrics(run_dir / "metrics.jsonl", "start")[-1]
    assert "lr: checkpoint 0.003 != now 0.001" in start["set_aside"]["because"]
    # the run directory holds the metrics of the new run only; the old run's went aside with
    # its checkpoints (a mixed log would put the old run's later points on the new curve)
    assert len(read_metrics(run_dir / "metrics.jsonl", "start")) == 1
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl", "train")] == list(
        range(1, STEPS + 1)
    )
    old = read_metrics(run_dir / "checkpoints.stale-1" / "metrics.jsonl")
    assert old == read_metrics(reference_run / "metrics.jsonl")


@pytest.mark.slow
def test_shortened_cell_restarts_with_its_own_curve(
    gpt2_shards: Path, reference_run: Path, tmp_path: Path
) -> None:
    """A finished cell whose total_tokens is shortened: the workflow restarts it afresh."""
    import shutil
    from dataclasses import replace

    from leviathan.eval.sample_efficiency import read_curve

    run_dir = tmp_path / "run"
    shutil.copytree(reference_run, run_dir)
    short = train(
        train_config("micro", "gpt2", "leviathan", total_tokens=8 * 64 * 6),
        train_bins=[gpt2_shards / "train.bin"],
        val_bin=gpt2_shards / "val.bin",
        run_dir=run_dir,
        runtime=replace(QUIET, restart_on_mismatch=True),
    )
    assert short.start_step == 0
    assert max(read_curve(run_dir).tokens) == 6 * 8 * 64  # no point of the old 12-step run


def test_rewind_metrics_keeps_the_records_up_to_the_checkpoint(tmp_path: Path) -> None:
    from leviathan.train.metrics_log import MetricsLog, rewind_metrics

    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    for rec in (
        {"kind": "start", "step": 0},
        *({"kind": "train", "step": s} for s in range(1, 10)),
        {"kind": "val", "step": 8},
        {"kind": "val", "step": 9},
    ):
        log.write(rec)
    log.close()
    assert rewind_metrics(path, 8, tmp_path / "aside.jsonl") == 2  # a run that died after step 9
    assert [(r["kind"], r["step"]) for r in read_metrics(path)][-2:] == [("train", 8), ("val", 8)]
    assert [r["step"] for r in read_metrics(tmp_path / "aside.jsonl")] == [9, 9]
    assert rewind_metrics(path, 0, tmp_path / "fresh.jsonl") == 10  # a fresh start keeps nothing
    assert read_metrics(path) == []
    assert len(read_metrics(tmp_path / "fresh.jsonl")) == 10
    assert rewind_metrics(tmp_path / "missing.jsonl", 3, tmp_path / "x.jsonl") == 0


@pytest.mark.slow
def test_resume_refuses_a_shard_edited_in_place(
    gpt2_shards: Path, reference_run: Path, tmp_path: Path
) -> None:
    """Same size, same manifest, other bytes: caught at the run's start by the sampled
    fingerprint (which covers the whole of a shard this small)."""
    import shutil

    from leviathan.data.shards import ShardError

    shards, run_dir = tmp_path / "tokens", tmp_path / "run"
    shutil.copytree(gpt2_shards, shards)
    shutil.copytree(reference_run, run_dir)
    shutil.rmtree(run_dir / "checkpoints" / "final")
    with open(shards / "train.bin", "r+b") as fh:
        fh.seek(1000)
        fh.write(bytes(reversed(fh.read(64))))
    with pytest.raises(ShardError, match="changed after tokenization"):
        run_train(shards, run_dir)


@pytest.fixture
def make_other_shard(gpt2_shards: Path, tmp_path: Path, make_shard) -> Path:
    import numpy as np

    tokens = np.fromfile(gpt2_shards / "train.bin", dtype=np.uint16)[::-1].copy()
    return make_shard(tmp_path / "other" / "train.bin", tokens)


@pytest.mark.slow
def test_non_finite_loss_stops_and_names_the_last_good_checkpoint(
    reference_run: Path, tmp_path: Path, gpt2_shards: Path
) -> None:
    import json
    import shutil

    from safetensors.torch import save_file

    from leviathan.io import sha256_file

    run_dir = tmp_path / "run"
    shutil.copytree(reference_run, run_dir)
    for name in ("final", "step_00000008"):
        shutil.rmtree(run_dir / "checkpoints" / name)
    # weights that went bad before they were saved: one NaN in the output head, and the
    # manifest records them so (the hashes match: verification passes)
    ckpt4 = run_dir / "checkpoints" / "step_00000004"
    state = load_file(ckpt4 / "model.safetensors")
    state["io.head.weight"][0, 0] = float("nan")
    save_file(state, ckpt4 / "model.safetensors")
    manifest = json.loads((ckpt4 / "model.safetensors.json").read_text())
    manifest["artifact"]["sha256"] = sha256_file(ckpt4 / "model.safetensors")
    (ckpt4 / "model.safetensors.json").write_text(json.dumps(manifest))
    before = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    with pytest.raises(
        NonFiniteLoss,
        match=r"non-finite training loss nan at step 4 .*first step after resuming from "
        r".*step_00000004: that checkpoint may be damaged",
    ):
        run_train(gpt2_shards, run_dir)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == before  # nothing written


@pytest.mark.slow
def test_a_damaged_checkpoint_is_set_aside_and_the_run_resumes_bitwise_from_the_older(
    reference_run: Path, tmp_path: Path, gpt2_shards: Path
) -> None:
    """One byte flipped in the newest checkpoint's optim.pt (torch checks no CRC): the run
    resumes from the one before, to the reference's final weights bit for bit, and the final
    manifest records the verified checkpoint it resumed from."""
    import json
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(reference_run, run_dir)
    shutil.rmtree(run_dir / "checkpoints" / "final")
    optim = run_dir / "checkpoints" / "step_00000008" / "optim.pt"
    data = bytearray(optim.read_bytes())
    data[len(data) // 2] ^= 0x40
    optim.write_bytes(bytes(data))
    result = run_train(gpt2_shards, run_dir)
    assert result.start_step == 4
    assert_bitwise_equal(weights(run_dir), weights(reference_run))
    assert (run_dir / "checkpoints" / "step_00000008.damaged-1" / "optim.pt").is_file()
    start = read_metrics(run_dir / "metrics.jsonl", "start")[-1]
    assert start["damaged"][0]["file"] == "optim.pt"
    final = json.loads((run_dir / "checkpoints" / "final" / "model.safetensors.json").read_text())
    assert final["resumed_from"]["step"] == 4
    assert final["resumed_from"]["path"].endswith("step_00000004")
    assert final["resumed_from"]["verified"] == [
        "model.safetensors",
        "optim.pt",
        "rng.pt",
        "state.json",
    ]
    # the audit follows the chain through the resume, to the checkpoint resumed from
    from leviathan.report.chain import ChainWalker

    audit = ChainWalker()
    audit.audit_artifact(run_dir / "checkpoints" / "final")
    assert audit.failures == []
    resumed = [f for f in audit.findings if f.what.startswith("resumed from")]
    assert [f.status.name for f in resumed] == ["OK"]


def test_a_model_smaller_than_its_vocabulary_is_refused(
    tmp_path: Path, make_shard: Callable[..., Path]
) -> None:
    """GPT-2's BPE has 50,257 ids (tiktoken's r50k_base): a model of 1,000 rows cannot embed
    them, even where the shard happens to hold only small ids."""
    shard = make_shard(tmp_path / "train.bin", np.arange(8 * 65) % 1000)
    with pytest.raises(
        ValueError,
        match=r"vocab_size=1000 < gpt2's n_vocab=50257: leave train.vocab_size unset or raise it",
    ):
        train(
            cfg(vocab_size=1000),
            train_bins=[shard],
            val_bin=None,
            run_dir=tmp_path / "run",
            runtime=QUIET,
        )
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.slow
def test_vocabulary_mismatch_is_refused(gpt2_shards: Path, tmp_path: Path) -> None:
    bad = train_config("micro", "cl100k_base", "tied", total_tokens=8 * 64)
    with pytest.raises(ValueError, match=r"train.bin: was tokenized with gpt2, not cl100k_base"):
        train(
            bad,
            train_bins=[gpt2_shards / "train.bin"],
            val_bin=None,
            run_dir=tmp_path,
            runtime=QUIET,
        )


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening_pid(port: int, pids: list[int]) -> int | None:
    """Which of `pids` holds the socket listening on 127.0.0.1:`port` (Linux: /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as fh:
            for row in list(fh)[1:]:
                cols = row.split()
                if int(cols[1].rsplit(":", 1)[1], 16) == port and cols[3] == "0A":
                    inodes.add(f"socket:[{cols[9]}]")
    for pid in pids:
        with contextlib.suppress(OSError):
            fds = Path(f"/proc/{pid}/fd")
            if any(os.readlink(fd) in inodes for fd in fds.iterdir()):
                return pid
    return None


@pytest.mark.slow
def test_two_nodes_train_preempt_and_resume_as_one_node(gpt2_shards: Path, tmp_path: Path) -> None:
    """Two torchrun launchers on one host (`--nnodes 2`, c10d rendezvous: the multi-node launch
    of docs/slurm.md, through leviathan.torchrun as the workflow runs it) against one launcher
    with the same two ranks: the same losses; SIGTERM to one launcher stops both ranks at the
    same step with a checkpoint (both launchers exit 143), and the relaunch resumes
    to the same final weights, bit for bit."""
    common = ["--set", "global_batch=8", "--set", "micro_batch=4"]
    common += ["--runtime", "checkpoint.every=0", "--runtime", "threads=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    one = cli(gpt2_shards, tmp_path / "one", *common)
    subprocess.run(
        [*torchrun, "--standalone", "--nproc-per-node", "2"] + one[1:],
        check=True,
        env=env,
    )

    run_dir = tmp_path / "two"
    port = _free_port()

    def launch() -> list[subprocess.Popen[str]]:
        node = [sys.executable, "-m", "leviathan.torchrun", "--nnodes", "2"]
        node += ["--nproc-per-node", "1", "--rdzv-backend", "c10d"]
        node += ["--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two-nodes"]
        argv = node + cli(gpt2_shards, run_dir, *common)[1:]
        return [subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True) for _ in "ab"]

    nodes = launch()
    metrics = run_dir / "metrics.jsonl"
    wait_for_training(run_dir, 300)
    # one node's launcher, torchrun forwards it; not the one hosting the rendezvous store,
    # whose end would leave the other launcher's own shutdown without its store (exit 1)
    host = _listening_pid(port, [n.pid for n in nodes])
    assert host is not None, "no launcher listens on the rendezvous port"
    signalled = next(n for n in nodes if n.pid != host)
    signalled.send_signal(signal.SIGTERM)
    errs = [n.communicate(timeout=300)[1] for n in nodes]
    # both launchers exit as leviathan train does: 128 + SIGTERM (torchrun's own status is 1)
    assert [n.returncode for n in nodes] == [128 + signal.SIGTERM] * 2, errs
    saved = [p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("step_")]
    assert len(saved) == 1, errs
    assert not (run_dir / "checkpoints" / "final").exists(), errs
    stopped_at = int(saved[0].split("_")[1])
    assert 0 < stopped_at < STEPS

    nodes = launch()  # the retried job: resumes on both nodes
    errs = [n.communicate(timeout=600)[1] for n in nodes]
    assert all(n.returncode == 0 for n in nodes), errs
    start = read_metrics(metrics, "start")
    assert start[-1]["step"] == stopped_at
    assert start[-1]["world_size"] == 2
    a = [r["loss"] for r in read_metrics(tmp_path / "one" / "metrics.jsonl", "train")]
    b = [r["loss"] for r in read_metrics(metrics, "train")]
    assert len(a) == len(b) == STEPS
    assert b == pytest.approx(a, rel=1e-6)
    assert_bitwise_equal(weights(run_dir), weights(tmp_path / "one"))
