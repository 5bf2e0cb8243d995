"""The CPU rule (`TiledCrossEntropy`): the logits of up to `TILE_ROWS` tokens by `chunk_elems //
rows` classes at a time (2 MiB in fp32 by default: the tile stays in the core's caches through
its few passes), the CPU's version of the kernels' tiling. A first sweep over the classes keeps
an online logsumexp and the target's logit per token; a second recomputes each tile and turns
it into its share of G = softmax - onehot in place, scaled by 1 / the counted tokens (one pass:
exp(logit - lse - log(1 / n)), a masked token's shift is +inf), then adds G w into d hidden and
writes G^T h into the tile's rows of d weight. One more matmul than keeping the logits, but no
[rows x V] logits in memory and no page faults: at the default run's o200k head on one core,
forward and backward in 0.65x the time of 128 MiB chunks of all V, the forward alone in 0.30x
(`bench/bench_loss.py`, BENCHMARKS.md "Loss on a CPU"). Under torch.compile the same sums are
one custom op, `leviathan::tiled_cross_entropy` (one node: no tile loop unrolled into the graph,
no graph break; the loss and gradients of the eager code bit for bit).
"""

from __future__ import annotations

from typing import Any

import torch

from leviathan.model.loss_head import IGNORE_INDEX, GradientsInForward, matmul_weight

TILE_ROWS = 512  # tokens per tile (each sweep reads the head once per TILE_ROWS tokens)


