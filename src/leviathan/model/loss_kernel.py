"""Triton kernels of the GPU rule's loss: the head's logits formed tile by tile in registers.

Two custom ops (`torch.library.custom_op`, each one node to torch.compile and one record to a
dispatch mode such as `leviathan.cost.traffic.TrafficCounter`, with a fake implementation for
FakeTensors and meta tensors):

  * `leviathan::lse_and_pick(h, w, targets, n_classes) -> (lse, picked)`: for the logits
    z = h @ w[:n_classes].T (never written to memory), per row the logsumexp over the classes
    and the target's logit (0 where the target is not a class, e.g. -100). Each program holds
    BLOCK_N rows and one of `SPLITS` shares of the vocabulary, walks its tiles with an online
    logsumexp (fp32, like the matmul's accumulator) and writes a partial logsumexp; the
    shares are combined by `torch.logsumexp` over [SPLITS, N] (a fixed order: deterministic).
  * `leviathan::softmax_grad_logits(h, w, targets, lse, a, b, n_classes) -> G`: the gradient
    of a * lse + b * picked with respect to z, G = a * softmax(z) + b * onehot(target),
    written once in w's dtype (bf16 under autocast), [N, w rows]: what the two GEMMs of the
    backward (dh = G w, dw = G^T h) read. Rows of w beyond `n_classes` (the head's padding)
    get zero columns. Every element is written by one program: deterministic.

`lse_and_pick` is differentiable (`torch.library.register_autograd`): its backward forms G in
groups of rows that fit the head-gradient budget (`leviathan.model.loss`) and multiplies by
cuBLAS. On a CPU tensor the kernels run in Triton's interpreter (tests; slow); the CPU rule's
loss does not use them.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from leviathan.model.loss_tiles import (  # the tiles' one home, Triton-free
    INTERPRETER_BLOCKS,
    SPLITS,
    WARPS,
    gpu_blocks,
)

Blocks = tuple[int, int, int]

# a kernel launch: grid, positional arguments, keyword arguments (constexprs and options)
Launch = tuple[tuple[int, ...], tuple[Any, ...], dict[str, Any]]


@triton.jit
def _logit_tile(
    h_ptr,
    w_ptr,
    rows,
    cols,
    N,
    V,
    D,
    stride_h,
    stride_w,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """fp32 [rows, cols] tile of h @ w.T, accumulated over D in BLOCK_D steps (operands
    upcast to fp32 first where UPCAST: the interpreter's bf16 dot is wrong; the products of
    bf16 numbers are exact in fp32 either way)."""
    acc = tl.zeros((BLOCK_N, BLOCK_V), dtype=tl.float32)
    h_rows = rows.to(tl.int64) * stride_h  # 64-bit: N x D and V x D pass 2^31 elements
    w_rows = cols.to(tl.int64) * stride_w
    for d0 in range(0, D, BLOCK_D):
        dd = d0 + tl.arange(0, BLOCK_D)
        h_mask = (rows < N)[:, None] & (dd < D)[None, :]
        h = tl.load(h_ptr + h_rows[:, None] + dd[None, :], mask=h_mask, other=0.0)
        w_mask = (cols < V)[None, :] & (dd < D)[:, None]
        w = tl.load(w_ptr + w_rows[None, :] + dd[:, None], mask=w_mask, other=0.0)
        if UPCAST:
            h, w = h.to(tl.float32), w.to(tl.float32)
        acc = tl.dot(h, w, acc, input_precision=PRECISION)
    return acc


@triton.jit
def _lse_partial_kernel(
    h_ptr,
    w_ptr,
    t_ptr,
    lse_ptr,
    pick_ptr,
    N,
    n_classes,
    D,
    stride_h,
    stride_w,
    tiles_per_split,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
    PRECISION: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    t = tl.load(t_ptr + rows, mask=rows < N, other=-1)
    m = tl.full((BLOCK_N,), float("-inf"), dtype=tl.float32)
    s = tl.zeros((BLOCK_N,), dtype=tl.float32)
    picked = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for i in range(0, tiles_per_split):
        cols = (split * tiles_per_split + i) * BLOCK_V + tl.arange(0, BLOCK_V)
        z = _logit_tile(
            h_ptr,
            w_ptr,
            rows,
            cols,
            N,
            n_classes,
            D,
            stride_h,
            stride_w,
            BLOCK_N,
            BLOCK_V,
            BLOCK_D,
            UPCAST,
            PRECISION,
        )
        z = tl.where((cols < n_classes)[None, :], z, float("-inf"))
        m_new = tl.maximum(m, tl.max(z, axis=1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a tile of padding only
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(z - shift[:, None]), axis=1)
        m = m_new
        picked += tl.sum(tl.where(cols[None, :] == t[:, None], z, 0.0), axis=1)
    out = split.to(tl.int64) * N + rows
    tl.store(lse_ptr + out, m + tl.log(s), mask=rows < N)
    tl.store(pick_ptr + out, picked, mask=rows < N)


@triton.jit
def _grad_logits_kernel(
    h_ptr,
    w_ptr,
    t_ptr,
    lse_ptr,
    a_ptr,
    b_ptr,
    g_ptr,
    N,
    V,
    n_classes,
    D,
    stride_h,
    stride_w,
    stride_g,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
    PRECISION: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    z = _logit_tile(
        h_ptr,
        w_ptr,
        rows,
        cols,
        N,
        n_classes,
        D,
        stride_h,
        stride_w,
        BLOCK_N,
        BLOCK_V,
        BLOCK_D,
        UPCAST,
        PRECISION,
    )
    row_ok = rows < N
    lse = tl.load(lse_ptr + rows, mask=row_ok, other=0.0)
    a = tl.load(a_ptr + rows, mask=row_ok, other=0.0)
    b = tl.load(b_ptr + rows, mask=row_ok, other=0.0)
    t = tl.load(t_ptr + rows, mask=row_ok, other=-1)
    p = tl.where((cols < n_classes)[None, :], tl.exp(z - lse[:, None]), 0.0)
    g = a[:, None] * p + tl.where(cols[None, :] == t[:, None], b[:, None], 0.0)
    mask = row_ok[:, None] & (cols < V)[None, :]
    g_rows = rows.to(tl.int64) * stride_g  # 64-bit: G [N, V] passes 2^31 elements at N >= 10,734
    tl.store(g_ptr + g_rows[:, None] + cols[None, :], g.to(g_ptr.dtype.element_ty), mask=mask)


def _launcher(kernel: Any, device: torch.device) -> tuple[Any, Blocks]:
    """The kernel and its (BLOCK_N, BLOCK_V, BLOCK_D): compiled on a GPU (the tiles of its
    compute capability); on a CPU tensor Triton's interpreter with small tiles, which needs
    TRITON_INTERPRET=1 set before triton is first imported (its own library functions are
    jit functions too)."""
    if device.type == "cuda":
        return kernel, gpu_blocks(torch.cuda.get_device_capability(device)[0])
    if device.type != "cpu":
        return kernel, gpu_blocks(9)
    if not isinstance(kernel, InterpretedFunction):
        raise RuntimeError(
            "the loss kernels got CPU tensors but Triton is not interpreting: set "
            "TRITON_INTERPRET=1 before triton is imported, or use a CUDA device"
        )
    return kernel, INTERPRETER_BLOCKS


def _dot_options(h: torch.Tensor) -> dict[str, Any]:
    """Constexprs of the dot: fp32 operands in full precision unless torch allows TF32
    (`torch.set_float32_matmul_precision`), as torch's own matmuls do (the setting is
    Triton's default, and moot, for bf16 operands)."""
    full = h.dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest"
    return {"UPCAST": h.device.type == "cpu", "PRECISION": "ieee" if full else "tf32"}


