"""A resume with other LEV reconstruction choices (docs/method.md §6) than the checkpoint's is
refused, naming the key; so is an evaluation of a checkpoint whose records disagree with its
weights or its training config."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from leviathan.eval.checkpoint import open_checkpoint
from leviathan.eval.errors import EvalInputError
from leviathan.io import sha256_file
from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig, train_config
from leviathan.train.errors import ConfigMismatch, config_mismatch
from leviathan.train.trainer import train

QUIET = RuntimeConfig(
    progress=False,
    validation=ValidationConfig(every=2, windows=2),
    checkpoint=CheckpointConfig(every=1, keep_last=1),
)
LEARNED = {"lev": {"knot_scale": "learned", "basis": "normalised"}}


def _cfg(overrides: dict | None = None):
    return train_config(
        "micro", "gpt2", "leviathan", total_tokens=8 * 64 * 2, model_overrides=overrides or {}
    )


@pytest.fixture(scope="module")
def learned_run(gpt2_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("lev_choices") / "run"
    train(
        _cfg(LEARNED),
        train_bins=[gpt2_shards / "train.bin"],
        val_bin=None,
        run_dir=run_dir,
        runtime=QUIET,
    )
    return run_dir


def test_resume_with_other_choices_is_refused_naming_the_key(
    learned_run: Path, gpt2_shards: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(learned_run, run_dir)
    shutil.rmtree(run_dir / "checkpoints" / "final")
    with pytest.raises(
        ConfigMismatch,
        match=r"model_overrides\.lev\.knot_scale: checkpoint 'learned' != now None",
    ):
        train(
            _cfg({"lev": {"basis": "normalised"}}),
            train_bins=[gpt2_shards / "train.bin"],
            val_bin=None,
            run_dir=run_dir,
            runtime=QUIET,
        )


def _tampered(run: Path, tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    final = tmp_path / "final"
    shutil.copytree(run / "checkpoints" / "final", final)
    state = json.loads((final / "state.json").read_text())
    edit(state)
    (final / "state.json").write_text(json.dumps(state))
    # its manifest rehashed too: the records disagree even where every hash holds
    manifest = json.loads((final / "model.safetensors.json").read_text())
    manifest["files"]["state.json"] = sha256_file(final / "state.json")
    (final / "model.safetensors.json").write_text(json.dumps(manifest))
    return final


def test_evaluation_with_other_choices_is_refused_naming_the_key(
    learned_run: Path, tmp_path: Path
) -> None:
    ckpt, _ = open_checkpoint(learned_run, "cpu")  # as trained: it loads
    assert ckpt.model_config.lev.knot_scale == "learned"

    def fixed_scale(state: dict) -> None:
        state["model_config"]["lev"]["knot_scale"] = "fixed"
        state["train_config"]["model_overrides"] = {}

    with pytest.raises(EvalInputError, match=r"another lev\.knot_scale"):
        open_checkpoint(_tampered(learned_run, tmp_path / "a", fixed_scale), "cpu")

    def other_basis(state: dict) -> None:
        state["model_config"]["lev"]["basis"] = "unnormalised"

    with pytest.raises(EvalInputError, match=r"lev\.basis='unnormalised'.*lev\.basis='normalised'"):
        open_checkpoint(_tampered(learned_run, tmp_path / "b", other_basis), "cpu")


def test_metrics_log_records_lev_health_at_init_and_each_validation(
    gpt2_shards: Path, tmp_path: Path
) -> None:
    from dataclasses import replace

    from leviathan.train.metrics_log import read_metrics

    run_dir = tmp_path / "run"
    train(
        _cfg(),
        train_bins=[gpt2_shards / "train.bin"],
        val_bin=gpt2_shards / "val.bin",
        run_dir=run_dir,
        runtime=replace(QUIET, validation=replace(QUIET.validation, every=1)),
    )
    health = read_metrics(run_dir / "metrics.jsonl", "lev_health")
    vals = read_metrics(run_dir / "metrics.jsonl", "val")
    assert [r["step"] for r in health] == [0] + [r["step"] for r in vals]
    ckpt, _ = open_checkpoint(run_dir, "cpu")
    h = ckpt.model_config.lev.n_heads
    assert all(len(r["near_ends"]) == len(r["log_std_M"]) == h for r in health)


def test_a_fingerprint_of_another_version_over_the_same_values_says_so(tmp_path: Path) -> None:
    """Same recorded values, another fingerprint (a rule changed between versions): the
    refusal says the values agree and names the way out, not an empty diff."""
    same = {"scale": "micro", "model_overrides": {"lev": {"knot_scale": 1.0}}}
    text = str(config_mismatch(tmp_path / "final", same, dict(same), tmp_path))
    assert "()" not in text and "the values are the same" in text and "leviathan retrain" in text
    other = str(config_mismatch(tmp_path / "final", same, {**same, "scale": "tiny"}, tmp_path))
    assert "scale: checkpoint 'micro' != now 'tiny'" in other
