"""Cross-entropy over a large vocabulary without [tokens x V] logits for the whole batch.

`linear_cross_entropy(hidden, weight, targets)` equals
`F.cross_entropy(hidden @ weight.T, targets, ignore_index=-100)` (mean over counted
targets) but computes the logits `chunk_rows` tokens at a time. When gradients are needed
the chunked code computes them during the same pass (softmax - one-hot, then the two
matmuls) and keeps only d hidden and d weight, so peak memory is one chunk of logits,
whatever the batch. Logits and softmax are fp32; the matmuls follow autocast (bf16 on GPU).
`token_losses` gives the per-token losses (no gradient) for evaluation;
`token_losses_and_greedy` adds whether each target is the argmax (lm-eval's requests).

Which code runs follows the device (`leviathan.device`).

The GPU path (the GPU rule on a CUDA device, `uses_fused_kernels`): the Triton kernels of
`leviathan.model.loss_kernel`, wrapped as custom ops. The forward forms the logits tile by tile
in registers (fp32 accumulators of the bf16 products), keeps an online logsumexp over the
vocabulary and the target's logit, and writes two floats per token; the backward recomputes
each tile and writes G = softmax - onehot (scaled by the upstream gradient) once, in bf16,
which the two cuBLAS GEMMs (dh = G w, dw = G^T h) read. 6 bytes per logit
(`leviathan.cost.loss_bytes` models the whole loss; counted 7.79 at the 400m micro-batch, against
70.7 for the chunked code below: BENCHMARKS.md, "Bytes per step"). Chosen over:
  * a maintained fused linear-cross-entropy (Liger Kernel, Cut Cross-Entropy): neither is in
    the GPU image (torch, NumPy, safetensors, tiktoken, PyYAML, tqdm and Triton only). Liger
    writes each chunk's bf16 logits and overwrites them with G (~12 bytes per logit, logits
    rounded to bf16); CCE's backward adds into dh and dw under spin locks, in the order the
    programs happen to run (not deterministic), and by default filters small gradients,
    zeroing the rare rows this study measures;
  * the chunked loss compiled with its loop kept rolled: inductor fuses the softmax passes,
    but the fp32 logits are still written by the GEMM and read back (~12 bytes per logit by
    the roofline's estimate) and each chunk is still its own GEMMs.
It is deterministic (each partial logsumexp, each G element by one program, reduced in a
fixed order; cuBLAS GEMMs), one node each way to torch.compile whatever the batch (no chunk
loop), and its kernels run on CPU in Triton's interpreter (tests/model/test_loss_kernel.py:
against the float64 cross-entropy, padded head and ignore_index included). The logits it
reduces are more exact than the chunked code's under autocast (fp32 accumulators, not a bf16
product upcast). Memory: G of one micro-batch (6.6 GB in bf16 for the 400m one), formed in
groups of rows where it does not fit `HEAD_GRAD_SHARE` chunk buffers; the device's memory
is asked once per device (`leviathan.device.device_memory`, asked before anything compiles:
`leviathan.train.regions`), read in the backward only.

The CPU rule: `leviathan.model.loss_cpu` (tiles that stay in the core's caches).

The chunked loss (the GPU rule forced on a CPU): `chunk_elems` logits per chunk, each chunk of
all V. Forced to the GPU rule (what a GPU ran before the kernels):
  * a chunk holds a fixed share of the GPU's memory (a few chunks per step);
  * d weight is formed once per step, not rewritten chunk by chunk: every chunk's softmax
    gradient G is kept in the matmul dtype (at most `HEAD_GRAD_SHARE` chunk buffers' bytes,
    1/8 of the memory, else one product per group of chunks that fits) and d weight =
    G^T hidden is one matmul at the end, accumulated in fp32 inside the GEMM.
On both paths under the GPU rule the weight enters the matmuls with its rows zero-padded to a
multiple of `HEAD_ROWS_MULTIPLE` (V = 200,019 -> 200,064: tensor-core-aligned GEMMs). The copy
is the one autocast makes anyway (fp32 -> bf16); the padded logits are masked to -inf, so they
take no probability and give no gradient. The parameters, exports, parameter counts and
`logits()` stay unpadded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import torch

from leviathan.device import chunk_elems as device_chunk_elems
from leviathan.device import uses_gpu_policy
from leviathan.model import kernel_use
from leviathan.model.loss_cpu import TiledCrossEntropy, tiled_losses, tiled_op
from leviathan.model.loss_head import (
    DEFAULT_CHUNK_ELEMS,
    IGNORE_INDEX,
    GradientsInForward,
    chunk_logits,
    matmul_weight,
    rows_per_chunk,
)

LossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
HEAD_GRAD_SHARE = 8  # GPU rule: G may hold this many chunk buffers' bytes (1/8 of memory)


class _LinearCrossEntropy(GradientsInForward):
    """The GPU rule's chunked loss, forced on a CPU (the module docstring's last part)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        chunk_elems: int,
    ) -> torch.Tensor:
        N, V = hidden.shape[0], weight.shape[0]
        w = matmul_weight(weight)
        valid = targets != IGNORE_INDEX
        denom = valid.sum().clamp_min(1)  # a tensor, so that no host sync waits on the GPU
        grad_h = torch.zeros_like(hidden)
        budget = chunk_elems  # the device's budget, resolved by the caller (no query here)
        step = rows_per_chunk(w.shape[0], budget)
        # d weight: G^T H over groups of `group` rows (one group, one product, where G fits)
        group = _head_grad_rows(hidden.device, budget, w, step, N)
        G = torch.empty(group, w.shape[0], dtype=w.dtype, device=w.device) if group > step else None
        grad_w: torch.Tensor | None = None  # fp32, from the first product on
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, N, step):
            rows = slice(start, start + step)
            h, t, v = hidden[rows], targets[rows], valid[rows]
            logits = chunk_logits(h, w, V)
            lse = torch.logsumexp(logits, dim=-1)
            safe_t = torch.where(v, t, 0)
            picked = logits.gather(1, safe_t.unsqueeze(1)).squeeze(1)
            total += torch.where(v, lse - picked, 0.0).sum()
            probs = logits.sub_(lse.unsqueeze(1)).exp_()  # softmax, in place
            probs[torch.arange(len(t), device=t.device), safe_t] -= 1.0
            probs.mul_(v.unsqueeze(1).to(probs.dtype))
            g = probs.to(w.dtype)
            grad_h[rows] = (g @ w).to(hidden.dtype)
            if G is None:
                grad_w = _add_head_grad(grad_w, g, h)
                continue
            first = start - start % group  # this chunk's group: rows [first, first + group)
            G[start - first : start - first + len(t)] = g
            if start + len(t) in (N, first + group):  # the group is complete: one product
                rows = slice(first, start + len(t))
                grad_w = _add_head_grad(grad_w, G[: rows.stop - first], hidden[rows])
        if grad_w is None:  # no rows
            grad_w = torch.zeros(w.shape, dtype=torch.float32, device=w.device)
        ctx.save_for_backward(grad_h.div_(denom), grad_w[:V].div_(denom))
        ctx.weight_dtype = weight.dtype  # type: ignore[attr-defined]
        return total / denom


