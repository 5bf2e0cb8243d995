"""Kept checkpoints (`runtime.checkpoint.keep_at`): the schedule's steps, weights equal to the run's at those
steps, manifests whose sha256 match the files, outside `keep_last` and `drop_steps_at_final`."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from leviathan.checkpoint.integrity import verify_checkpoint
from leviathan.eval.checkpoint import load_model, read_checkpoint
from leviathan.io import read_json
from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig, train_config
from leviathan.train.schedule import keep_steps
from leviathan.train.trainer import build_cell_model, train

STEPS = 12
FILES = {"model.safetensors", "model.safetensors.json", "state.json"}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_keep_steps_forms() -> None:
    # Pythia's schedule: 0, the powers of two up to 512, then every 1000
    pythia = [0] + [2**k for k in range(10)] + list(range(1000, 143_001, 1000))
    assert keep_steps("log2:512:1000", 143_000) == pythia
    assert keep_steps("log2", 12) == [0, 1, 2, 4, 8]
    assert keep_steps("7,0,3,99", 12) == [0, 3, 7]
    assert keep_steps("", 12) == []
    for bad in ("log3", "log2:0", "log2:4:4:4", "1,-2", "x"):
        with pytest.raises(ValueError, match="keep_at"):
            RuntimeConfig(checkpoint=CheckpointConfig(keep_at=bad))
    keep = RuntimeConfig.from_dict({"checkpoint": {"keep_at": [0, 8, 4]}}).checkpoint.keep_at
    assert keep == "0,8,4"


@pytest.fixture(scope="module")
def kept_run(gpt2_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("kept") / "run"
    cfg = train_config("micro", "gpt2", "leviathan", total_tokens=8 * 64 * STEPS)
    runtime = RuntimeConfig(
        progress=False,
        validation=ValidationConfig(every=0, windows=4),
        checkpoint=CheckpointConfig(every=4, keep_last=1, keep_at="log2:4:4"),
    )
    train(
        cfg,
        train_bins=[gpt2_shards / "train.bin"],
        val_bin=gpt2_shards / "val.bin",
        run_dir=run_dir,
        runtime=runtime,
    )
    return run_dir


def test_kept_checkpoints_hold_the_runs_weights_at_their_steps(kept_run: Path) -> None:
    ckpts = kept_run / "checkpoints"
    kept = ckpts / "kept"
    assert sorted(p.name for p in kept.iterdir()) == [f"step_{s:08d}" for s in (0, 1, 2, 4, 8, 12)]
    for d in kept.iterdir():
        assert {p.name for p in d.iterdir()} == FILES  # no optimizer nor RNG state
        manifest = read_json(d / "model.safetensors.json")
        assert manifest["kind"] == "kept_checkpoint"
        assert manifest["artifact"]["sha256"] == sha256(d / "model.safetensors")
        assert manifest["files"] == {"state.json": sha256(d / "state.json")}
        verify_checkpoint(d)  # every recorded file hashes as recorded
        state = read_json(d / "state.json")
        assert state["step"] == int(d.name[5:])
        assert state["tokens"] == state["step"] * 8 * 64
    # keep_last=1 left one step checkpoint (step 8); the kept step 4 outlived step_4's pruning
    assert sorted(p.name for p in ckpts.glob("step_*")) == ["step_00000008"]
    for step, other in ((8, ckpts / "step_00000008"), (12, ckpts / "final")):
        a = load_file(kept / f"step_{step:08d}" / "model.safetensors")
        b = load_file(other / "model.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # step 0: the model as built, before any step
    cfg = train_config("micro", "gpt2", "leviathan", total_tokens=8 * 64 * STEPS)
    init = build_cell_model(cfg).state_dict()
    zero = load_file(kept / "step_00000000" / "model.safetensors")
    assert all(torch.equal(zero[k], init[k]) for k in init)
    final = load_file(ckpts / "final" / "model.safetensors")
    assert any(not torch.equal(zero[k], final[k]) for k in final)  # training moved them


def test_the_final_manifest_records_every_kept_checkpoint(kept_run: Path) -> None:
    final = read_json(kept_run / "checkpoints" / "final" / "model.safetensors.json")
    kept = kept_run / "checkpoints" / "kept"
    assert [(r["step"], r["sha256"]) for r in final["kept"]] == [
        (s, sha256(kept / f"step_{s:08d}" / "model.safetensors")) for s in (0, 1, 2, 4, 8, 12)
    ]


def test_a_kept_checkpoint_is_evaluable(kept_run: Path) -> None:
    ckpt = read_checkpoint(kept_run / "checkpoints" / "kept" / "step_00000004")
    assert ckpt.record()["step"] == 4
    model = load_model(ckpt)
    x = torch.randint(0, 1000, (1, 8))
    assert torch.isfinite(model(x, x)).all()


def test_drop_steps_at_final_leaves_kept_checkpoints(gpt2_shards: Path, tmp_path: Path) -> None:
    cfg = train_config("micro", "gpt2", "leviathan", total_tokens=8 * 64 * 4)
    runtime = RuntimeConfig(
        progress=False,
        validation=ValidationConfig(every=0),
        checkpoint=CheckpointConfig(every=2, keep_last=1, keep_at="1,2", drop_steps_at_final=True),
    )
    train(
        cfg, train_bins=[gpt2_shards / "train.bin"], val_bin=None, run_dir=tmp_path, runtime=runtime
    )
    ckpts = tmp_path / "checkpoints"
    assert not list(ckpts.glob("step_*"))
    assert sorted(p.name for p in (ckpts / "kept").iterdir()) == ["step_00000001", "step_00000002"]
