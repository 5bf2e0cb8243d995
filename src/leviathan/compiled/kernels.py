"""The four Triton kernels at one shape, compiled as Triton's JIT compiles them on a GPU.

Each kernel's launch (grid, arguments, options) comes from the same function the real call
uses (`lev_triton.forward_launch`, `loss_kernel.lse_launch`, ...), given meta tensors of the
shape, so the compile sees what a launch would: the argument types, the JIT's
specialisation of each value (Triton's own binder) and the constexprs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch

from leviathan.model.config import LEVConfig

KERNELS = ("lev_forward", "lev_backward", "loss_forward", "loss_backward")
ARCHES = (90, 80)  # H100 and H200; A100 (the plan's GPU table has all three)


@dataclass(frozen=True)
class Shape:
    """What a kernel launch sees in one job: rows of the loss (tokens of a micro-batch or an
    evaluation batch), the head (vocabulary and its padded rows, width), LEV's shape and the
    distinct ids it evaluates (at most the tokens and the vocabulary)."""

    label: str
    tokens: int
    vocab: int
    head_rows: int
    d_model: int
    lev: LEVConfig | None

    @property
    def ids(self) -> int:
        return min(self.tokens, self.vocab)


Launch = tuple[Any, tuple[int, ...], tuple[Any, ...], dict[str, Any]]


def _meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


def _lev_tensors(shape: Shape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    lev = shape.lev
    if lev is None:
        raise ValueError(f"{shape.label}: no LEV in this cell")
    h, P, K, r = lev.n_heads, lev.d_seed, lev.n_knots, lev.rank
    t, M = _meta(shape.ids, h, P), _meta(shape.ids, h, r)
    return t, _meta(h * P * K, 3, r), M, K


def lev_forward(shape: Shape, arch: int) -> Launch:
    from leviathan.model import _lev_triton_kernels as kernels
    from leviathan.model import lev_triton

    t, coef, M, K = _lev_tensors(shape)
    grid, args, options = lev_triton.forward_launch(t, coef, M, K, 1e-30)
    return kernels.spline_forward_kernel, grid, args, options


def lev_backward(shape: Shape, arch: int) -> Launch:
    from leviathan.model import _lev_triton_kernels as kernels
    from leviathan.model import lev_triton

    t, coef, M, K = _lev_tensors(shape)
    grid, args, options = lev_triton.backward_launch(t, coef, M, M, t, K, 1e-30)
    return kernels.spline_backward_kernel, grid, args, options


def _loss_tensors(shape: Shape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """bf16 hidden states and head (the GPU rule under autocast), int64 targets."""
    h = _meta(shape.tokens, shape.d_model, dtype=torch.bfloat16)
    w = _meta(shape.head_rows, shape.d_model, dtype=torch.bfloat16)
    return h, w, _meta(shape.tokens, dtype=torch.int64)


def loss_forward(shape: Shape, arch: int) -> Launch:
    """The forward at the tiles of compute capability `arch` (`loss_tiles.gpu_blocks`)."""
    from leviathan.model import loss_kernel
    from leviathan.model.loss_tiles import gpu_blocks

    h, w, targets = _loss_tensors(shape)
    blocks = gpu_blocks(arch // 10)
    splits = loss_kernel.lse_splits(shape.vocab, blocks[1])
    lse, picked = _meta(splits, shape.tokens), _meta(splits, shape.tokens)
    grid, args, options = loss_kernel.lse_launch(h, w, targets, shape.vocab, lse, picked, blocks)
    return loss_kernel._lse_partial_kernel, grid, args, options


def loss_backward(shape: Shape, arch: int) -> Launch:
    """The softmax gradient G of one group of rows: the whole micro-batch (the study's
    groups are one at every planned shape, `loss._head_grad_rows`; a bound either way)."""
    from leviathan.model import loss_kernel
    from leviathan.model.loss_tiles import gpu_blocks

    h, w, targets = _loss_tensors(shape)
    rows = (_meta(shape.tokens),) * 3
    G = _meta(shape.tokens, shape.head_rows, dtype=torch.bfloat16)
    blocks = gpu_blocks(arch // 10)
    grid, args, options = loss_kernel.grad_launch(h, w, targets, rows, G, shape.vocab, blocks)
    return loss_kernel._grad_logits_kernel, grid, args, options


LAUNCHES: dict[str, Callable[[Shape, int], Launch]] = {
    "lev_forward": lev_forward,
    "lev_backward": lev_backward,
    "loss_forward": loss_forward,
    "loss_backward": loss_backward,
}


def _require_compiling() -> None:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError(
            "leviathan.compiled compiles Triton kernels: run it in a process without "
            "TRITON_INTERPRET (the tests start one)"
        )


def compile_launch(launch: Launch, arch: int) -> Any:
    """The kernel compiled for compute capability `arch` exactly as the JIT would for this
    launch: Triton's own binder specialises the arguments, `_pack_args` turns them into the
    signature, constexprs and attributes it compiles with (Triton 3.6's runtime.jit)."""
    _require_compiling()
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    fn, _, args, options = launch
    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, opts = binder(*args, **options)
    packed, signature, constexprs, attrs = fn._pack_args(
        backend, options, bound, specialization, opts
    )
    source = ASTSource(fn, signature, constexprs, attrs)
    return triton.compile(source, target=target, options=packed.__dict__)


@cache
def compiled(kernel: str, shape: Shape, arch: int) -> Any:
    """`compile_launch` of `kernel` at `shape` (cached: Triton's own cache keys the binary)."""
    return compile_launch(LAUNCHES[kernel](shape, arch), arch)


def scalar_args(launch: Launch) -> dict[str, int]:
    """The launch's integer arguments by parameter name (what the TTIR's %names are)."""
    fn, _, args, _ = launch
    names = [p.name for p in fn.params]
    return {n: a for n, a in zip(names, args, strict=False) if isinstance(a, int)}