def _check(h: torch.Tensor, w: torch.Tensor, targets: torch.Tensor, n_classes: int) -> None:
    if h.dtype != w.dtype or h.shape[1] != w.shape[1] or targets.shape != h.shape[:1]:
        raise ValueError(
            f"h {tuple(h.shape)} {h.dtype}, w {tuple(w.shape)} {w.dtype}, targets "
            f"{tuple(targets.shape)}: need h [N, D] and w [V, D] of one dtype, targets [N]"
        )
    if not 0 < n_classes <= w.shape[0]:
        raise ValueError(f"n_classes={n_classes}: must be in 1..{w.shape[0]} (w's rows)")


@torch.library.custom_op("leviathan::lse_and_pick", mutates_args=())
def lse_and_pick(
    h: torch.Tensor, w: torch.Tensor, targets: torch.Tensor, n_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of h [N, D]: logsumexp over z = h @ w[:n_classes].T, and z at the target."""
    _check(h, w, targets, n_classes)
    h, w, targets = h.contiguous(), w.contiguous(), targets.contiguous()
    kernel, blocks = _launcher(_lse_partial_kernel, h.device)
    splits = lse_splits(n_classes, blocks[1])
    lse = torch.empty(splits, h.shape[0], dtype=torch.float32, device=h.device)
    picked = torch.empty(splits, h.shape[0], dtype=torch.float32, device=h.device)
    if h.shape[0]:
        grid, args, options = lse_launch(h, w, targets, n_classes, lse, picked, blocks)
        kernel[grid](*args, **options)
    return torch.logsumexp(lse, dim=0), picked.sum(dim=0)


def _tiles_per_split(n_classes: int, block_v: int) -> int:
    return triton.cdiv(triton.cdiv(n_classes, block_v), SPLITS)


def lse_splits(n_classes: int, block_v: int) -> int:
    """Shares of the vocabulary in the forward: at most SPLITS, none of padding only."""
    return triton.cdiv(triton.cdiv(n_classes, block_v), _tiles_per_split(n_classes, block_v))


def lse_launch(
    h: torch.Tensor,
    w: torch.Tensor,
    targets: torch.Tensor,
    n_classes: int,
    lse: torch.Tensor,
    picked: torch.Tensor,
    blocks: Blocks | None = None,
) -> Launch:
    """The forward kernel's (grid, arguments, options) for contiguous h, w, targets and the
    partial outputs [splits, N]: what `lse_and_pick` launches, and what `leviathan.compiled`
    compiles as Triton's JIT does (meta tensors will do, with `blocks` for the GPU)."""
    (N, D), (bn, bv, bd) = h.shape, blocks or _launcher(_lse_partial_kernel, h.device)[1]
    tiles_per_split = _tiles_per_split(n_classes, bv)
    args = (h, w, targets, lse, picked, N, n_classes, D, h.stride(0), w.stride(0), tiles_per_split)
    options = {"BLOCK_N": bn, "BLOCK_V": bv, "BLOCK_D": bd, "num_warps": WARPS, **_dot_options(h)}
    return (triton.cdiv(N, bn), lse.shape[0]), args, options


@lse_and_pick.register_fake
def _(
    h: torch.Tensor, w: torch.Tensor, targets: torch.Tensor, n_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    _check(h, w, targets, n_classes)
    return h.new_empty(h.shape[0], dtype=torch.float32), h.new_empty(
        h.shape[0], dtype=torch.float32
    )


@torch.library.custom_op("leviathan::softmax_grad_logits", mutates_args=())
def softmax_grad_logits(
    h: torch.Tensor,
    w: torch.Tensor,
    targets: torch.Tensor,
    lse: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    n_classes: int,
) -> torch.Tensor:
    """G [N, V] in w's dtype: a * softmax(z) + b * onehot(targets), z = h @ w[:n_classes].T
    (zero in the columns past n_classes); `lse` from `lse_and_pick`, a and b fp32 [N]."""
    _check(h, w, targets, n_classes)
    h, w, targets = h.contiguous(), w.contiguous(), targets.contiguous()
    G = torch.empty(h.shape[0], w.shape[0], dtype=w.dtype, device=h.device)
    kernel, blocks = _launcher(_grad_logits_kernel, h.device)
    if h.shape[0]:
        rows = (lse.float().contiguous(), a.float().contiguous(), b.float().contiguous())
        grid, args, options = grad_launch(h, w, targets, rows, G, n_classes, blocks)
        kernel[grid](*args, **options)
    return G


def grad_launch(
    h: torch.Tensor,
    w: torch.Tensor,
    targets: torch.Tensor,
    rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    G: torch.Tensor,
    n_classes: int,
    blocks: Blocks | None = None,
) -> Launch:
    """The backward kernel's (grid, arguments, options) for contiguous h, w, targets, the
    rows' (lse, a, b) in fp32 and the output G: what `softmax_grad_logits` launches."""
    (N, D), V = h.shape, w.shape[0]
    bn, bv, bd = blocks or _launcher(_grad_logits_kernel, h.device)[1]
    args = (h, w, targets, *rows, G, N, V, n_classes, D, h.stride(0), w.stride(0), G.stride(0))
    options = {"BLOCK_N": bn, "BLOCK_V": bv, "BLOCK_D": bd, "num_warps": WARPS, **_dot_options(h)}
    return (triton.cdiv(N, bn), triton.cdiv(V, bv)), args, options


@softmax_grad_logits.register_fake
def _(h: torch.Tensor, w: torch.Tensor, targets: torch.Tensor, *rest: Any) -> torch.Tensor:
    _check(h, w, targets, rest[-1])
    return h.new_empty(h.shape[0], w.shape[0], dtype=w.dtype)
