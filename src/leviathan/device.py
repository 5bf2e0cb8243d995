"""Device selection shared by training and evaluation."""

from __future__ import annotations

import torch


def resolve_device(spec: str | torch.device | None, local_rank: int = 0) -> torch.device:
    """'auto' (or None): this rank's GPU if CUDA is available, else the CPU; 'cuda' without an
    index: this rank's GPU. A CUDA device where CUDA is missing is a ValueError saying so."""
    if spec is None or str(spec) == "auto":
        return torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(spec)!r}: CUDA is not available here; use cpu or auto")
    if device.type == "cuda" and device.index is None:
        device = torch.device(f"cuda:{local_rank}")
    return device
