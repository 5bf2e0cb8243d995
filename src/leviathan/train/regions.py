"""Regional compile of the training model: each transformer block compiled in place, the
rest eager (docs/gpu.md, "Compile time: whole model vs one block").

Every `Block` gets `nn.Module.compile`: the blocks share one class, so one `forward` code
object, and Dynamo traces it once and reuses that compiled code for every layer (its guards
see the parameters as inputs, not constants), so compile time does not grow with the depth.
The module stays itself (no `_orig_mod` wrapper): state_dict keys, checkpoints and DDP's
view of the parameters are unchanged. Left eager, on purpose:
  * LEV (and the other generated inputs): its spline product is already one custom op
    (`leviathan::spline_product`, Triton on a GPU), and what surrounds it runs once per
    *distinct* id after `torch.unique`, whose count changes every batch: compiled, that is
    a graph break plus dynamic shapes (a recompile at step 2, as the whole-model compile
    shows), for a part that is ~2% of the step (docs/method.md §2 costs);
  * the loss: on a GPU it is two custom ops (`leviathan::lse_and_pick`, its backward) and
    cuBLAS GEMMs, nothing left for inductor to fuse but a cast and a sum; the CPU's chunked
    loss is a Python loop that Dynamo unrolls (+32 graph nodes per chunk, graph size and
    compile time growing with the micro-batch), for no CPU speed that matters.
Neither is traced, so the device-memory query they make (`leviathan.device.device_memory`)
never runs in traced code; it is asked here, once per device, before anything compiles.

Activation checkpointing (`runtime.activation_checkpointing`) is applied here too, inside the
compiled region: a checkpointed block's forward calls `torch.utils.checkpoint.checkpoint` on
the block's own forward, so the compiled code traces the checkpoint call, which Dynamo keeps
as one higher-order op (`tag_activation_checkpoint`) whose body is recomputed in backward.
Wrapped the other way round (checkpoint outside the compiled call), Dynamo compiles nothing:
`checkpoint` itself is excluded from tracing, and the run would be silently eager.
"""

from __future__ import annotations

import types
from typing import Any

import torch._dynamo.utils as dynamo_utils
from torch import nn
from torch.utils.checkpoint import checkpoint

from leviathan.device import device_memory
from leviathan.model.transformer import Block

# Dynamo's timers that hold a compile: each frame's (trace, forward graph, backend) and the
# backward graph's, compiled at the first backward
COMPILE_TIMERS = ("_compile.compile_inner", "backward._backward_impl")


def blocks(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of `model`, in order."""
    return [m for m in model.modules() if isinstance(m, Block)]


def _checkpointed_forward(block: nn.Module, *args: Any) -> Any:
    """The block's own forward under non-reentrant checkpointing (one code object for every
    block, so one compiled graph serves them all)."""
    return checkpoint(type(block).forward, block, *args, use_reentrant=False)


def checkpoint_activations(model: nn.Module) -> None:
    """Recompute each transformer block's activations in backward instead of keeping them, in
    place: the block's forward is replaced, its parameters keep their names. Compiled
    afterwards (`compile_regions`), the checkpoint is inside the compiled code."""
    for block in blocks(model):
        block.forward = types.MethodType(_checkpointed_forward, block)  # type: ignore[method-assign]


def is_checkpointed(block: nn.Module) -> bool:
    forward = block.__dict__.get("forward")
    return getattr(forward, "__func__", None) is _checkpointed_forward


def prepare_blocks(model: nn.Module, *, compile: bool, checkpointing: bool, **options: Any) -> None:
    """The training step's blocks: each checkpointed (`checkpointing`), then each compiled
    in place (`compile`; `options`: torch.compile's), the checkpoint inside the compiled code."""
    if checkpointing:
        checkpoint_activations(model)
    if compile:
        compile_regions(model, **options)


def compile_regions(model: nn.Module, **options: Any) -> list[nn.Module]:
    """Compile every transformer block of `model` in place (`options`: torch.compile's, e.g.
    backend="aot_eager"); returns the compiled blocks. The device's memory is asked first
    (cached per device), so no traced code asks the driver for it."""
    for p in model.parameters():
        device_memory(p.device)
        break
    compiled = blocks(model)
    for block in compiled:
        block.compile(**options)
    return compiled


def compile_seconds() -> float:
    """Seconds (wall) Dynamo's timers hold for every compile of this process since its last
    `torch._dynamo.reset()`: the difference across a step is that step's compile time."""
    metrics = dynamo_utils.compilation_time_metrics
    return sum(sum(metrics.get(name, [])) for name in COMPILE_TIMERS)