def _tile_shape(n_rows: int, n_classes: int, chunk_elems: int) -> tuple[int, int]:
    """(tokens, classes) of the CPU rule's tiles: up to TILE_ROWS tokens, `chunk_elems` logits."""
    rows = max(1, min(n_rows, TILE_ROWS, chunk_elems))
    return rows, max(1, min(n_classes, chunk_elems // rows))


def _tiling(
    hidden: torch.Tensor, w: torch.Tensor, chunk_elems: int
) -> tuple[int, int, torch.Tensor]:
    """The tile's (tokens, classes) and the one fp32 buffer every tile of the call is written
    into, for the head `w` as the matmuls take it (`matmul_weight`)."""
    rows, cols = _tile_shape(hidden.shape[0], w.shape[0], chunk_elems)
    return rows, cols, torch.empty(rows * cols, device=hidden.device)


def _tile_logits(h: torch.Tensor, w: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    """fp32 logits h @ w.T of one tile: written into `buffer` (flat, reused tile after tile)
    where the matmul is fp32, else (another matmul dtype) a new tile."""
    if h.dtype == w.dtype == buffer.dtype:
        return torch.mm(h, w.t(), out=buffer[: h.shape[0] * w.shape[0]].view(h.shape[0], -1))
    return (h.to(w.dtype) @ w.t()).float()


def _in_tile(t: torch.Tensor, start: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Which targets fall in the tile's classes [start, start + width), and their column."""
    return (t >= start) & (t < start + width), (t - start).clamp(0, width - 1)


def _tiled_scores(
    h: torch.Tensor, w: torch.Tensor, t: torch.Tensor, cols: int, buffer: torch.Tensor, argmax: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One sweep over the classes for the tokens `h`: their logsumexp (online: a running max
    and the sum of exp(logit - max), rescaled when the max grows), the target's logit (0 where
    ignored) and, if asked, the logits' argmax (the first of equal ones, as torch's)."""
    n = h.shape[0]
    top = torch.full((n,), float("-inf"), device=h.device)
    total = torch.zeros(n, device=h.device)
    picked = torch.zeros(n, device=h.device)
    best = torch.zeros(n, dtype=torch.long, device=h.device) if argmax else None
    for start in range(0, w.shape[0], cols):
        logits = _tile_logits(h, w[start : start + cols], buffer)
        inside, col = _in_tile(t, start, logits.shape[1])
        picked = torch.where(inside, logits.gather(1, col.unsqueeze(1)).squeeze(1), picked)
        if best is None:
            tile_top = logits.amax(1)
        else:
            tile_top, where = logits.max(1)
            best = torch.where(tile_top > top, where + start, best)
        new_top = torch.maximum(top, tile_top)
        total.mul_((top - new_top).exp_()).add_(logits.sub_(new_top.unsqueeze(1)).exp_().sum(1))
        top = new_top
    return top + total.log(), picked, best


def tiled_losses(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_elems: int,
    argmax: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token losses [N] (0 where ignored) and, if asked, whether each target is the argmax:
    the CPU rule's forward, tile by tile."""
    w = matmul_weight(weight)
    rows, cols, buffer = _tiling(hidden, w, chunk_elems)
    n = hidden.shape[0]
    out = torch.zeros(n, device=hidden.device)
    greedy = torch.zeros(n, dtype=torch.bool, device=hidden.device) if argmax else None
    for start in range(0, n, rows):
        r = slice(start, start + rows)
        t = targets[r]
        lse, picked, best = _tiled_scores(hidden[r], w, t, cols, buffer, argmax)
        out[r] = torch.where(t != IGNORE_INDEX, lse - picked, 0.0)
        if greedy is not None and best is not None:
            greedy[r] = best == t
    return out, greedy


def _tiled_loss_and_grads(
    hidden: torch.Tensor, w: torch.Tensor, targets: torch.Tensor, chunk_elems: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The CPU rule's mean loss, d hidden (hidden's dtype) and d w (fp32) for a unit upstream
    gradient, tile by tile (above); `w` is the head as the matmuls take it."""
    rows, cols, buffer = _tiling(hidden, w, chunk_elems)
    n = hidden.shape[0]
    valid = targets != IGNORE_INDEX
    counted = valid.sum().clamp_min(1)
    # log of each token's weight in the mean: -log(counted), -inf where ignored
    log_share = torch.where(valid, -counted.float().log(), float("-inf"))
    fp32 = hidden.dtype == w.dtype == torch.float32
    grad_h = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
    grad_w = torch.empty(w.shape, dtype=torch.float32, device=w.device)
    total = torch.zeros((), dtype=torch.float32, device=hidden.device)
    for first in range(0, n, rows):
        r = slice(first, first + rows)
        h, t = hidden[r], targets[r]
        lse, picked, _ = _tiled_scores(h, w, t, cols, buffer, argmax=False)
        total += torch.where(valid[r], lse - picked, 0.0).sum()
        shift = (lse - log_share[r]).unsqueeze(1)
        share = log_share[r].exp()
        for start in range(0, w.shape[0], cols):
            wc, dw = w[start : start + cols], grad_w[start : start + cols]
            g = _tile_logits(h, wc, buffer).sub_(shift).exp_()  # softmax / counted
            inside, col = _in_tile(t, start, g.shape[1])
            g.scatter_add_(1, col.unsqueeze(1), torch.where(inside, -share, 0.0).unsqueeze(1))
            if fp32:
                grad_h[r].addmm_(g, wc)
                if first:
                    dw.addmm_(g.t(), h)
                else:
                    torch.mm(g.t(), h, out=dw)
                continue
            g = g.to(w.dtype)  # another matmul dtype (float64 in tests): fp32 sums
            grad_h[r] += (g @ wc).float()
            head = (g.t() @ h.to(w.dtype)).float()
            if first:
                dw.add_(head)
            else:
                dw.copy_(head)
    if n == 0:
        grad_w.zero_()
    return total / counted, grad_h.to(hidden.dtype), grad_w


class TiledCrossEntropy(GradientsInForward):
    """The CPU rule's loss, tile by tile (above), as autograd runs it eagerly."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        chunk_elems: int,
    ) -> torch.Tensor:
        loss, grad_h, grad_w = _tiled_loss_and_grads(
            hidden, matmul_weight(weight), targets, chunk_elems
        )
        ctx.save_for_backward(grad_h, grad_w)
        ctx.weight_dtype = weight.dtype  # type: ignore[attr-defined]
        return loss


@torch.library.custom_op("leviathan::tiled_cross_entropy", mutates_args=())
def tiled_op(
    hidden: torch.Tensor, w: torch.Tensor, targets: torch.Tensor, chunk_elems: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`_tiled_loss_and_grads` as one opaque op: what torch.compile traces on a CPU (one node,
    the tile loops not unrolled into the graph; the same sums as the eager loss)."""
    return _tiled_loss_and_grads(hidden, w, targets, chunk_elems)


@tiled_op.register_fake
def _(hidden: torch.Tensor, w: torch.Tensor, *_: Any) -> tuple[torch.Tensor, ...]:
    loss = hidden.new_empty((), dtype=torch.float32)
    return loss, torch.empty_like(hidden), w.new_empty(w.shape, dtype=torch.float32)


def _tiled_op_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, ...]) -> None:
    ctx.mark_non_differentiable(output[1], output[2])
    ctx.save_for_backward(output[1], output[2])
    ctx.weight_dtype = inputs[1].dtype


def _tiled_op_backward(ctx: Any, grad_out: torch.Tensor, *_: Any) -> tuple[Any, ...]:
    grad_h, grad_w = ctx.saved_tensors
    return grad_h * grad_out.to(grad_h.dtype), (grad_w * grad_out).to(ctx.weight_dtype), None, None


tiled_op.register_autograd(_tiled_op_backward, setup_context=_tiled_op_setup)
