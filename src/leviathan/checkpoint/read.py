"""Read a checkpoint's files with safe loaders only (safetensors; torch.load(weights_only=True)).

A file that cannot be read or parsed raises `DamagedCheckpoint` (integrity.py), as a file that
does not hash as its manifest records does.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from leviathan.checkpoint.files import OPTIM, RNG, STATE, WEIGHTS, state_file
from leviathan.checkpoint.integrity import DamagedCheckpoint
from leviathan.io import read_json


def _loaders(device: str) -> dict[str, tuple[str, Callable[[Path], Any]]]:
    return {
        "model": (WEIGHTS, lambda p: load_file(p, device=device)),
        "optim": (OPTIM, lambda p: torch.load(p, map_location=device, weights_only=True)),
        "rng": (RNG, lambda p: torch.load(p, weights_only=True)),
        "state": (STATE, read_json),
    }


def read_checkpoint_files(
    checkpoint: Path, device: torch.device | str = "cpu", keys: Collection[str] | None = None
) -> dict[str, Any]:
    """{'model', 'optim', 'rng', 'state'} of a checkpoint (those of `keys` only, where given;
    safe loaders only); a file that cannot be read or parsed raises `DamagedCheckpoint`."""
    loaded: dict[str, Any] = {}
    for key, (name, load) in _loaders(str(device)).items():
        if keys is not None and key not in keys:
            continue
        try:
            loaded[key] = load(checkpoint / name)
        except FileNotFoundError as exc:
            raise DamagedCheckpoint(checkpoint, name, "missing") from exc
        except Exception as exc:  # noqa: BLE001 - each loader has its own errors (torch, safetensors, json)
            raise DamagedCheckpoint(checkpoint, name, f"unreadable ({exc})") from exc
    if not isinstance(loaded["state"], dict) or not isinstance(loaded["state"].get("step"), int):
        raise DamagedCheckpoint(checkpoint, STATE, "unreadable (no step)")
    return loaded


def load_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Read a checkpoint directory: {'model', 'optim', 'rng', 'state'} (safe loaders only)."""
    if not state_file(path).is_file():
        raise FileNotFoundError(f"{path}: not a complete checkpoint (no {STATE})")
    return read_checkpoint_files(path, device)
