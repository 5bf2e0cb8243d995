"""Cross-entropy over a large vocabulary without [tokens x V] logits for the whole batch.

`linear_cross_entropy(hidden, weight, targets)` equals
`F.cross_entropy(hidden @ weight.T, targets, ignore_index=-100)` (mean over counted
targets) but computes the logits `chunk_rows` tokens at a time. When gradients are needed
it computes them during the same pass (softmax - one-hot, then the two matmuls) and keeps
only d hidden and d weight, so peak memory is one chunk of logits, whatever the batch.
Logits and softmax are fp32; the matmuls follow autocast (bf16 on GPU).
`token_losses` gives the per-token losses (no gradient) for evaluation.

Chunk sizes follow the device (`leviathan.device.chunk_elems`): `chunk_elems` on a CPU, a
fixed share of the memory on a GPU (a few chunks per step). The head's gradient is formed
once per step, never rewritten chunk by chunk: under the GPU rule every chunk's softmax
gradient G is kept (in the matmul dtype, N x V: 3.3 GB in bf16 at the 400m micro-batch of
8,192 tokens and o200k) and d weight = G^T hidden is one matmul at the end (fp32
accumulation inside the GEMM, the product a plain Linear's backward computes); where G would
exceed `HEAD_GRAD_SHARE` chunk buffers, and under the CPU rule, each chunk adds its product in
place (`addmm_`, no fp32 temporary of V x D). A weight padded beyond the vocabulary
(`n_classes` < its rows, for aligned matmul shapes) has its extra logits masked out: they
take no probability and get no gradient.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from leviathan.device import chunk_elems as device_chunk_elems
from leviathan.device import uses_gpu_policy

IGNORE_INDEX = -100
DEFAULT_CHUNK_ELEMS = 1 << 25  # logits held at once on a CPU: 128 MiB in fp32
HEAD_GRAD_SHARE = 4  # G (all chunks' softmax gradients) may hold this many chunk buffers


def _rows_per_chunk(vocab: int, chunk_elems: int) -> int:
    return max(1, chunk_elems // vocab)


def _chunk_logits(h: torch.Tensor, weight: torch.Tensor, n_classes: int) -> torch.Tensor:
    logits = (h @ weight.t()).float()
    if n_classes < weight.shape[0]:
        logits[:, n_classes:] = float("-inf")  # padding rows of the head: never a class
    return logits


def _matmul_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype a matmul of `t` computes in here (autocast's, if it is on)."""
    if torch.is_autocast_enabled(t.device.type):
        return torch.get_autocast_dtype(t.device.type)
    return t.dtype


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        chunk_elems: int,
        n_classes: int,
    ) -> torch.Tensor:
        N = hidden.shape[0]
        valid = targets != IGNORE_INDEX
        denom = valid.sum().clamp_min(1)  # a tensor: no host sync (was int(valid.sum()))
        need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        grad_h = torch.zeros_like(hidden) if need_grad else None
        budget = device_chunk_elems(hidden.device, chunk_elems)
        step = _rows_per_chunk(weight.shape[0], budget)
        g_dtype = _matmul_dtype(weight)
        # the head's gradient: one product at the end (G kept), or added chunk by chunk
        keep_g = uses_gpu_policy(hidden.device) and N * weight.shape[0] <= HEAD_GRAD_SHARE * budget
        G = torch.empty(N, weight.shape[0], dtype=g_dtype, device=hidden.device) if keep_g else None
        grad_w = None
        if need_grad and not keep_g:
            grad_w = torch.zeros_like(weight, dtype=torch.float32)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, N, step):
            h, t, v = (
                hidden[start : start + step],
                targets[start : start + step],
                valid[start : start + step],
            )
            logits = _chunk_logits(h, weight, n_classes)
            lse = torch.logsumexp(logits, dim=-1)
            safe_t = torch.where(v, t, 0)
            picked = logits.gather(1, safe_t.unsqueeze(1)).squeeze(1)
            total += torch.where(v, lse - picked, 0.0).sum()
            if need_grad:
                probs = logits.sub_(lse.unsqueeze(1)).exp_()  # softmax, in place
                probs[torch.arange(len(t), device=t.device), safe_t] -= 1.0
                probs.mul_(v.unsqueeze(1).to(probs.dtype))
                g = probs.to(weight.dtype) if weight.dtype != torch.float32 else probs
                grad_h[start : start + step] = (g @ weight).to(hidden.dtype)  # type: ignore[index]
                if G is not None:
                    G[start : start + step] = g
                else:
                    _add_head_grad(grad_w, g, h)  # type: ignore[arg-type]
        if need_grad:
            if G is not None:
                grad_w = (G.t() @ hidden).float()
            ctx.save_for_backward(grad_h.div_(denom), grad_w.div_(denom))  # type: ignore[union-attr]
        ctx.weight_dtype = weight.dtype  # type: ignore[attr-defined]
        return total / denom

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad_out: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None, None]:
        grad_h, grad_w = ctx.saved_tensors  # type: ignore[attr-defined]
        return (
            grad_h * grad_out.to(grad_h.dtype) if ctx.needs_input_grad[0] else None,
            (grad_w * grad_out).to(ctx.weight_dtype) if ctx.needs_input_grad[1] else None,  # type: ignore[attr-defined]
            None,
            None,
            None,
        )


