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


# ---------------------------------------------------------------- kept checkpoints
KEEP_AT_FORMS = "'' (none), log2, log2:UNTIL, log2:UNTIL:EVERY or a list of steps (0,100,1000)"


def keep_steps(spec: str, max_steps: int) -> list[int]:
    """The steps (0: the initial weights; N: after N optimizer steps) whose weights a run keeps
    (`runtime.checkpoint.keep_at`), those up to `max_steps`, ascending.

    `log2`: 0 and every power of two; `log2:UNTIL`: the powers of two up to UNTIL; `log2:UNTIL:EVERY`:
    also every multiple of EVERY (Pythia's schedule is `log2:512:1000`: 0, 1, 2, 4, ..., 512,
    1000, 2000, ...); otherwise a comma-separated list of steps. A malformed spec raises a
    ValueError naming the forms."""
    text = spec.strip()
    if not text:
        return []
    try:
        if text == "log2" or text.startswith("log2:"):
            parts = [int(p) for p in text.split(":")[1:]]
            if len(parts) > 2 or any(p < 1 for p in parts):
                raise ValueError(text)
            until = parts[0] if parts else max_steps
            steps = {0} | {1 << k for k in range(until.bit_length()) if 1 << k <= until}
            if len(parts) == 2:
                steps |= set(range(parts[1], max_steps + 1, parts[1]))
        else:
            steps = {int(p) for p in text.split(",")}
            if any(s < 0 for s in steps):
                raise ValueError(text)
    except ValueError:
        raise ValueError(
            f"runtime checkpoint.keep_at={spec!r} is not a schedule: use {KEEP_AT_FORMS}"
        ) from None
    return sorted(s for s in steps if s <= max_steps)
