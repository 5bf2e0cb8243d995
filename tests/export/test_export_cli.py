"""`leviathan export`: a trained run loads in transformers; provenance; bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from leviathan.cli import main
from leviathan.data.tokenizers import load_tokenizer
from leviathan.eval.checkpoint import load_model, read_checkpoint
from leviathan.io import sha256_file


@pytest.fixture(scope="module")
def exported(micro_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "micro-leviathan"
    assert main(["export", str(micro_run), str(out)]) == 0
    return out


def test_export_loads_with_no_custom_code(exported: Path, micro_run: Path) -> None:
    names = {p.name for p in exported.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "README.md",
        "model.safetensors.json",
    } <= names
    config = json.loads((exported / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert "auto_map" not in config
    model = AutoModelForCausalLM.from_pretrained(exported, trust_remote_code=False).eval()
    tokenizer = AutoTokenizer.from_pretrained(exported, trust_remote_code=False)
    ckpt = read_checkpoint(micro_run)
    ours = load_model(ckpt)
    ids = torch.as_tensor([tokenizer("The quick brown fox jumps over the lazy dog.")["input_ids"]])
    assert ids[0].tolist() == load_tokenizer("gpt2").encode(
        "The quick brown fox jumps over the lazy dog."
    )
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, ours(ids), rtol=1e-5, atol=1e-5)
    assert json.loads((exported / "generation_config.json").read_text())["eos_token_id"] == 50256


def test_model_card_and_manifest_name_the_checkpoint(exported: Path, micro_run: Path) -> None:
    ckpt = read_checkpoint(micro_run)
    card = (exported / "README.md").read_text()
    assert ckpt.sha256 in card
    assert "micro/gpt2/leviathan/seed" in card
    assert '"variant": "leviathan"' in card  # the config
    assert (
        str((ckpt.state.get("code") or {}).get("git_commit") or "unknown") in card
    )  # the code version
    manifest = json.loads((exported / "model.safetensors.json").read_text())
    assert manifest["kind"] == "hf_export"
    assert manifest["artifact"]["sha256"] == sha256_file(exported / "model.safetensors")
    assert manifest["files"]["README.md"] == sha256_file(exported / "README.md")
    roles = {i["role"]: i["sha256"] for i in manifest["inputs"]}
    assert roles["checkpoint"] == ckpt.sha256
    assert manifest["vocab"]["bpe_sha256"] == load_tokenizer("gpt2").spec.bpe_sha256


def test_audit_walks_the_export_back_to_its_checkpoint(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", str(exported)]) == 0
    out = capsys.readouterr().out
    assert "checkpoints/final/model.safetensors" in out
    assert "train.bin" in out
    copy = tmp_path / "tampered"
    shutil.copytree(exported, copy)
    (copy / "config.json").write_text(
        (copy / "config.json").read_text().replace('"silu"', '"gelu"')
    )
    assert main(["audit", str(copy)]) == 1
    assert "config.json" in capsys.readouterr().err


def test_bad_input_clear_errors_nothing_half_written(
    micro_run: Path, exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a run without a final checkpoint
    empty_run = tmp_path / "run"
    (empty_run / "checkpoints").mkdir(parents=True)
    out = tmp_path / "out"
    assert main(["export", str(empty_run), str(out)]) == 2
    assert "no complete final checkpoint" in capsys.readouterr().err
    # an unknown dtype
    assert main(["export", str(micro_run), str(out), "--dtype", "float16"]) == 2
    assert "unknown dtype 'float16'" in capsys.readouterr().err
    assert not out.exists()
    # a non-empty OUT: refused without --force, untouched
    before = {p.name: sha256_file(p) for p in exported.iterdir()}
    (exported / "keep.txt").write_text("mine")
    assert main(["export", str(micro_run), str(exported)]) == 2
    assert "not empty; pass --force" in capsys.readouterr().err
    assert (exported / "keep.txt").read_text() == "mine"
    (exported / "keep.txt").unlink()
    assert {p.name: sha256_file(p) for p in exported.iterdir()} == before
    assert not [p for p in tmp_path.parent.iterdir() if p.name.endswith((".tmp", ".old"))]


def test_force_replaces_an_earlier_export_and_bfloat16(micro_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["export", str(micro_run), str(out)]) == 0
    (out / "stale.txt").write_text("old")
    assert main(["export", str(micro_run), str(out), "--force", "--dtype", "bfloat16"]) == 0
    assert not (out / "stale.txt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name != "out"]  # no temp or old directories left
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.model.embed_tokens.weight.dtype == torch.bfloat16


def test_force_never_replaces_a_run_or_another_folder(
    micro_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`export RUN RUN --force` used to delete the run's checkpoints and exit 0."""
    run = tmp_path / "run"
    shutil.copytree(micro_run, run)
    before = {p.relative_to(run): sha256_file(p) for p in run.rglob("*") if p.is_file()}
    assert main(["export", str(run), str(run), "--force"]) == 2
    assert "overlaps the run exported" in capsys.readouterr().err
    other = tmp_path / "other"
    shutil.copytree(micro_run, other)  # another run: not an export
    assert main(["export", str(run), str(other), "--force"]) == 2
    err = capsys.readouterr().err
    assert "is not an export" in err
    assert "--force replaces only an earlier `leviathan export`" in err
    assert {p.relative_to(run): sha256_file(p) for p in run.rglob("*") if p.is_file()} == before
    assert (other / "checkpoints" / "final" / "model.safetensors").is_file()
