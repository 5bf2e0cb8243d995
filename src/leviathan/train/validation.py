"""Validation loss: the mean loss over fixed validation windows, every target counted once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from leviathan.data.loader import val_batches
from leviathan.model import LanguageModel
from leviathan.train.distributed import DistInfo, all_reduce_sum


def evaluate_val_loss(
    model: LanguageModel,
    val_bin: Path,
    *,
    context: int,
    batch: int,
    windows: int,
    info: DistInfo,
    vocab: str,
    autocast: Any,
) -> float:
    """Mean loss over the first `windows` fixed validation windows (0: all), every target once."""
    was_training = model.training
    model.eval()
    sums = torch.zeros(2, dtype=torch.float64, device=info.device)
    batches = val_batches(
        val_bin,
        context=context,
        batch_size=batch,
        rank=info.rank,
        world_size=info.world_size,
        max_windows=windows or None,
        vocab=vocab,
    )
    with torch.no_grad():
        for x, y in batches:
            x, y = x.to(info.device), y.to(info.device)
            with autocast:
                losses = model.token_losses(x, y)
            sums[0] += losses.double().sum()
            sums[1] += (y != -100).sum()
    all_reduce_sum(sums, info)
    model.train(was_training)
    return float(sums[0] / sums[1].clamp_min(1))
