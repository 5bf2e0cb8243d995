"""What every path of the loss shares: the ignored target, the default logits budget, the
head as the matmuls take it (padded under the GPU rule), a chunk's logits, and the autograd
form of a loss that computes its gradients in its forward (`leviathan.model.loss`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from leviathan.device import uses_gpu_policy
from leviathan.model.transformer import activation_dtype

IGNORE_INDEX = -100
# logits held at once on a CPU (one tile: 2 MiB in fp32); the GPU rule's chunks take a share
# of the device's memory instead (`leviathan.device.chunk_elems`)
DEFAULT_CHUNK_ELEMS = 1 << 19
HEAD_ROWS_MULTIPLE = 128  # GPU rule: the head's rows padded to a multiple of this


def rows_per_chunk(vocab: int, chunk_elems: int) -> int:
    return max(1, chunk_elems // vocab)


def matmul_weight(weight: torch.Tensor) -> torch.Tensor:
    """`weight` as the loss's matmuls take it: in the matmul dtype, and under the GPU rule
    with zero rows appended up to a multiple of HEAD_ROWS_MULTIPLE."""
    w = weight.to(activation_dtype(weight))
    pad = -weight.shape[0] % HEAD_ROWS_MULTIPLE
    return F.pad(w, (0, 0, 0, pad)) if pad and uses_gpu_policy(weight.device) else w


def chunk_logits(h: torch.Tensor, w: torch.Tensor, n_classes: int) -> torch.Tensor:
    logits = (h @ w.t()).float()
    if n_classes < w.shape[0]:
        logits[:, n_classes:] = float("-inf")  # padding rows: never a class
    return logits


class GradientsInForward(torch.autograd.Function):
    """A loss whose forward computes d hidden and d weight (fp32, for a unit upstream
    gradient) and saves them: the backward scales them by the upstream gradient."""

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad_out: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None]:
        grad_h, grad_w = ctx.saved_tensors  # type: ignore[attr-defined]
        return (
            grad_h * grad_out.to(grad_h.dtype) if ctx.needs_input_grad[0] else None,
            (grad_w * grad_out).to(ctx.weight_dtype) if ctx.needs_input_grad[1] else None,  # type: ignore[attr-defined]
            None,
            None,
        )
