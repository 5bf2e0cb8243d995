"""The trainer's refusals, each with the text that tells the user what to do next.

`Preempted` (a signal, not an error) lives in `preemption.py`; a data loader refusing other
data raises `leviathan.data.loader.DataMismatchError`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


class NonFiniteLoss(RuntimeError):
    pass


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
    """A checkpoint trained with another config than the one asked for now, with the diff."""
    diff = "; ".join(
        f"{k}: checkpoint {theirs.get(k)!r} != now {ours.get(k)!r}"
        for k in sorted(set(theirs) | set(ours))
        if theirs.get(k) != ours.get(k)
    )
    return ConfigMismatch(
        f"refusing to resume from {checkpoint}: it was trained with a different config ("
        + diff
        + f"). Use the same config, or a new run directory (or delete {root})"
    )
