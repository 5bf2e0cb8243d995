"""The trainer's refusals, each with the text that tells the user what to do next.

`Preempted` (a signal, not an error) lives in `preemption.py`; a data loader refusing other
data raises `leviathan.data.loader.DataMismatchError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leviathan.values import flatten

# Exit status of `leviathan train` after an out-of-memory error (docs/usage.md: "Exit statuses"). A
# workflow retry of the same micro_batch stops at once with the same line (leviathan.study.rules.train).
OUT_OF_MEMORY_EXIT = 4
# Exit status of `leviathan train` when a kernel fails its self-check under
# runtime.kernel_check: error (leviathan.model.kernel_check)
KERNEL_CHECK_EXIT = 5


class NonFiniteLoss(RuntimeError):
    pass


@dataclass(frozen=True)
class OutOfMemoryAt:
    """Where a training step ran out of memory: what its refusal names, and what a memory
    model reads to name a micro-batch that fits (the model config, ranks, parallel)."""

    scale: str
    micro_batch: int
    per_rank: int
    step: int
    device: str
    last_good: str
    model_cfg: Any = None
    ranks: int = 1
    parallel: str = "ddp"


class OutOfMemory(RuntimeError):
    """The device ran out of memory in a training step: the one-line refusal, the facts a
    retry reads back from the run's out-of-memory record (`record`), and where it happened
    (`at`: a caller that knows the GPU's memory names a fitting micro-batch, `with_fitting`)."""

    def __init__(self, message: str, record: dict[str, Any], at: OutOfMemoryAt) -> None:
        super().__init__(message)
        self.record = record
        self.at = at

    def with_fitting(self, fitting: int) -> OutOfMemory:
        """The same refusal naming `fitting`, the largest micro-batch a memory model predicts
        to fit the device (where it is smaller than the one that ran out)."""
        return refusal(self.at, predicted=fitting)


def smaller_micro_batch(micro_batch: int, per_rank: int) -> int | None:
    """The micro-batch to try after one of `micro_batch` sequences ran out of memory where the
    memory model has no prediction (a device it does not know): the largest divisor of the
    per-rank batch at most half of it (None below 2)."""
    for size in range(micro_batch // 2, 0, -1):
        if per_rank % size == 0:
            return size
    return None


def out_of_memory(
    scale: str,
    micro_batch: int,
    per_rank: int,
    *,
    step: int,
    device: str,
    last_good: str,
    predicted: int | None = None,
    model_cfg: Any = None,
    ranks: int = 1,
    parallel: str = "ddp",
) -> OutOfMemory:
    """`refusal` of an out-of-memory error at `step` (the job's facts: `OutOfMemoryAt`)."""
    at = OutOfMemoryAt(
        scale, micro_batch, per_rank, step, device, last_good, model_cfg, ranks, parallel
    )
    return refusal(at, predicted)


def refusal(at: OutOfMemoryAt, predicted: int | None = None) -> OutOfMemory:
    """The refusal of an out-of-memory error at optimizer step `at.step`: one line naming the
    workflow key (train.<scale>.micro_batch) and a smaller value (`predicted`: the largest
    a memory model says fits the device, where one knows it; else a halving), or what else
    to do."""
    key = f"train.{at.scale}.micro_batch"
    fitting = predicted if predicted is not None and predicted < at.micro_batch else None
    smaller = fitting or smaller_micro_batch(at.micro_batch, at.per_rank)
    fix = (
        f"set {key}: {smaller} in the workflow config (leviathan train: --set "
        f"micro_batch={smaller}) and rerun; micro_batch is no part of the run's identity, so "
        f"it resumes from {at.last_good}"
        if smaller
        else f"{key} is already 1: use a GPU with more memory or more GPUs per step "
        f"(resources.{at.scale}.gpus)"
    )
    basis = " (the largest the memory model predicts to fit)" if fitting else ""
    message = (
        f"out of memory on {at.device} at step {at.step} with {key}={at.micro_batch} "
        f"(per-device batch {at.per_rank}): {fix}{basis}"
    )
    record = {
        "step": at.step,
        "micro_batch": at.micro_batch,
        "device": at.device,
        "message": message,
    }
    return OutOfMemory(message, record, at)


class ConfigMismatch(ValueError):
    pass


class NoIntactCheckpoint(ValueError):
    """Every checkpoint of a run was damaged and set aside."""

    def __init__(self, root: Path, set_aside: list[str]) -> None:
        super().__init__(
            f"no intact checkpoint left in {root}: every one was damaged and set aside "
            f"({', '.join(set_aside) or 'see the warnings'}); rerun to start the run afresh, "
            "or put an intact copy back from a backup"
        )


def _cause(last_good: str, resumed_from: str | None) -> str:
    """What to suspect and do: the checkpoint just resumed from, else the lr or the data."""
    if resumed_from:
        return (
            f"It is the first step after resuming from {resumed_from}: that checkpoint may be "
            "damaged (its files match their manifest, so it was saved so). Move it aside to "
            "resume from the one before, or restart"
        )
    return (
        f"Last good checkpoint: {last_good}. Lower train.lr or check the data, "
        "then resume or restart"
    )


def check_loss(
    loss: float, *, step: int, lr: float, last_good: str, resumed_from: str | None = None
) -> None:
    """Refuse a non-finite training loss (before the update: nothing applied, nothing saved).
    `resumed_from`: the checkpoint restored just before this step, the likelier culprit."""
    if not math.isfinite(loss):
        raise NonFiniteLoss(
            f"non-finite training loss {loss} at step {step} (lr {lr:.3g}); nothing was saved. "
            + _cause(last_good, resumed_from)
        )


def check_grad_norm(
    grad_norm: float,
    *,
    step: int,
    loss: float,
    lr: float,
    last_good: str,
    resumed_from: str | None = None,
) -> None:
    """Refuse a non-finite gradient norm (the same value on every rank: all-reduced grads)."""
    if not math.isfinite(grad_norm):
        raise NonFiniteLoss(
            f"non-finite gradient norm {grad_norm} at step {step} (loss {loss:.4f}, "
            f"lr {lr:.3g}); the update was not applied and nothing was saved. "
            + _cause(last_good, resumed_from)
        )


def config_mismatch(
    checkpoint: Path, theirs: dict[str, Any], ours: dict[str, Any], root: Path
) -> ConfigMismatch:
    """A checkpoint trained with another config than the one asked for now, with the diff
    (nested keys named in full: model_overrides.lev.knot_scale)."""
    theirs, ours = flatten(theirs), flatten(ours)
    diff = "; ".join(
        f"{k}: checkpoint {theirs.get(k)!r} != now {ours.get(k)!r}"
        for k in sorted(set(theirs) | set(ours))
        if theirs.get(k) != ours.get(k)
    )
    if not diff:  # the same values: the fingerprint was computed by another version's rule
        return ConfigMismatch(
            f"refusing to resume from {checkpoint}: its config fingerprint was computed by "
            f"another version of leviathan (the values are the same). Retrain it "
            f"(`leviathan retrain`, or a new run directory, or delete {root})"
        )
    return ConfigMismatch(
        f"refusing to resume from {checkpoint}: it was trained with a different config ("
        + diff
        + f"). Use the same config, or a new run directory (or delete {root})"
    )
