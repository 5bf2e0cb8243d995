"""An FSDP run's optimizer state on disk: DCP's shards in the checkpoint's `optim/` folder.

Such a checkpoint holds what the package describes, except that optim.pt is `files.SHARDS`:
DCP's `.metadata` and one `__<rank>_0.distcp` per rank, AdamW's moments with their global
shapes, keyed by parameter name (`get_optimizer_state_dict`). The weights are whole, so every
reader (evaluation, export, the audit) reads it as it reads a DDP run's; state.json records
`optim_format: dcp` and the manifest hashes every shard. Either mode resumes the other's
checkpoints: a run that does not shard reads the shards whole (`load_whole_optimizer`), and an
FSDP run reads a whole optimizer state on every rank and keeps its part (`by_name`).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)

from leviathan.checkpoint.files import RNG, STATE, shard_files, shards_dir
from leviathan.checkpoint.read import read_checkpoint_files

KEY = "optim"  # the optimizer state's key in DCP's state dict


def sharded_files(checkpoint: Path) -> list[str]:
    """What a sharded checkpoint's manifest hashes beside its weights."""
    return [RNG, STATE, *shard_files(checkpoint)]


def read_sharded(path: Path, weights: bool = True, device: str = "cpu") -> dict[str, Any]:
    """What a sharded checkpoint holds besides its optimizer shards: the train state, the RNG
    states and (`weights`) the whole weights; {} as the weights otherwise (a rank that gets
    them by broadcast)."""
    keys = ("model", "rng", "state") if weights else ("rng", "state")
    return {"model": {}, **read_checkpoint_files(path, device, keys), "path": path}


def load_whole_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer, path: Path) -> None:
    """Read the optimizer shards of sharded checkpoint `path` whole, into the optimizer of a
    model that is not sharded (one process, or DDP's every rank): DCP gathers each state
    tensor from the shards that hold its parts."""
    optim = get_optimizer_state_dict(model, optimizer)  # keyed by parameter name, as saved
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        dcp.load({KEY: optim}, checkpoint_id=str(shards_dir(path)), no_dist=True)
    set_optimizer_state_dict(model, optimizer, optim)


def load_shards(optim: dict[str, Any], path: Path) -> None:
    """Read this rank's part of checkpoint `path`'s shards into `optim` (the current sharding's
    state dict, in place: DCP reshards)."""
    dcp.load({KEY: optim}, checkpoint_id=str(shards_dir(path)))


def save_shards(optim: dict[str, Any], tmp: Path, group: Any) -> None:
    """Write this rank's part of the optimizer state into checkpoint folder `tmp`."""
    dcp.save({KEY: optim}, checkpoint_id=str(shards_dir(tmp)), process_group=group)


def by_name(whole: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """A whole optimizer state as `Optimizer.state_dict()` keys it (each parameter by its
    position over the groups) keyed as `current` (`get_optimizer_state_dict`) keys the same
    optimizer's: by parameter name, the groups' parameters in the same order."""
    names = [name for group in current["param_groups"] for name in group["params"]]
    state = {names[i]: value for i, value in whole["state"].items()}
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in whole["param_groups"]]
    return {"state": state, "param_groups": groups}
