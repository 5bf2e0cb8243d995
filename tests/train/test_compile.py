"""torch.compile on CPU (inductor): graph breaks of the training forward, a compiled
training run of `micro` that trains, checkpoints and resumes, against the eager run, and one
with activation checkpointing too, whose blocks still compile."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from leviathan.checkpoint.files import step_dir
from leviathan.model import build_model, model_config
from leviathan.model.variants import VARIANTS
from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig, train_config
from leviathan.train.metrics_log import read_metrics
from leviathan.train.trainer import train

GENERATED = {"flat_mlp", "factored_mlp", "leviathan"}  # unique + gather: one documented break


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_training_forward_has_no_graph_breaks_but_unique(variant: str) -> None:
    torch.manual_seed(0)
    model = build_model(model_config("micro", "gpt2", variant))
    ids = torch.randint(0, model.cfg.vocab_size, (2, 17))
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(ids[:, :-1], ids[:, 1:])
    reasons = [str(b.reason) for b in explained.break_reasons]
    if variant in GENERATED:
        assert reasons, "the unique + gather break is expected"
        assert all("_unique2" in r for r in reasons), reasons
    else:
        assert explained.graph_break_count == 0, reasons


STEPS = 6
LOSS_ATOL = 2e-3  # nats per step, compiled vs eager (fused kernels reorder fp32 sums)


def _run(shards: Path, run_dir: Path, compile: bool, checkpointing: bool = False):
    cfg = train_config("micro", "gpt2", "leviathan", total_tokens=8 * 64 * STEPS)
    runtime = RuntimeConfig(
        progress=False,
        compile=compile,
        activation_checkpointing=checkpointing,
        validation=ValidationConfig(every=0),
        checkpoint=CheckpointConfig(every=3, keep_last=2),
    )
    return train(
        cfg, train_bins=[shards / "train.bin"], val_bin=None, run_dir=run_dir, runtime=runtime
    )


def _steps_taken(run_dir: Path) -> int:
    """The steps whose batches the loader handed out: its position, as the final checkpoint
    records it (the loader moves it itself, batch by batch)."""
    state = json.loads((run_dir / "checkpoints" / "final" / "state.json").read_text())
    return int(state["loader"]["step"])


def _logged_steps(run_dir: Path) -> list[int]:
    """The steps of the metrics log's train records, in order (repeats included)."""
    return [r["step"] for r in read_metrics(run_dir / "metrics.jsonl", "train")]


def _losses(run_dir: Path) -> dict[int, float]:
    return {
        r["step"]: r["loss"]
        for r in read_metrics(run_dir / "metrics.jsonl")
        if r["kind"] == "train"
    }


@pytest.fixture(scope="module")
def eager(gpt2_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The eager run both compiled runs are held against."""
    run_dir = tmp_path_factory.mktemp("eager") / "run"
    _run(gpt2_shards, run_dir, compile=False)
    return run_dir


@pytest.mark.slow
def test_compiled_training_trains_checkpoints_resumes_and_matches_eager(
    gpt2_shards: Path, eager: Path, tmp_path: Path
) -> None:
    compiled = tmp_path / "compiled"
    first = _run(gpt2_shards, compiled, compile=True)
    losses = _losses(compiled)
    assert _logged_steps(compiled) == list(range(1, STEPS + 1))  # every step trained, logged
    assert _steps_taken(compiled) == STEPS
    assert losses[STEPS] < losses[1]  # it trains
    ref = _losses(eager)
    for step, loss in ref.items():
        assert abs(losses[step] - loss) <= LOSS_ATOL, (step, losses[step], loss)
    # resume: drop everything after step 3 and run again, compiled
    ckpts = compiled / "checkpoints"
    shutil.rmtree(ckpts / "final")
    for step in range(4, STEPS + 1):
        shutil.rmtree(step_dir(ckpts, step), ignore_errors=True)
    resumed = _run(gpt2_shards, compiled, compile=True)
    assert resumed.start_step == 3
    assert _logged_steps(compiled) == list(range(1, STEPS + 1))  # 4.. trained again, once
    assert _steps_taken(compiled) == STEPS
    assert resumed.final_train_loss == pytest.approx(first.final_train_loss, abs=LOSS_ATOL)


@pytest.mark.slow
def test_checkpointed_compiled_training_compiles_and_matches_eager(
    gpt2_shards: Path, eager: Path, tmp_path: Path
) -> None:
    """runtime.activation_checkpointing with runtime.compile through the trainer: Dynamo
    compiles frames (the checkpoint inside the blocks' compiled code, not around it, where
    nothing would compile), and the losses are the eager run's."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    _run(gpt2_shards, tmp_path / "compiled", compile=True, checkpointing=True)
    assert torch._dynamo.utils.counters["frames"]["ok"] >= 1
    compiled, ref = _losses(tmp_path / "compiled"), _losses(eager)
    assert compiled.keys() == ref.keys()
    for step, loss in ref.items():
        assert abs(compiled[step] - loss) <= LOSS_ATOL, (step, compiled[step], loss)
