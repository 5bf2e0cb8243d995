"""`leviathan audit` of a trained checkpoint: its files, the kept checkpoints its manifest lists and
the run's metrics log up to its step, on a real micro run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from leviathan.report.audit import Auditor
from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig, train_config
from leviathan.train.trainer import train

STEPS = 8


@pytest.fixture(scope="module")
def run(gpt2_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("audited") / "run"
    train(
        train_config("micro", "gpt2", "leviathan", total_tokens=8 * 64 * STEPS),
        train_bins=[gpt2_shards / "train.bin"],
        val_bin=gpt2_shards / "val.bin",
        run_dir=run_dir,
        runtime=RuntimeConfig(
            progress=False,
            validation=ValidationConfig(every=2, windows=2),
            checkpoint=CheckpointConfig(every=4, keep_last=1, keep_at="0,2,4"),
        ),
    )
    return run_dir


def _failures(path: Path) -> dict[str, str]:
    auditor = Auditor(Path.cwd())
    auditor.audit(path)
    return {f.what: f.detail for f in auditor.failures}


def test_the_audit_of_a_final_checkpoint_covers_its_kept_checkpoints_and_log(run: Path) -> None:
    final = run / "checkpoints" / "final"
    auditor = Auditor(Path.cwd())
    auditor.audit(final)
    assert not auditor.failures, [f.line() for f in auditor.failures]
    walked = {f.what for f in auditor.findings}
    for step in (0, 2, 4):
        assert str(run / f"checkpoints/kept/step_{step:08d}/model.safetensors") in walked
    assert f"{run / 'metrics.jsonl'} up to step {STEPS}" in walked

    kept = run / "checkpoints/kept/step_00000002/model.safetensors"
    original = kept.read_bytes()
    weights = load_file(kept)
    name = next(iter(weights))
    weights[name] = weights[name] * 1.01
    save_file(weights, kept)
    try:
        assert "recorded in" in _failures(final)[str(kept)]
    finally:
        kept.write_bytes(original)

    log = run / "metrics.jsonl"
    text = log.read_text()
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "val")
    rec = json.loads(lines[i])
    rec["val_loss"] -= 0.5
    lines[i] = json.dumps(rec, sort_keys=True)
    log.write_text("".join(line + "\n" for line in lines))
    try:
        failed = _failures(final)
        assert "were edited" in failed[f"{log} up to step {STEPS}"]
    finally:
        log.write_text(text)
    assert not _failures(final)
