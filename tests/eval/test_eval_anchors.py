"""Evaluation inputs held to what their producers and the checkpoint recorded: a validation shard
that was trained on, counts of another corpus, an edited metrics log, each refused naming the
file; what the audit says of an output rebuilt from an edited log."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from leviathan.anchor import ChangedArtifact
from leviathan.data.counts import counts_from_shard
from leviathan.data.roles import ShardRoleError
from leviathan.eval import sample_efficiency as se
from leviathan.eval.results import write_result
from leviathan.eval.val import evaluate_val
from leviathan.io import sha256_file
from leviathan.report.audit import Auditor
from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig, train_config
from leviathan.train.log_anchor import final_val_problem
from leviathan.train.trainer import train

STEPS = 4  # the `runs` fixture's (conftest.py), rerun here with the same settings
QUIET = RuntimeConfig(
    progress=False,
    validation=ValidationConfig(every=1, windows=4),
    checkpoint=CheckpointConfig(every=0, keep_last=1),
)


def test_a_validation_shard_the_checkpoint_was_trained_on_is_refused(
    loaded, gpt2_shards: Path, tmp_path: Path
) -> None:
    ckpt, em = loaded
    with pytest.raises(ShardRoleError, match=r"train\.bin: is a training shard of"):
        evaluate_val(ckpt, em, gpt2_shards / "train.bin")
    copy = tmp_path / "held_out.bin"  # the same tokens under another name are the same shard
    shutil.copy(gpt2_shards / "train.bin", copy)
    shutil.copy(gpt2_shards / "train.bin.json", tmp_path / "held_out.bin.json")
    with pytest.raises(ShardRoleError, match=r"held_out\.bin: is a training shard of"):
        evaluate_val(ckpt, em, copy)


def test_counts_of_another_corpus_are_refused(
    loaded, gpt2_shards: Path, small_val: Path, tmp_path: Path
) -> None:
    ckpt, em = loaded
    counts_from_shard(gpt2_shards / "val.bin", tmp_path / "counts.npy")  # not what it trained on
    with pytest.raises(ShardRoleError, match=r"counts\.npy: counted from a shard of sha256"):
        evaluate_val(ckpt, em, small_val, counts=tmp_path / "counts.npy")
    # the counts changed since tokenization wrote them
    counts = tmp_path / "train_counts.npy"
    shutil.copy(gpt2_shards / "counts.npy", counts)
    shutil.copy(gpt2_shards / "counts.npy.json", tmp_path / "train_counts.npy.json")
    edited = np.load(counts)
    edited[0] += 1
    np.save(counts, edited)
    with pytest.raises(ChangedArtifact, match=r"train_counts\.npy: sha256 .* its manifest"):
        evaluate_val(ckpt, em, small_val, counts=counts)


def _edit_val_loss(log: Path, index: int, delta: float) -> None:
    """Change the `index`-th validation record's val_loss of a metrics log in place."""
    lines = log.read_text().splitlines()
    vals = [i for i, line in enumerate(lines) if json.loads(line).get("kind") == "val"]
    rec = json.loads(lines[vals[index]])
    rec["val_loss"] += delta
    lines[vals[index]] = json.dumps(rec, sort_keys=True)
    log.write_text("".join(line + "\n" for line in lines))


@pytest.fixture
def copies(runs: dict[str, Path], tmp_path: Path) -> dict[str, Path]:
    return {v: shutil.copytree(run, tmp_path / v) for v, run in runs.items()}


def test_an_edited_metrics_log_is_refused_by_sample_efficiency_and_training(
    copies: dict[str, Path], gpt2_shards: Path
) -> None:
    tied, lev = copies["tied"], copies["leviathan"]
    assert (lev / "metrics.jsonl.json").is_file()  # written when training finished
    se.sample_efficiency(tied, [lev])  # as trained
    log = lev / "metrics.jsonl"
    original = log.read_bytes()
    _edit_val_loss(log, 1, -0.5)
    with pytest.raises(ChangedArtifact, match=r"leviathan/metrics\.jsonl: sha256 .* manifest"):
        se.sample_efficiency(tied, [lev])
    # its manifest removed too: the final checkpoint fixed every record up to its step
    (lev / "metrics.jsonl.json").unlink()
    with pytest.raises(ChangedArtifact, match=rf"its records up to step {STEPS} hash to"):
        se.sample_efficiency(tied, [lev])
    # a rerun of the finished run does not anchor the edited log: it refuses it
    cfg = train_config("micro", "gpt2", "leviathan", total_tokens=8 * 64 * STEPS)
    bins = {"train_bins": [gpt2_shards / "train.bin"], "val_bin": gpt2_shards / "val.bin"}
    with pytest.raises(ChangedArtifact, match=r"metrics\.jsonl: its records up to step"):
        train(cfg, **bins, run_dir=lev, runtime=QUIET)
    assert not (lev / "metrics.jsonl.json").exists()
    log.write_bytes(original)  # restored: the rerun anchors it again
    train(cfg, **bins, run_dir=lev, runtime=QUIET)
    assert json.loads((lev / "metrics.jsonl.json").read_text())["artifact"]["sha256"] == (
        sha256_file(log)
    )
    # the last validation record against the final checkpoint's state.json
    state = json.loads((lev / "checkpoints/final/state.json").read_text())
    assert final_val_problem(log, state) is None
    _edit_val_loss(log, -1, 0.25)
    assert "its last validation record" in str(final_val_problem(log, state))


def test_the_audit_of_an_output_rebuilt_from_an_edited_log(
    copies: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tied, lev = copies["tied"], copies["leviathan"]
    out = tmp_path / "se.json"
    write_result(out, se.sample_efficiency(tied, [lev]))
    auditor = Auditor(Path.cwd())
    auditor.audit(out)
    assert not auditor.failures, [f.line() for f in auditor.failures]
    assert any("says of itself" in f.what for f in auditor.findings)

    _edit_val_loss(lev / "metrics.jsonl", 1, -0.5)
    # rebuilt by a producer that does not check its inputs: the log's anchors still say so
    monkeypatch.setattr(se, "verify_log", lambda run: None)
    write_result(out, se.sample_efficiency(tied, [lev]))
    auditor = Auditor(Path.cwd())
    auditor.audit(out)
    failed = {f.what: f.detail for f in auditor.failures}
    log = str(lev / "metrics.jsonl")
    assert "recorded in its manifest" in failed[log]
    assert "were edited" in failed[f"{log} up to the final checkpoint"]

    # its numbers edited with its manifest rewritten: they are recomputed from the logs
    doc = json.loads(out.read_text())
    doc["results"]["runs"][0]["final_val_loss"] = 1.0
    write_result(out, doc)
    auditor = Auditor(Path.cwd())
    auditor.audit(out)
    claims = [f.detail for f in auditor.failures if f.what.endswith("says of itself")]
    assert any("results.runs[0].final_val_loss is 1.0, its sources give" in c for c in claims)
