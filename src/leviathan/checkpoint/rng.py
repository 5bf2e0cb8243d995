"""The random generators' states a checkpoint records (its rng.pt), and their seeding."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def _numpy_state() -> list[Any]:
    _, keys, pos, has_gauss, cached = np.random.get_state()  # type: ignore[misc]
    return [keys.tolist(), int(pos), int(has_gauss), float(cached)]


def seed_rngs(seed: int) -> None:
    """Seed every generator a checkpoint records (torch, NumPy's and Python's global ones), so
    that two runs of a cell save the same `rng.pt` byte for byte, as they save the same weights."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": _numpy_state(),
        "python": [list(x) if isinstance(x, tuple) else x for x in random.getstate()],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state(("MT19937", np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
