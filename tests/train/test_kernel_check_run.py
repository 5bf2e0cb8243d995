"""The kernel self-check in a training run and an evaluation, on CPU: LEV's native forward
broken on purpose (its launcher returns a wrong value) fails the check before the first step,
the run warns, trains on the plain path (the broken launcher is never called again; the
native backward still runs) and records the check in its checkpoints; with
runtime.kernel_check: error it stops before any step, one line and exit status 5. Evaluating
the trained run checks again, on the evaluation's own process."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leviathan.cli import main
from leviathan.eval.checkpoint import open_checkpoint
from leviathan.eval.results import envelope
from leviathan.io import read_json
from leviathan.model import kernel_use, lev_native
from leviathan.train.config import RuntimeConfig, ValidationConfig, train_config
from leviathan.train.errors import KERNEL_CHECK_EXIT
from leviathan.train.metrics_log import read_metrics
from leviathan.train.trainer import train

pytestmark = pytest.mark.skipif(not lev_native.available(), reason="no C compiler here")
STEPS = 2
FORWARD, BACKWARD = kernel_use.LEV_NATIVE_FORWARD, kernel_use.LEV_NATIVE_BACKWARD


@pytest.fixture(autouse=True)
def fresh_process() -> Iterator[None]:
    kernel_use.forget()
    yield
    kernel_use.forget()


def counted(monkeypatch: pytest.MonkeyPatch, name: str, *, wrong: bool) -> list[int]:
    """lev_native.<name> replaced by a counting wrapper; `wrong`: one element of its output
    (the forward's M) moved well beyond the check's tolerance."""
    true, calls = getattr(lev_native, name), []

    def launcher(*args: Any) -> Any:
        calls.append(1)
        out = true(*args)
        if wrong:
            out.view(-1)[0] += 0.1 * (1 + float(out.abs().max()))
        return out

    monkeypatch.setattr(lev_native, name, launcher)
    return calls


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    """The native forward broken, the backward counted: (forward calls, backward calls)."""
    return counted(monkeypatch, "spline_forward", wrong=True), counted(
        monkeypatch, "spline_backward", wrong=False
    )


@pytest.mark.slow  # two steps of a micro run and its evaluation's table: ~25 s on 2 cores
def test_a_run_with_a_broken_kernel_warns_trains_on_the_plain_path_and_records_it(
    gpt2_shards: Path,
    tmp_path: Path,
    broken: tuple[list[int], list[int]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    forward_calls, backward_calls = broken
    run_dir = tmp_path / "run"
    with caplog.at_level(logging.WARNING):
        train(
            train_config("micro", "gpt2", "leviathan", total_tokens=8 * 64 * STEPS),
            train_bins=[gpt2_shards / "train.bin"],
            val_bin=gpt2_shards / "val.bin",
            run_dir=run_dir,
            runtime=RuntimeConfig(progress=False, validation=ValidationConfig(every=0, windows=2)),
        )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        w.startswith(f"the {FORWARD} kernel failed its self-check on cpu (failed: M differs")
        for w in warnings
    ), warnings
    assert forward_calls == [1]  # the check's call: the steps took the plain path
    assert len(backward_calls) > 1  # the check's, and the steps' backward kernel
    rows = read_metrics(run_dir / "metrics.jsonl", "train")
    assert [r["step"] for r in rows] == [1, 2] and all(r["loss"] > 0 for r in rows)
    final = run_dir / "checkpoints" / "final"
    for record in (read_json(final / "state.json"), read_json(final / "model.safetensors.json")):
        check = record["env"]["kernel_check"]
        assert check["device"] == "cpu" and check["seconds"] >= 0
        assert check["kernels"][FORWARD].startswith("failed: M differs from the plain path")
        assert check["kernels"][BACKWARD] == "ok"
        assert check["kernels"][kernel_use.LEV_TRITON_FORWARD] == "not used"

    # the evaluation of that run checks in its own right: broken, the kernel is off again
    kernel_use.forget()
    ckpt, _ = open_checkpoint(run_dir, "cpu")
    out = envelope("val", checkpoint=ckpt, inputs=[], config={}, results={}, device="cpu")
    assert out["env"]["kernel_check"]["kernels"][FORWARD].startswith("failed: ")
    assert forward_calls == [1, 1]  # the evaluation's check; its table came from the plain path


def test_kernel_check_error_stops_the_run_before_any_step(
    gpt2_shards: Path,
    tmp_path: Path,
    broken: tuple[list[int], list[int]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_dir = tmp_path / "run"
    argv = [
        "train",
        "--scale",
        "micro",
        "--vocab",
        "gpt2",
        "--variant",
        "leviathan",
        "--train",
        str(gpt2_shards / "train.bin"),
        "--run-dir",
        str(run_dir),
        "--set",
        f"total_tokens={8 * 64 * STEPS}",
        "--runtime",
        "progress=false",
        "--runtime",
        "kernel_check=error",
    ]
    assert main(argv) == KERNEL_CHECK_EXIT
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        f"leviathan train: error: the {FORWARD} kernel failed its self-check on cpu (failed: "
    )
    assert line.endswith("set runtime.kernel_check: warn to run its plain torch path instead")
    assert not (run_dir / "metrics.jsonl").exists()
    assert not (run_dir / "checkpoints" / "final").exists()
