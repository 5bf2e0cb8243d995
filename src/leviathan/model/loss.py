"""Cross-entropy over a large vocabulary without [tokens x V] logits for the whole batch.

`linear_cross_entropy(hidden, weight, targets)` equals
`F.cross_entropy(hidden @ weight.T, targets, ignore_index=-100)` (mean over counted
targets) but computes the logits `chunk_rows` tokens at a time. When gradients are needed
it computes them during the same pass (softmax - one-hot, then the two matmuls) and keeps
only d hidden and d weight, so peak memory is one chunk of logits, whatever the batch.
Logits and softmax are fp32; the matmuls follow autocast (bf16 on GPU).
`token_losses` gives the per-token losses (no gradient) for evaluation.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

IGNORE_INDEX = -100
DEFAULT_CHUNK_ELEMS = 1 << 25  # logits held at once: 128 MiB in fp32


def _rows_per_chunk(vocab: int, chunk_elems: int) -> int:
    return max(1, chunk_elems // vocab)


def _chunk_logits(h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return (h @ weight.t()).float()


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        chunk_elems: int,
    ) -> torch.Tensor:
        N = hidden.shape[0]
        valid = targets != IGNORE_INDEX
        denom = valid.sum().clamp_min(1)  # a tensor: no host sync (was int(valid.sum()))
        need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        grad_h = torch.zeros_like(hidden) if need_grad else None
        grad_w = torch.zeros_like(weight, dtype=torch.float32) if need_grad else None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        step = _rows_per_chunk(weight.shape[0], chunk_elems)
        for start in range(0, N, step):
            h, t, v = (
                hidden[start : start + step],
                targets[start : start + step],
                valid[start : start + step],
            )
            logits = _chunk_logits(h, weight)
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
                grad_w += (g.t() @ h).float()  # type: ignore[operator]
        if need_grad:
            ctx.save_for_backward(grad_h.div_(denom), grad_w.div_(denom))  # type: ignore[union-attr]
        ctx.weight_dtype = weight.dtype  # type: ignore[attr-defined]
        return total / denom

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


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_elems: int = DEFAULT_CHUNK_ELEMS,
) -> torch.Tensor:
    """Mean cross-entropy (nats) of `targets` [N] under logits `hidden` [N, D] @ `weight` [V, D].T."""
    if hidden.shape[0] != targets.shape[0]:
        raise ValueError(f"hidden has {hidden.shape[0]} rows but targets {targets.shape[0]}")
    if not (torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)):
        # no gradient wanted: skip the gradient work the fused function does in its forward
        n_valid = (targets != IGNORE_INDEX).sum().clamp_min(1)
        return token_losses(hidden, weight, targets, chunk_elems).sum() / n_valid
    return _LinearCrossEntropy.apply(hidden, weight, targets, chunk_elems)


@torch.no_grad()
def token_losses(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_elems: int = DEFAULT_CHUNK_ELEMS,
) -> torch.Tensor:
    """Per-token cross-entropy [N] in fp32 (0 where the target is ignored)."""
    out = torch.zeros(hidden.shape[0], dtype=torch.float32, device=hidden.device)
    step = _rows_per_chunk(weight.shape[0], chunk_elems)
    for start in range(0, hidden.shape[0], step):
        t = targets[start : start + step]
        v = t != IGNORE_INDEX
        logits = _chunk_logits(hidden[start : start + step], weight)
        picked = logits.gather(1, torch.where(v, t, 0).unsqueeze(1)).squeeze(1)
        out[start : start + step] = torch.where(v, torch.logsumexp(logits, -1) - picked, 0.0)
    return out
