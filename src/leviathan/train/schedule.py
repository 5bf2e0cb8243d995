"""Learning-rate schedule: linear warm-up, then cosine decay to min_lr_ratio of the peak."""

from __future__ import annotations

import math


def lr_at(step: int, *, peak: float, warmup: int, total: int, min_ratio: float) -> float:
    """LR of optimizer step `step` (0-based) of `total` steps."""
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    decay_steps = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / decay_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return peak * (min_ratio + (1.0 - min_ratio) * cosine)
