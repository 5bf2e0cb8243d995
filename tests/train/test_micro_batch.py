"""micro_batch is a memory knob, not part of a run's identity: a resume with another micro-batch
continues the run; the device running out of memory in a step is one line naming the workflow
key train.<scale>.micro_batch and a smaller value, exit status 4, and a record in the run.

What is bitwise across a change of micro_batch, and what is not: the resumed state (weights,
AdamW moments, loader position, RNG) is the checkpoint's, bit for bit, and so is every record
before the resume; the steps after it compute the same mean gradient over the same sequences
in another summation order (two backward passes of 4 sequences accumulated, instead of one of
8), so their losses and weights agree with the uninterrupted run's within float32 rounding:
RTOL_LOSS on each loss, ATOL_WEIGHT on each weight (four AdamW steps of lr <= 3e-3 move a
weight by at most ~1.2e-2; a rounding-level change of the gradient moves it by far less)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from leviathan import layout
from leviathan.checkpoint import files
from leviathan.io import read_json
from leviathan.model import LanguageModel
from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig, train_config
from leviathan.train.errors import OUT_OF_MEMORY_EXIT, smaller_micro_batch
from leviathan.train.metrics_log import read_metrics
from leviathan.train.trainer import train

STEPS = 12
RTOL_LOSS = 1e-5
ATOL_WEIGHT = 1e-5
QUIET = RuntimeConfig(
    progress=False,
    prefetch=0,
    validation=ValidationConfig(every=0),
    checkpoint=CheckpointConfig(every=4, keep_last=2),
)


def cfg(**changes: object):  # type: ignore[no-untyped-def]
    return train_config("micro", "gpt2", "tied", total_tokens=8 * 64 * STEPS, **changes)


def run(shards: Path, run_dir: Path, **changes: object):  # type: ignore[no-untyped-def]
    return train(
        cfg(**changes),
        train_bins=[shards / "train.bin"],
        val_bin=None,
        run_dir=run_dir,
        runtime=QUIET,
    )


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(files.final_dir(run_dir) / files.WEIGHTS)


def test_micro_batch_is_recorded_but_not_fingerprinted() -> None:
    a = cfg(micro_batch=8)
    assert a.fingerprint() == a.with_(micro_batch=2).fingerprint()
    assert a.fingerprint() != a.with_(seed=1).fingerprint()
    assert a.with_(micro_batch=2).to_dict()["micro_batch"] == 2


@pytest.mark.slow  # two 12-step runs of the micro model (~30 s on 2 shared CPU cores)
def test_a_resume_with_another_micro_batch_continues_the_run(
    gpt2_shards: Path, tmp_path: Path
) -> None:
    whole = run(gpt2_shards, tmp_path / "whole", micro_batch=8)
    resumed = tmp_path / "resumed"
    shutil.copytree(tmp_path / "whole", resumed)
    shutil.rmtree(files.final_dir(resumed))  # back to the step-8 checkpoint
    result = run(gpt2_shards, resumed, micro_batch=4)
    assert result.start_step == 8  # continued, not restarted
    assert not list(resumed.glob(f"{files.CHECKPOINTS}.stale-*"))  # no checkpoint set aside
    state = read_json(files.final_dir(resumed) / files.STATE)
    assert state["train_config"]["micro_batch"] == 4  # recorded
    ref = {
        r["step"]: r["loss"] for r in read_metrics(layout.metrics_file(tmp_path / "whole"), "train")
    }
    got = {r["step"]: r["loss"] for r in read_metrics(layout.metrics_file(resumed), "train")}
    assert sorted(got) == list(range(1, STEPS + 1))
    assert all(got[s] == ref[s] for s in range(1, 9))  # before the resume: bitwise
    for s in range(9, STEPS + 1):  # after it: another summation order
        assert got[s] == pytest.approx(ref[s], rel=RTOL_LOSS), s
    a, b = weights(tmp_path / "whole"), weights(resumed)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=ATOL_WEIGHT, msg=k)
    assert any(not torch.equal(a[k], b[k]) for k in a)  # the order did change the bits
    assert whole.steps == result.steps == STEPS


def test_smaller_micro_batch_halves_to_a_divisor_of_the_per_device_batch() -> None:
    assert smaller_micro_batch(16, 512) == 8
    assert smaller_micro_batch(12, 24) == 6
    assert smaller_micro_batch(10, 30) == 5
    assert smaller_micro_batch(6, 24) == 3
    assert smaller_micro_batch(9, 18) == 3  # 4 does not divide 18
    assert smaller_micro_batch(1, 8) is None


def _run_out_of_memory_at(monkeypatch: pytest.MonkeyPatch, call: int) -> None:
    """The model's forward raises torch.OutOfMemoryError at its `call`-th call, as CUDA does."""
    forward, calls = LanguageModel.forward, [0]

    def failing(self: LanguageModel, *args: object, **kwargs: object) -> torch.Tensor:
        calls[0] += 1
        if calls[0] == call:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(LanguageModel, "forward", failing)


def test_out_of_memory_in_a_step_is_one_line_naming_the_key_and_exit_4(
    gpt2_shards: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from leviathan.cli import main

    run_dir = tmp_path / "run"
    _run_out_of_memory_at(monkeypatch, 3)  # micro_batch 8 of 8: one forward per step
    args = ["train", "--scale", "micro", "--vocab", "gpt2", "--variant", "tied"]
    args += ["--train", str(gpt2_shards / "train.bin"), "--run-dir", str(run_dir)]
    args += ["--set", f"total_tokens={8 * 64 * STEPS}", "--runtime", "progress=false"]
    args += ["--runtime", "checkpoint.every=2", "--runtime", "validation.every=0"]
    assert main(args) == OUT_OF_MEMORY_EXIT
    out = capsys.readouterr().err
    assert "Traceback" not in out
    # beside the progress line of step 1: the refusal, one line
    errors = [line for line in out.splitlines() if not line.startswith("step ")]
    assert len(errors) == 1
    err = errors[0]
    assert err.startswith("leviathan train: error: ")
    assert "out of memory on cpu at step 3 with train.micro.micro_batch=8" in err
    assert "set train.micro.micro_batch: 4 in the workflow config" in err
    assert "step_00000002" in err  # where the rerun resumes
    record = read_json(layout.out_of_memory_file(run_dir))
    assert (record["step"], record["micro_batch"]) == (3, 8)
    # the rerun with the suggested value resumes the run and clears the record
    monkeypatch.undo()
    result = train(
        cfg(micro_batch=4),
        train_bins=[gpt2_shards / "train.bin"],
        val_bin=None,
        run_dir=run_dir,
        runtime=replace(QUIET, checkpoint=replace(QUIET.checkpoint, every=2)),
    )
    assert result.start_step == 2
    assert not layout.out_of_memory_file(run_dir).exists()


def test_the_refusal_names_the_memory_models_prediction_where_it_has_one() -> None:
    from leviathan.train.errors import out_of_memory

    kw = {"step": 3, "device": "cuda:0", "last_good": "run/checkpoints/step_00000002"}
    predicted = out_of_memory("400m", 32, 128, predicted=8, **kw)
    assert "set train.400m.micro_batch: 8 " in str(predicted)
    assert "the largest the memory model predicts to fit" in str(predicted)
    halved = out_of_memory("400m", 32, 128, **kw)  # no prediction (a device it does not know)
    assert "set train.400m.micro_batch: 16 " in str(halved)
    assert "memory model" not in str(halved)
    # a prediction that is no smaller than what ran out is no fix: the halving stands
    assert "micro_batch: 16 " in str(out_of_memory("400m", 32, 128, predicted=32, **kw))
