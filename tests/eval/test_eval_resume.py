"""Evaluation that finishes on a cluster: deterministic sums, weights loaded once, running
sums that survive a kill (in-process and a real SIGTERM / SIGKILL of a subprocess), lm-eval's
request cache, and the CPU fallback of `leviathan-lm-eval` without `--device`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from leviathan import layout
from leviathan.checkpoint import files
from leviathan.data.loader import IGNORE_INDEX, val_batches
from leviathan.eval import checkpoint as checkpoint_module
from leviathan.eval.checkpoint import EvalModel, load_model, read_checkpoint
from leviathan.eval.perplexity import evaluate_shard
from leviathan.model import build_model

CTX = 64


def test_sums_equal_a_sequential_float64_reference(loaded, small_val: Path) -> None:
    """Per-id sums are added one token after the other in shard order (the old CPU numbers,
    bit for bit), whatever the device: numpy's unbuffered np.add.at is the reference."""
    _, em = loaded
    stats = evaluate_shard(em, small_val, vocab="gpt2", context=CTX, batch_size=4)
    ref_sum = np.zeros(em.vocab_size, dtype=np.float64)
    ref_n = np.zeros(em.vocab_size, dtype=np.int64)
    for x, y in val_batches(small_val, context=CTX, batch_size=4, vocab="gpt2"):
        losses = em.token_losses(x, y).numpy()
        keep = y.numpy() != IGNORE_INDEX
        np.add.at(ref_sum, y.numpy()[keep], losses[keep].astype(np.float64))
        np.add.at(ref_n, y.numpy()[keep], 1)
    assert np.array_equal(stats.loss_sum, ref_sum)
    assert np.array_equal(stats.count, ref_n)


def test_weights_are_loaded_once_into_the_model(runs, monkeypatch) -> None:
    """The model's parameters are the tensors read from the file (no second copy), and the
    model computes what a model built and then filled with load_state_dict computes."""
    from safetensors.torch import load_file

    read: dict[str, torch.Tensor] = {}

    def spy(path, device="cpu"):  # type: ignore[no-untyped-def]
        out = load_file(path, device=device)
        read.update(out)
        return out

    monkeypatch.setattr(checkpoint_module, "load_file", spy)
    for variant in ("tied", "leviathan"):
        read.clear()
        ckpt = read_checkpoint(runs[variant])
        model = load_model(ckpt, "cpu")
        params = dict(model.named_parameters())
        assert read
        assert all(
            params[name].data_ptr() == t.data_ptr() for name, t in read.items() if name in params
        )
        reference = build_model(ckpt.model_config, "cpu")
        reference.load_state_dict(load_file(ckpt.path / files.WEIGHTS))
        reference.eval()
        x = torch.randint(0, ckpt.model_config.vocab_size, (2, CTX))
        with torch.no_grad():
            assert torch.equal(
                EvalModel(model).token_losses(x, x), EvalModel(reference).token_losses(x, x)
            )


class _Stop(Exception):
    pass


class _Failing:
    """An EvalModel that dies after `after` batches (what a kill does to the process)."""

    def __init__(self, model: EvalModel, after: int) -> None:
        self.model, self.left = model, after

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def token_losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.left == 0:
            raise _Stop
        self.left -= 1
        return self.model.token_losses(x, y)


def test_an_interrupted_pass_continues_to_the_same_numbers(
    loaded, small_val: Path, tmp_path: Path
) -> None:
    _, em = loaded
    opts: dict[str, Any] = dict(vocab="gpt2", context=CTX, batch_size=3, keep_token_losses=True)
    whole = evaluate_shard(em, small_val, **opts)
    partial = tmp_path / "p.npz"
    with pytest.raises(_Stop):
        evaluate_shard(_Failing(em, 5), small_val, partial=partial, persist_seconds=0, **opts)  # type: ignore[arg-type]
    with np.load(partial) as z:  # saved after each of the 5 batches done
        assert int(z["windows_done"]) == 5 * 3
    # another key (another checkpoint or data) never continues from these sums
    other = evaluate_shard(em, small_val, partial=partial, partial_key="other", **opts)
    assert other.resumed_windows == 0
    with pytest.raises(_Stop):
        evaluate_shard(_Failing(em, 5), small_val, partial=partial, persist_seconds=0, **opts)  # type: ignore[arg-type]
    rerun = evaluate_shard(em, small_val, partial=partial, **opts)
    assert rerun.resumed_windows == 2 * 5 * 3  # two interrupted passes, one after the other
    assert np.array_equal(rerun.loss_sum, whole.loss_sum)
    assert np.array_equal(rerun.count, whole.count)
    assert np.array_equal(rerun.token_losses, whole.token_losses)  # type: ignore[arg-type]


