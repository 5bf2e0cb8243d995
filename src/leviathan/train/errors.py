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


def check_loss(loss: float, *, step: int, lr: float, last_good: str) -> None:
    """Refuse a non-finite training loss (before the update: nothing applied, nothing saved)."""
    if not math.isfinite(loss):
        raise NonFiniteLoss(
            f"non-finite training loss {loss} at step {step} "
            f"(lr {lr:.3g}); nothing was saved. Last good checkpoint: {last_good}. "
            "Lower train.lr or check the data, then resume or restart"
        )


def check_grad_norm(grad_norm: float, *, step: int, loss: float, lr: float, last_good: str) -> None:
    """Refuse a non-finite gradient norm (the same value on every rank: all-reduced grads)."""
    if not math.isfinite(grad_norm):
        raise NonFiniteLoss(
            f"non-finite gradient norm {grad_norm} at step {step} (loss {loss:.4f}, "
            f"lr {lr:.3g}); the update was not applied and nothing was saved. Last good "
            f"checkpoint: {last_good}. Lower train.lr or check the data, then resume or restart"
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
