"""FSDP2, the second training mode (`runtime.parallel: fsdp`, docs/method.md §4): parameters,
gradients and AdamW's moments sharded over the ranks (`torch.distributed.fsdp.fully_shard`),
so that a rank holds 1/world of the 16 bytes per parameter DDP holds whole.

Groups. Each transformer block is one group (gathered for its forward, freed after it,
gathered again for its backward, its gradients reduce-scattered as soon as they exist; the
next block's gather overlaps the current one's compute). A generated input (LEV, or an MLP
ablation: ~1M parameters) is a group of its own, for its precision (below). The root group
holds the rest: the output head, the final norm, and a table input. The head is in the root
because the root's forward reads its weight outside any submodule call (the loss takes the
tensor, `LanguageModel.forward`), which only the root's gather covers; FSDP keeps the root
gathered from its forward through its backward, so the head's gradients are reduce-scattered
once, at the end of backward. A tied model's table is the head, so it stays in the root.

Mixed precision as in DDP: fp32 master weights (the shards, what AdamW updates), bf16 for
compute on CUDA (`MixedPrecisionPolicy(param_dtype=bf16)`, with the trainer's bf16 autocast
as before; inputs are not cast, so the residual stream stays fp32 as under DDP), gradients
reduced in fp32. The generated input's group gathers fp32 weights (no `param_dtype`): under
DDP its weights are fp32 and only autocast's matmuls take bf16 copies, so LEV's spline table
reaches its kernels in fp32; one policy for the whole root would hand them a bf16 table.
On CPU everything stays fp32.

Composition: activation checkpointing (`runtime.activation_checkpointing`) and regional
compile (`runtime.compile`) are applied to each block in place first, the checkpoint inside
the compiled code (`leviathan.train.regions.prepare_blocks`; the state dict's names are
unchanged), then the blocks are sharded, the generated input, the root last. Gradient
accumulation reduce-scatters every micro-batch (holding the unsharded gradients across
micro-batches would cost 2 bytes per parameter more at bf16).
"""

from __future__ import annotations

import contextlib
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

from leviathan.model.generated import GeneratedInput
from leviathan.train.distributed import DistInfo
from leviathan.train.regions import blocks, prepare_blocks

FP32 = MixedPrecisionPolicy(reduce_dtype=torch.float32, cast_forward_inputs=False)


def compute_dtype(device: torch.device, bf16: bool) -> torch.dtype | None:
    """The dtype of the blocks' and the root's gathered weights: bf16 on CUDA with `bf16`
    (the trainer's autocast), else None (fp32 as stored)."""
    return torch.bfloat16 if device.type == "cuda" and bf16 else None


def mixed_precision(param_dtype: torch.dtype | None) -> MixedPrecisionPolicy:
    """Compute copies of the weights in `param_dtype` (None: fp32), fp32 reductions."""
    return MixedPrecisionPolicy(
        param_dtype=param_dtype, reduce_dtype=torch.float32, cast_forward_inputs=False
    )


def generated_input(model: nn.Module) -> nn.Module | None:
    """The model's generated input (LEV, an MLP ablation), its own fp32 group; None for a
    table."""
    module = model.io.input
    return module if isinstance(module, GeneratedInput) else None


def shard_model(
    model: nn.Module,
    info: DistInfo,
    *,
    compile: bool = False,
    activation_checkpointing: bool = False,
    param_dtype: torch.dtype | None = None,
    **compile_options: Any,
) -> nn.Module:
    """Shard `model` in place over the ranks of `info`: each block and the root with compute
    copies in `param_dtype` (`compute_dtype`), the generated input in fp32. Each block is
    checkpointed and/or compiled in place first (`prepare_blocks`; `compile_options`:
    torch.compile's). Returns the model (now an FSDPModule)."""
    mesh = init_device_mesh(info.device.type, (info.world_size,))
    policy = mixed_precision(param_dtype)
    prepare_blocks(
        model, compile=compile, checkpointing=activation_checkpointing, **compile_options
    )
    for block in blocks(model):
        fully_shard(block, mesh=mesh, mp_policy=policy)
    lev = generated_input(model)
    if lev is not None:
        fully_shard(lev, mesh=mesh, mp_policy=FP32)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    register_fsdp_forward_method(model, "token_losses")  # evaluation's entry point
    return model


def is_sharded(model: nn.Module) -> bool:
    return isinstance(model, FSDPModule)


@contextlib.contextmanager
def root_gathered(model: nn.Module) -> Iterator[None]:
    """The root group (the head, the final norm) and the generated input's (LEV) gathered on
    every rank inside, for what reads them outside a forward (LEV's health statistics); a
    no-op unsharded. Collective."""
    groups = [m for m in (model, generated_input(model)) if isinstance(m, FSDPModule)]
    for group in groups:
        group.unshard()
    try:
        yield
    finally:
        for group in groups:
            group.reshard()


def local_value(t: Any) -> Any:
    """A DTensor's full value (a collective where it is sharded), any other value itself: the
    gradient norm FSDP's clipping returns."""
    return t.full_tensor() if isinstance(t, DTensor) else t