@pytest.mark.slow  # two CPU passes over the sample per kind of damage (~15-40 s each)
@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_a_damaged_partial_file_is_set_aside_and_the_pass_starts_over(
    loaded, small_val: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    """Running sums that cannot be read back (a torn write, flipped bytes, another file) are
    set aside with a WARNING and the pass runs from the start to the uninterrupted numbers,
    instead of failing every rerun."""
    import logging

    _, em = loaded
    opts: dict[str, Any] = dict(vocab="gpt2", context=CTX, batch_size=3)
    whole = evaluate_shard(em, small_val, **opts)
    partial = tmp_path / "p.npz"
    with pytest.raises(_Stop):
        evaluate_shard(_Failing(em, 4), small_val, partial=partial, persist_seconds=0, **opts)  # type: ignore[arg-type]
    data = bytearray(partial.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":  # the zip's central directory, at its end
        for i in range(len(data) - 40, len(data) - 10):
            data[i] ^= 0xFF
    else:
        data = bytearray(b"not a zip file at all\n" * 10)
    partial.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="leviathan.eval.perplexity"):
        rerun = evaluate_shard(em, small_val, partial=partial, **opts)
    assert f"{partial}: cannot be read back" in caplog.text
    assert rerun.resumed_windows == 0
    assert np.array_equal(rerun.loss_sum, whole.loss_sum)
    assert np.array_equal(rerun.count, whole.count)
    assert layout.damaged(partial).read_bytes() == bytes(data)  # kept for a look


CHILD = """
import sys, time
from leviathan.eval.checkpoint import EvalModel
from leviathan.study.actions import evaluate
slow = float(sys.argv[5])
if slow:
    fast = EvalModel.token_losses
    def token_losses(self, x, y):
        time.sleep(slow)
        return fast(self, x, y)
    EvalModel.token_losses = token_losses
config = {"evaluate": {"val": {"batch_size": 2, "persist_seconds": 0}}}
evaluate("val", sys.argv[1], sys.argv[2], config, val=sys.argv[3], counts=sys.argv[4])
"""


def _child(run: Path, out: Path, val: Path, counts: Path, slow: float) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [str(run), str(out), str(val), str(counts), str(slow)]
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, *args], env=env, text=True, stderr=subprocess.PIPE
    )


