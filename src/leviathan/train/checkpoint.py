"""Checkpoints: atomic directories, safe formats, newest-complete discovery, retention.

A checkpoint is a directory `<run>/checkpoints/step_<N>/` (or `final/`; names: leviathan.layout)
holding
  model.safetensors   the weights (safetensors: no pickle)
  optim.pt            optimizer state (loaded with torch.load(weights_only=True))
  rng.pt              torch CPU/CUDA, numpy and python RNG states (weights_only too)
  state.json          step, tokens, loader state (with its data fingerprint), the train and
                      model configs with the config fingerprint, code version, metrics
  model.safetensors.json
                      the manifest (kind "checkpoint", `leviathan.manifest`): sha256 of the
                      weights, the token shards trained and validated on (with the sha256
                      their manifests record), the train config and its sha256, state.json's
                      sha256, code, environment, start/end time. Never read when resuming.
It is written under a temporary name and renamed into place only when complete, so a
directory named `step_*`/`final` is always whole; `state.json` and then the manifest are
written last (the manifest records the final directory's path, not the temporary one).
"""

from __future__ import annotations

import datetime as _dt
import os
import random
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from leviathan.io import publish_dir, read_json, sha256_file, write_json
from leviathan.layout import FINAL, OPTIM, RNG, STATE, WEIGHTS, step_of
from leviathan.manifest import display_path, write_manifest

MANIFEST_KIND = "checkpoint"


@dataclass(frozen=True)
class ManifestInfo:
    """What a checkpoint's manifest records beyond the checkpoint itself."""

    inputs: Sequence[Mapping[str, str]]  # {"role", "path", "sha256"} of the token shards
    started: _dt.datetime | None = None  # when the training process began
    device: str | None = None


@dataclass(frozen=True)
class CheckpointRef:
    path: Path
    step: int


def _numpy_state() -> list[Any]:
    _, keys, pos, has_gauss, cached = np.random.get_state()  # type: ignore[misc]
    return [keys.tolist(), int(pos), int(has_gauss), float(cached)]


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


def save_checkpoint(
    root: Path,
    name: str,
    *,
    model_state: dict[str, torch.Tensor],
    optim_state: dict[str, Any],
    state: dict[str, Any],
    manifest: ManifestInfo | None = None,
) -> Path:
    """Write checkpoint `root/name` atomically (temp dir + rename) and return its path.

    With `manifest`, `model.safetensors.json` is written inside the temporary directory
    after state.json, so a visible checkpoint always has it.
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    tmp = root / f".{name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        save_file({k: v.detach().contiguous().cpu() for k, v in model_state.items()}, tmp / WEIGHTS)
        torch.save(optim_state, tmp / OPTIM)
        torch.save(rng_state(), tmp / RNG)
        write_json(tmp / STATE, state)
        if manifest is not None:
            _write_manifest(tmp, final, state, manifest)
        publish_dir(tmp, final)  # on disk, then renamed; an old `final` is replaced whole
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _write_manifest(tmp: Path, final: Path, state: dict[str, Any], info: ManifestInfo) -> None:
    write_manifest(
        tmp / WEIGHTS,
        kind=MANIFEST_KIND,
        recorded_path=final / WEIGHTS,
        inputs=info.inputs,
        config=state["train_config"],
        started=info.started,
        device=info.device,
        fields={
            "checkpoint_dir": display_path(final),
            "step": state["step"],
            "tokens": state["tokens"],
            "train_fingerprint": state["train_fingerprint"],
            "state_sha256": sha256_file(tmp / STATE),
            "model_config": state["model_config"],
        },
    )


def list_checkpoints(root: Path) -> list[CheckpointRef]:
    """Complete step checkpoints under `root`, oldest first (`final` not included)."""
    if not root.is_dir():
        return []
    refs = []
    for p in root.iterdir():
        step = step_of(p)
        if step is not None and p.is_dir() and (p / STATE).is_file():
            refs.append(CheckpointRef(p, step))
    return sorted(refs, key=lambda r: r.step)


def latest_checkpoint(root: Path) -> CheckpointRef | None:
    """The newest complete checkpoint: `final` if present, else the highest step."""
    final = root / FINAL
    if (final / STATE).is_file():
        return CheckpointRef(final, int(read_json(final / STATE)["step"]))
    refs = list_checkpoints(root)
    return refs[-1] if refs else None


def prune(root: Path, keep_last: int) -> None:
    """Keep the newest `keep_last` step checkpoints (and `final`); remove stale temp dirs."""
    refs = list_checkpoints(root)
    for ref in refs[: max(0, len(refs) - keep_last)]:
        shutil.rmtree(ref.path, ignore_errors=True)
    # leftovers of writers killed mid-write (another pid: never renamed into place)
    for p in root.iterdir():
        if (
            p.name.startswith(".")
            and p.name.endswith((".tmp", ".old"))
            and f".{os.getpid()}." not in p.name
        ):
            shutil.rmtree(p, ignore_errors=True)


def load_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Read a checkpoint directory: {'model', 'optim', 'rng', 'state'} (safe loaders only)."""
    if not (path / STATE).is_file():
        raise FileNotFoundError(f"{path}: not a complete checkpoint (no {STATE})")
    return {
        "model": load_file(path / WEIGHTS, device=str(device)),
        "optim": torch.load(path / OPTIM, map_location=device, weights_only=True),
        "rng": torch.load(path / RNG, weights_only=True),
        "state": read_json(path / STATE),
    }
