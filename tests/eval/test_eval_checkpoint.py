"""Loading checkpoints for evaluation; the EvalModel equals the trained model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from leviathan.eval.checkpoint import (
    EvalModel,
    open_checkpoint,
    read_checkpoint,
    resolve_checkpoint,
)
from leviathan.eval.errors import EvalInputError
from leviathan.eval.val import open_val_shard
from leviathan.io import sha256_file
from leviathan.model import VARIANTS, build_model, model_config


def test_resolve_accepts_run_checkpoints_and_checkpoint_dirs(runs: dict[str, Path]) -> None:
    run = runs["leviathan"]
    final = run / "checkpoints" / "final"
    assert resolve_checkpoint(run) == final
    assert resolve_checkpoint(run / "checkpoints") == final
    assert resolve_checkpoint(final) == final


def test_missing_or_unfinished_checkpoints_are_clear_errors(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    with pytest.raises(FileNotFoundError, match="not a checkpoint"):
        resolve_checkpoint(tmp_path / "nowhere")
    unfinished = tmp_path / "run"
    (unfinished / "checkpoints").mkdir(parents=True)
    with pytest.raises(EvalInputError, match="no complete final checkpoint"):
        resolve_checkpoint(unfinished)


def test_record_carries_the_weights_sha256_and_configs(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    ckpt = read_checkpoint(runs["leviathan"])
    rec = ckpt.record()
    assert rec["sha256"] == sha256_file(ckpt.path / "model.safetensors")
    assert (rec["variant"], rec["vocab"], rec["scale"], rec["context"]) == (
        "leviathan",
        "gpt2",
        "micro",
        64,
    )
    assert rec["train_data"]["vocab"] == "gpt2"
    assert rec["step"] == 4
    manifest = ckpt.path / "model.safetensors.json"
    assert rec["manifest"].endswith("checkpoints/final/model.safetensors.json")
    assert rec["manifest_sha256"] == sha256_file(manifest)
    # a checkpoint without a manifest: nothing records its files, so nothing is evaluated
    old = shutil.copytree(ckpt.path, tmp_path / "old")
    (old / "model.safetensors.json").unlink()
    with pytest.raises(EvalInputError, match=r"model\.safetensors\.json: missing"):
        read_checkpoint(old)


def rehashed(ckpt_dir: Path) -> Path:
    """The checkpoint's manifest made to record its state.json as it is now (what one who edits
    the state and the manifest does): the checks behind the hashes still hold."""
    manifest_file = ckpt_dir / "model.safetensors.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["files"]["state.json"] = sha256_file(ckpt_dir / "state.json")
    manifest_file.write_text(json.dumps(manifest))
    return ckpt_dir


def test_weights_changed_since_training_are_refused_before_loading(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    from safetensors.torch import load_file, save_file

    final = shutil.copytree(runs["leviathan"] / "checkpoints" / "final", tmp_path / "ckpt")
    original = (final / "model.safetensors").read_bytes()
    weights = load_file(final / "model.safetensors")
    head = next(k for k in weights if "head" in k)
    weights[head] = weights[head] * 1.01  # enough to flip a small gain's sign
    save_file(weights, final / "model.safetensors")
    with pytest.raises(
        EvalInputError, match=r"ckpt/model\.safetensors: sha256 .* the file changed"
    ):
        open_checkpoint(final, "cpu")
    (final / "model.safetensors").write_bytes(original)
    (final / "optim.pt").unlink()
    with pytest.raises(EvalInputError, match=r"ckpt/optim\.pt: missing"):
        read_checkpoint(final)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_eval_model_matches_the_language_model(variant: str) -> None:
    torch.manual_seed(0)
    model = build_model(model_config("micro", "gpt2", variant)).eval()
    ids = torch.randint(0, model.cfg.vocab_size, (3, 17))
    targets = torch.randint(0, model.cfg.vocab_size, (3, 17))
    targets[0, -3:] = -100
    expected = model.token_losses(ids, targets)
    calls = []
    model.io.input.register_forward_hook(lambda *a: calls.append(1))
    em = EvalModel(model, precision="fp32")
    got = em.token_losses(ids, targets)
    assert calls == [], "evaluation must not run the input module per batch"
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert torch.all(got[0, -3:] == 0)
    torch.testing.assert_close(em.hidden(ids), model.hidden(ids), rtol=1e-5, atol=1e-5)


def test_out_of_vocabulary_ids_are_refused(loaded) -> None:
    _, em = loaded
    with pytest.raises(ValueError, match="outside"):
        em.hidden(torch.tensor([[0, em.vocab_size]]))


def test_data_of_another_vocabulary_is_refused(loaded, tmp_path: Path, shard_writer) -> None:
    ckpt, _ = loaded
    other = shard_writer(tmp_path / "val.bin", np.arange(100), vocab="cl100k_base")
    with pytest.raises(
        EvalInputError, match=r"tokenized with cl100k_base, but the checkpoint .* gpt2"
    ):
        open_val_shard(ckpt, other)


def test_weights_that_do_not_fit_the_recorded_config_are_refused(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    final = tmp_path / "ckpt"
    shutil.copytree(runs["leviathan"] / "checkpoints" / "final", final)
    state = json.loads((final / "state.json").read_text())
    state["model_config"]["ffn_hidden"] = 128
    (final / "state.json").write_text(json.dumps(state))
    with pytest.raises(EvalInputError, match=r"state\.json: sha256 .* the file changed"):
        open_checkpoint(final, "cpu")  # first of all, the manifest says it changed
    with pytest.raises(EvalInputError, match="do not fit the model"):
        open_checkpoint(rehashed(final), "cpu")
    state["model_config"]["vocab_size"] = 1000
    (final / "state.json").write_text(json.dumps(state))
    with pytest.raises(EvalInputError, match="n_vocab"):
        read_checkpoint(rehashed(final))


@pytest.mark.parametrize("name", ["model.safetensors", "state.json"])
def test_an_evaluation_of_a_truncated_file_is_one_line_naming_it(
    runs: dict[str, Path],
    gpt2_shards: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
) -> None:
    from leviathan.cli import main

    final = tmp_path / "ckpt"
    shutil.copytree(runs["tied"] / "checkpoints" / "final", final)
    data = (final / name).read_bytes()
    (final / name).write_bytes(data[: len(data) // 2])  # cut short
    out = tmp_path / "val.json"
    args = ["eval", "val", "--checkpoint", str(final), "--val", str(gpt2_shards / "val.bin")]
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("leviathan eval: error: ") and str(final / name) in err[0]
    assert "rerun the training command" in err[0]
    assert not out.exists()