def _head_grad_rows(device: torch.device, budget: int, w: torch.Tensor, step: int, N: int) -> int:
    """Rows of G (softmax gradients, in w's dtype) per head-gradient product: one chunk under
    the CPU rule; under the GPU rule as many whole chunks as fit `HEAD_GRAD_SHARE` chunk
    buffers' bytes (all N rows at the study's micro-batches: one product per step)."""
    if not uses_gpu_policy(device):
        return step
    fit = HEAD_GRAD_SHARE * budget * 4 // (w.shape[0] * w.element_size())
    return min(N, max(step, fit // step * step))


def _add_head_grad(grad_w: torch.Tensor | None, g: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """grad_w (fp32) + g^T h: the product itself where grad_w is None (the first); else added
    in place by the matmul where both are fp32 (the CPU rule), or through the matmul dtype."""
    if grad_w is None:
        return (g.t() @ h.to(g.dtype)).float()
    if g.dtype == h.dtype == torch.float32:
        return grad_w.addmm_(g.t(), h)
    return grad_w.add_((g.t() @ h.to(g.dtype)).float())


def uses_fused_kernels(device: torch.device) -> bool:
    """Whether the loss on `device` runs the Triton kernels (`loss_kernel`): the GPU rule on
    a CUDA device, unless the forward kernel failed the run's self-check (`kernel_check`;
    where only the backward one failed, `linear_cross_entropy` keeps the chunked loss for
    gradients). The CPU rule, and the GPU rule forced on a CPU, keep the chunked loss."""
    return (
        device.type == "cuda"
        and uses_gpu_policy(device)
        and kernel_use.usable(kernel_use.LOSS_TRITON_FORWARD)
    )


def _takes_kernels(device: torch.device, grads: bool) -> bool:
    """Whether a loss on `device` runs the kernels: the forward one (`uses_fused_kernels`)
    and, where gradients are wanted, the backward one, unless it failed the self-check."""
    return uses_fused_kernels(device) and (
        not grads or kernel_use.usable(kernel_use.LOSS_TRITON_BACKWARD)
    )


_kernel_module: ModuleType | None = None  # `loss_kernel`, once imported and registered


def _kernels() -> ModuleType:
    """The kernels' module, imported (Triton with it) on first use, with the backward of its
    `lse_and_pick` registered. Done at import where CUDA is present, so that code traced by
    torch.compile only reads the global (Dynamo guards on it) and calls the registered ops."""
    global _kernel_module
    if _kernel_module is None:
        from leviathan.model import loss_kernel

        torch.library.register_autograd(
            "leviathan::lse_and_pick", _lse_and_pick_backward, setup_context=_lse_and_pick_setup
        )
        _kernel_module = loss_kernel
    return _kernel_module


def _lse_and_pick_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    h, w, targets, n_classes = inputs
    ctx.save_for_backward(h, w, targets, output[0])
    ctx.n_classes = n_classes


def _lse_and_pick_backward(
    ctx: Any, grad_lse: torch.Tensor | None, grad_picked: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, None, None]:
    """dh = G w and dw = G^T h, G = grad_lse * softmax + grad_picked * onehot (in w's
    dtype, from `softmax_grad_logits`), formed over groups of rows that fit the head-gradient
    budget (`_head_grad_rows`: one group at the study's micro-batches); across groups dw is
    summed in fp32. The device query runs here, traced by AOTAutograd only, never by Dynamo."""
    h, w, targets, lse = ctx.saved_tensors
    N = h.shape[0]
    a = torch.zeros_like(lse) if grad_lse is None else grad_lse
    b = torch.zeros_like(lse) if grad_picked is None else grad_picked
    budget = device_chunk_elems(h.device, DEFAULT_CHUNK_ELEMS)
    group = _head_grad_rows(h.device, budget, w, rows_per_chunk(w.shape[0], budget), max(N, 1))
    grad_logits = torch.ops.leviathan.softmax_grad_logits
    if group >= N:  # one G, one product each (the study's micro-batches)
        G = grad_logits(h, w, targets, lse, a, b, ctx.n_classes)
        return G @ w, G.t() @ h, None, None
    dh, dw = torch.empty_like(h), torch.zeros(w.shape, dtype=torch.float32, device=w.device)
    for start in range(0, N, group):
        rows = slice(start, start + group)
        G = grad_logits(h[rows], w, targets[rows], lse[rows], a[rows], b[rows], ctx.n_classes)
        dh[rows] = G @ w
        dw += (G.t() @ h[rows]).float()
    return dh, dw.to(w.dtype), None, None


def fused_linear_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """`linear_cross_entropy` by the Triton kernels (the GPU rule on CUDA; any device in
    tests, where a CPU runs them in Triton's interpreter): no logits in memory, G in bf16
    once, in the backward."""
    lse, picked = _fused_lse_and_pick(hidden, weight, targets)
    valid = targets != IGNORE_INDEX
    return torch.where(valid, lse - picked, 0.0).sum() / valid.sum().clamp_min(1)


def _fused_lse_and_pick(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    w = matmul_weight(weight)
    _kernels()
    return torch.ops.leviathan.lse_and_pick(hidden.to(w.dtype), w, targets, weight.shape[0])


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_elems: int = DEFAULT_CHUNK_ELEMS,
) -> torch.Tensor:
    """Mean cross-entropy (nats) of `targets` [N] under logits `hidden` [N, D] @ `weight` [V, D].T."""
    if hidden.shape[0] != targets.shape[0]:
        raise ValueError(f"hidden has {hidden.shape[0]} rows but targets {targets.shape[0]}")
    grads = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    if _takes_kernels(hidden.device, grads):
        return fused_linear_cross_entropy(hidden, weight, targets)
    if not grads:
        # no gradient wanted: skip the gradient work the fused function does in its forward
        n_valid = (targets != IGNORE_INDEX).sum().clamp_min(1)
        return token_losses(hidden, weight, targets, chunk_elems).sum() / n_valid
    if not uses_gpu_policy(hidden.device):
        if torch.compiler.is_compiling():  # one node, not the tile loops unrolled
            return tiled_op(hidden, matmul_weight(weight), targets, chunk_elems)[0]
        return TiledCrossEntropy.apply(hidden, weight, targets, chunk_elems)
    # the chunk budget is resolved here, outside the autograd Function that tracers enter
    budget = device_chunk_elems(hidden.device, chunk_elems)
    return _LinearCrossEntropy.apply(hidden, weight, targets, budget)


def _scored_chunks(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk_elems: int
) -> Iterator[tuple[slice, torch.Tensor, torch.Tensor]]:
    """(rows, fp32 logits of those rows, their per-token losses) chunk by chunk under the GPU
    rule (0 loss where the target is ignored); the CPU rule's are `tiled_losses`."""
    V, w = weight.shape[0], matmul_weight(weight)
    step = rows_per_chunk(w.shape[0], device_chunk_elems(hidden.device, chunk_elems))
    for start in range(0, hidden.shape[0], step):
        rows = slice(start, start + step)
        t = targets[rows]
        v = t != IGNORE_INDEX
        logits = chunk_logits(hidden[rows], w, V)
        picked = logits.gather(1, torch.where(v, t, 0).unsqueeze(1)).squeeze(1)
        yield rows, logits, torch.where(v, torch.logsumexp(logits, -1) - picked, 0.0)


@torch.no_grad()
def token_losses(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_elems: int = DEFAULT_CHUNK_ELEMS,
) -> torch.Tensor:
    """Per-token cross-entropy [N] in fp32 (0 where the target is ignored); by the fused
    forward kernel (no logits in memory) where the loss uses it."""
    if uses_fused_kernels(hidden.device):
        lse, picked = _fused_lse_and_pick(hidden, weight, targets)
        return torch.where(targets != IGNORE_INDEX, lse - picked, 0.0)
    if not uses_gpu_policy(hidden.device):
        return tiled_losses(hidden, weight, targets, chunk_elems, argmax=False)[0]
    out = torch.zeros(hidden.shape[0], dtype=torch.float32, device=hidden.device)
    for rows, _, losses in _scored_chunks(hidden, weight, targets, chunk_elems):
        out[rows] = losses
    return out


@torch.no_grad()
def token_losses_and_greedy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_elems: int = DEFAULT_CHUNK_ELEMS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`token_losses` and, per token, whether the target is the logits' argmax (bool [N]):
    what a log-likelihood request of lm-eval asks (its `is_greedy`)."""
    if not uses_gpu_policy(hidden.device):
        losses, greedy = tiled_losses(hidden, weight, targets, chunk_elems, argmax=True)
        assert greedy is not None
        return losses, greedy
    out = torch.zeros(hidden.shape[0], dtype=torch.float32, device=hidden.device)
    greedy = torch.zeros(hidden.shape[0], dtype=torch.bool, device=hidden.device)
    for rows, logits, losses in _scored_chunks(hidden, weight, targets, chunk_elems):
        out[rows] = losses
        greedy[rows] = logits.argmax(-1) == targets[rows]
    return out, greedy


if torch.cuda.is_available():
    _kernels()  # registered before anything is traced (see `_kernels`)