def _add_head_grad(grad_w: torch.Tensor, g: torch.Tensor, h: torch.Tensor) -> None:
    """grad_w (fp32) += g^T h: in place in the matmul where the dtypes allow (fp32), else
    through the matmul dtype's product."""
    if g.dtype == h.dtype == torch.float32 and not torch.is_autocast_enabled(g.device.type):
        grad_w.addmm_(g.t(), h)
    else:
        grad_w += (g.t() @ h).float()


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_elems: int = DEFAULT_CHUNK_ELEMS,
    n_classes: int | None = None,
) -> torch.Tensor:
    """Mean cross-entropy (nats) of `targets` [N] under logits `hidden` [N, D] @ `weight` [V, D].T,
    the classes being the first `n_classes` rows of `weight` (default: all)."""
    if hidden.shape[0] != targets.shape[0]:
        raise ValueError(f"hidden has {hidden.shape[0]} rows but targets {targets.shape[0]}")
    n_classes = weight.shape[0] if n_classes is None else n_classes
    if not (torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)):
        # no gradient wanted: skip the gradient work the fused function does in its forward
        n_valid = (targets != IGNORE_INDEX).sum().clamp_min(1)
        return token_losses(hidden, weight, targets, chunk_elems, n_classes).sum() / n_valid
    return _LinearCrossEntropy.apply(hidden, weight, targets, chunk_elems, n_classes)


@torch.no_grad()
def token_losses(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_elems: int = DEFAULT_CHUNK_ELEMS,
    n_classes: int | None = None,
) -> torch.Tensor:
    """Per-token cross-entropy [N] in fp32 (0 where the target is ignored); the classes are
    the first `n_classes` rows of `weight` (default: all)."""
    n_classes = weight.shape[0] if n_classes is None else n_classes
    out = torch.zeros(hidden.shape[0], dtype=torch.float32, device=hidden.device)
    step = _rows_per_chunk(weight.shape[0], device_chunk_elems(hidden.device, chunk_elems))
    for start in range(0, hidden.shape[0], step):
        t = targets[start : start + step]
        v = t != IGNORE_INDEX
        logits = _chunk_logits(hidden[start : start + step], weight, n_classes)
        picked = logits.gather(1, torch.where(v, t, 0).unsqueeze(1)).squeeze(1)
        out[start : start + step] = torch.where(v, torch.logsumexp(logits, -1) - picked, 0.0)
    return out
