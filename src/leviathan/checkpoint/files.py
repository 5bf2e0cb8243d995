"""The names of a checkpoint's files: the one place that spells them.

A run's checkpoints live in `<run>/checkpoints/`: `step_<N>/` (N with 8 digits), `final/`
and `kept/step_<N>/`. Each checkpoint directory holds the files named here; every writer,
reader and checker asks this module for them (`leviathan.checkpoint`'s other modules, the
trainer, evaluation, export, the audit's walk, the study's status and the plan's sizes).
Torch-free and free of other imports of the package, so the workflow's parse reads it.
"""

from __future__ import annotations

import os
from pathlib import Path

PathLike = str | os.PathLike[str]

# ---------------------------------------------------------------- a run's checkpoint folders
CHECKPOINTS = "checkpoints"
FINAL = "final"  # the checkpoint written at the end of training
STEP_PREFIX = "step_"  # step checkpoints: step_<N, 8 digits>
KEPT = "kept"  # kept/step_<N>/: log-spaced weights (runtime.checkpoint.keep_at), never pruned

# ---------------------------------------------------------------- a checkpoint's files
WEIGHTS = "model.safetensors"  # the weights (safetensors: no pickle); its manifest beside it
STATE = "state.json"  # step, tokens, loader state, configs: written last, marks a whole checkpoint
OPTIM = "optim.pt"  # the whole optimizer state (torch.load(weights_only=True))
RNG = "rng.pt"  # torch CPU/CUDA, NumPy and Python RNG states (weights_only too)
SHARDS = "optim"  # an FSDP run's optimizer state instead of optim.pt: DCP's files, one per rank
# state.json's `optim_format` of a checkpoint whose optimizer state is SHARDS (absent: OPTIM)
SHARDED_FORMAT = "dcp"

WEIGHT_BYTES = 4  # the weights are fp32
OPTIMIZER_SLOTS = 2  # AdamW keeps exp_avg and exp_avg_sq: two fp32 tensors per parameter

# the kinds of their manifests (leviathan.manifest)
CHECKPOINT_KIND = "checkpoint"
KEPT_KIND = "kept_checkpoint"

HASHED_FILES = (OPTIM, RNG, STATE)  # the manifest's `files`, beside its artifact (the weights)
KEPT_FILES = (WEIGHTS, STATE)  # a kept checkpoint's: evaluated, never resumed from


def checkpoint_bytes(params: int) -> int:
    """One checkpoint on disk: fp32 weights and AdamW's two fp32 moments per parameter."""
    return params * WEIGHT_BYTES * (1 + OPTIMIZER_SLOTS)


def kept_bytes(params: int) -> int:
    """One kept checkpoint on disk: the fp32 weights."""
    return params * WEIGHT_BYTES


def checkpoints_dir(run: PathLike) -> Path:
    return Path(run) / CHECKPOINTS


def final_dir(run: PathLike) -> Path:
    return checkpoints_dir(run) / FINAL


def step_dir(checkpoints: PathLike, step: int) -> Path:
    return Path(checkpoints) / f"{STEP_PREFIX}{step:08d}"


def kept_dir(checkpoints: PathLike) -> Path:
    """The kept checkpoints of a run (`runtime.checkpoint.keep_at`): `checkpoints/kept/step_<N>/`,
    each the weights, a small state.json and their manifest; outside retention's reach."""
    return Path(checkpoints) / KEPT


def step_of(checkpoint: PathLike) -> int | None:
    """The step of a step checkpoint directory's name (None for any other name)."""
    name = Path(checkpoint).name
    if not name.startswith(STEP_PREFIX):
        return None
    try:
        return int(name[len(STEP_PREFIX) :])
    except ValueError:
        return None


def weights_file(checkpoint: PathLike) -> Path:
    return Path(checkpoint) / WEIGHTS


def state_file(checkpoint: PathLike) -> Path:
    return Path(checkpoint) / STATE


def optim_file(checkpoint: PathLike) -> Path:
    return Path(checkpoint) / OPTIM


def rng_file(checkpoint: PathLike) -> Path:
    return Path(checkpoint) / RNG


def shards_dir(checkpoint: PathLike) -> Path:
    """An FSDP run's optimizer shards (DCP's `.metadata` and `__<rank>_0.distcp` files)."""
    return Path(checkpoint) / SHARDS


def shard_files(checkpoint: PathLike) -> list[str]:
    """The files of a checkpoint's sharded optimizer state, relative to the checkpoint."""
    root = shards_dir(checkpoint)
    return sorted(str(p.relative_to(checkpoint)) for p in root.rglob("*") if p.is_file())


def is_complete(checkpoint: PathLike) -> bool:
    """Whether `checkpoint` holds its state and weights (what evaluation reads)."""
    return state_file(checkpoint).is_file() and weights_file(checkpoint).is_file()
