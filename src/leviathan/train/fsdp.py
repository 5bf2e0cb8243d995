"""FSDP2, the second training mode (`runtime.parallel: fsdp`, docs/method.md §4): parameters,
gradients and AdamW's moments sharded over the ranks (`torch.distributed.fsdp.fully_shard`),
so that a rank holds 1/world of the 16 bytes per parameter DDP holds whole.

Groups. Each transformer block is one group (gathered for its forward, freed after it,
gathered again for its backward, its gradients reduce-scattered as soon as they exist; the
next block's gather overlaps the current one's compute). The root group holds the rest: the
variant's input (LEV's ~1.2M parameters, or a table), the final norm and the output head.
LEV and the head are in the root because the root's forward reads them outside any submodule
call (the loss takes the head's weight tensor, `LanguageModel.forward`), which only the root's
gather covers; FSDP keeps the root gathered from its forward through its backward, so LEV's and
the head's gradients are reduce-scattered once, at the end of backward. A group of its own for
LEV would add a collective's latency for a few MB.

Mixed precision as in DDP: fp32 master weights (the shards, what AdamW updates), bf16 for
compute on CUDA (`MixedPrecisionPolicy(param_dtype=bf16)`, with the trainer's bf16 autocast
as before; inputs are not cast, so the residual stream stays fp32 as under DDP), gradients
reduced in fp32. On CPU everything stays fp32.

Composition: activation checkpointing (`runtime.activation_checkpointing`) replaces each
block's forward in place (the state dict's names are unchanged), then each block is compiled
in place (regional compile: `torch.compile` of one block, the graph reused by all), then
sharded; the root last. Gradient accumulation reduce-scatters every micro-batch (holding the
unsharded gradients across micro-batches would cost 2 bytes per parameter more at bf16).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import (
    FSDPModule,
    MixedPrecisionPolicy,
    fully_shard,
    register_fsdp_forward_method,
)
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import checkpoint

from leviathan.train.distributed import DistInfo
from leviathan.train.regions import compile_regions


def blocks(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a LanguageModel, in order: one FSDP group each."""
    return list(model.backbone.blocks)


def checkpoint_activations(block: nn.Module) -> None:
    """Recompute `block`'s activations in backward (non-reentrant), in place: its forward is
    wrapped, its parameters keep their names."""
    forward = block.forward
    block.forward = functools.partial(checkpoint, forward, use_reentrant=False)  # type: ignore[method-assign]


def mixed_precision(info: DistInfo, bf16: bool) -> MixedPrecisionPolicy:
    """bf16 compute copies of the weights on CUDA (fp32 shards, fp32 reductions); fp32 on CPU."""
    if info.device.type == "cuda" and bf16:
        return MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False
        )
    return MixedPrecisionPolicy(cast_forward_inputs=False)


def shard_model(
    model: nn.Module,
    info: DistInfo,
    *,
    compile: bool = False,
    activation_checkpointing: bool = False,
    bf16: bool = True,
) -> nn.Module:
    """Shard `model` in place over the ranks of `info` (each block, then the root); with
    `compile`, each block is compiled in place first. Returns the model (now an FSDPModule)."""
    mesh = init_device_mesh(info.device.type, (info.world_size,))
    policy = mixed_precision(info, bf16)
    for block in blocks(model):
        if activation_checkpointing:
            checkpoint_activations(block)
    if compile:
        compile_regions(model)  # the same regional compile as under DDP (train/regions.py)
    for block in blocks(model):
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    register_fsdp_forward_method(model, "token_losses")  # evaluation's entry point
    return model


def is_sharded(model: nn.Module) -> bool:
    return isinstance(model, FSDPModule)


@contextlib.contextmanager
def root_gathered(model: nn.Module) -> Iterator[None]:
    """The root group (LEV, the head, the final norm) gathered on every rank inside, for what
    reads them outside a forward (LEV's health statistics); a no-op unsharded. Collective."""
    if not isinstance(model, FSDPModule):
        yield
        return
    model.unshard()
    try:
        yield
    finally:
        model.reshard()


def local_value(t: Any) -> Any:
    """A DTensor's full value (a collective where it is sharded), any other value itself: the
    gradient norm FSDP's clipping returns."""
    return t.full_tensor() if isinstance(t, DTensor) else t
