"""torchrun integration: one code path for CPU, one GPU and many (DDP; NCCL or gloo)."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from leviathan.device import resolve_device
from leviathan.train.regions import prepare_blocks


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed(device_spec: str, timeout_s: int = 1800) -> DistInfo:
    """Join the torchrun process group if WORLD_SIZE > 1 (NCCL on GPU, gloo on CPU), with an
    explicit timeout for its rendezvous and collectives (not the backend's default)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_spec, local_rank)
    if world > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo",
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    return DistInfo(rank, world, local_rank, device)


def all_reduce_sum(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def wrap_model(
    model: nn.Module,
    info: DistInfo,
    compile: bool,
    stepping: bool = True,
    checkpointing: bool = False,
) -> tuple[DistributedDataParallel | None, Any]:
    """(the DDP wrapper or None, the module a training step calls). With `compile`, each
    transformer block is compiled in place first (`compile_regions`: one compiled code for
    every layer; LEV and the loss stay eager), with `checkpointing` its activations recomputed
    in backward, the checkpoint inside the compiled code (`prepare_blocks`); then DDP wraps
    the model: the compiled regions are inside DDP, whose gradient hooks see the same
    parameters and all-reduce each bucket as backward reaches it. A finished run (`stepping`
    False) is none of these."""
    if not stepping:
        return None, model
    prepare_blocks(model, compile=compile, checkpointing=checkpointing)
    ddp = None
    if info.enabled:
        cuda = info.device.type == "cuda"
        ddp = DistributedDataParallel(model, device_ids=[info.device] if cuda else None)
    return ddp, ddp or model