def _numbers(path: Path) -> dict[str, Any]:
    """The results of a `val` output without its timings and its resume record."""
    results = json.loads(path.read_text())["results"]
    for key in ("seconds", "tokens_per_s", "resumed_windows"):
        results["overall"].pop(key)
    return results


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_evaluation_reruns_to_an_uninterrupted_runs_numbers(
    runs, gpt2_shards: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    """A real `val` evaluation (the workflow's step) in a subprocess, killed part-way; the
    rerun continues from the running sums and writes the numbers of an uninterrupted run."""
    val, counts = gpt2_shards / "val.bin", gpt2_shards / "counts.npy"
    ref = tmp_path / "ref" / "val.json"
    done = _child(runs["leviathan"], ref, val, counts, 0.0)
    assert done.wait(timeout=600) == 0, done.stderr.read() if done.stderr else ""
    out = tmp_path / "killed" / "val.json"
    partial = layout.eval_partial(out)
    child = _child(runs["leviathan"], out, val, counts, 0.2)
    deadline = time.time() + 600
    while time.time() < deadline and child.poll() is None:
        if partial.is_file():
            with np.load(partial) as z:
                if int(z["windows_done"]) >= 4:
                    break
        time.sleep(0.05)
    assert child.poll() is None, "the evaluation ended before it could be killed"
    child.send_signal(sig)
    assert child.wait(timeout=60) != 0
    assert not out.exists()
    assert partial.is_file()
    with np.load(partial) as z:
        saved = int(z["windows_done"])
    rerun = _child(runs["leviathan"], out, val, counts, 0.0)
    assert rerun.wait(timeout=600) == 0, rerun.stderr.read() if rerun.stderr else ""
    resumed = json.loads(out.read_text())["results"]["overall"]["resumed_windows"]
    assert resumed >= saved > 0
    assert _numbers(out) == _numbers(ref)
    assert not partial.exists()  # removed once the output is written


def test_lm_eval_answers_a_rerun_from_its_request_cache(
    loaded, task_files, tmp_path: Path, monkeypatch
) -> None:
    """Every request answered is in lm-eval's cache: a rerun computes none and reports the
    same numbers."""
    from leviathan.eval.config import LmEvalConfig
    from leviathan.eval.lm_eval_adapter import LeviathanLM
    from leviathan.eval.lm_eval_tasks import run_lm_eval

    ckpt, em = loaded
    cfg = LmEvalConfig(
        tasks=("piqa",),
        data={"piqa": {"data_files": task_files["piqa"]}},
        bootstrap_iters=0,
        batch_size=4,
    )
    cache = str(tmp_path / "cache")
    first = run_lm_eval(ckpt, em, cfg, cache=cache)
    assert list(tmp_path.glob("cache*.db"))
    computed: list[int] = []
    real = LeviathanLM._loglikelihood_tokens

    def counting(self, requests, *args, **kwargs):  # type: ignore[no-untyped-def]
        computed.append(len(requests))
        return real(self, requests, *args, **kwargs)

    monkeypatch.setattr(LeviathanLM, "_loglikelihood_tokens", counting)
    again = run_lm_eval(ckpt, em, cfg, cache=cache)
    assert sum(computed) == 0
    assert (
        again["results"]["tasks"]["piqa"]["metrics"] == first["results"]["tasks"]["piqa"]["metrics"]
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback where CUDA is absent")
def test_lm_eval_cli_without_device_falls_back_to_the_cpu(runs) -> None:
    """lm-eval's CLI, given no --device, passes its own default device (a CUDA one); as its
    HF model does, ours then runs on the CPU of a machine without CUDA."""
    import dataclasses

    from lm_eval.api.registry import get_model
    from lm_eval.config.evaluate_config import EvaluatorConfig

    import leviathan.eval.lm_eval_adapter  # noqa: F401  (registers the model)

    default = next(f.default for f in dataclasses.fields(EvaluatorConfig) if f.name == "device")
    assert str(default).startswith("cuda")  # what lm-eval sends when --device is not given
    with pytest.warns(UserWarning, match="not on this machine"):
        lm = get_model("leviathan").create_from_arg_string(
            f"pretrained={runs['tied']}", {"batch_size": None, "device": default}
        )
    assert lm.model.device.type == "cpu"
    with pytest.raises(ValueError, match="CUDA is not available"):
        get_model("leviathan").create_from_arg_string(
            f"pretrained={runs['tied']}", {"device": "cuda"}
        )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_a_gpu_evaluation_job_without_cuda_fails_before_reading_weights(
    runs, gpt2_shards: Path, tmp_path: Path, monkeypatch
) -> None:
    from leviathan.study.actions import evaluate

    def no_read(*args: Any, **kwargs: Any) -> None:
        pytest.fail("the weights were read before the device was checked")

    monkeypatch.setattr(checkpoint_module, "load_file", no_read)
    monkeypatch.setattr(checkpoint_module, "sha256_file", no_read)
    config = {"eval_resources": {"micro": {"gpus": 1, "gpu_model": "h100"}}}
    with pytest.raises(RuntimeError, match="CUDA sees none"):
        evaluate("val", runs["tied"], tmp_path / "val.json", config, val=gpt2_shards / "val.bin")
