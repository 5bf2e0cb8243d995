"""Triton kernels for LEV's spline product (steps 4-5) on a GPU, and what they cost.

Why: the plain torch path moves what a GPU pays for, bytes: a gathered [3, r] coefficient
block per factor and ~16 passes over phi-sized fp32 tensors, 15.4 MB of HBM traffic per
distinct id at the 400m shape. These kernels keep phi in registers and read and write only
t, M and their gradients (`cost_per_id`: ~18 KB per id); the per-interval coefficient table
[h * P * kappa, 3, r] (12.6 MB at the paper's shape) is re-read from L2, not HBM.

Forward (`spline_forward`): one program per (block of ids, head) walks the P seed coordinates;
per coordinate it gathers each id's [3, r] coefficients and multiplies phi into a running
product of r lanes, exactly as the native CPU kernel (`lev_native`): |phi| clamped to eps,
its sign kept (-0.0 counts negative), and every `RESCALE` factors each lane's exponent moved
into an integer (bit operations, exact), so no transcendental is evaluated and the result is
bitwise the native kernel's wherever neither contracts multiply-adds (the interpreter, the C
kernel).

Backward (`spline_backward`, given grad_M): one program per (head, coordinate) walks all ids
in a fixed order, recomputing phi; it writes grad_t of that coordinate and owns that
coordinate's kappa x 3 x r rows of the coefficient gradient, accumulated in registers as a
one-hot matrix product (kappa x ids) @ (ids x 3r) in full fp32 (`input_precision="ieee"`):
deterministic, no atomics, so a rerun is bitwise the same on a GPU. Its cost against an atomic
scatter: kappa times the multiply-adds of the gradient rows (2 kappa 3 r per factor instead
of 3 r) and re-reading grad_M and M once per coordinate (from L2), in exchange for no atomic
traffic (1.6 G contended atomic adds at 8,192 ids) and reproducible sums.

On CPU tensors the same kernels run under Triton's interpreter (TRITON_INTERPRET=1, numpy
semantics: what the tests check). Triton reads that variable when it is imported, so a
process runs the kernels either compiled (GPU) or interpreted (CPU), not both; `_triton`
sets it where no GPU is present. Triton is imported on first use: where it is absent
(`available()` False) LEV takes its other paths.
"""

from __future__ import annotations

import math
import os
import sys
from functools import cache
from typing import Any

import torch

from leviathan.model.bspline import N_TAPS

RESCALE = 8  # factors between exponent rescalings: the native kernel's (`lev_native.RESCALE`)
BLOCK_IDS = 64  # ids per program of the forward, per step of the backward's walk
MIN_DOT = 16  # tl.dot's smallest block side


@cache
def _triton() -> Any:
    """The kernels module, imported (and its kernels defined) on first use; None without
    Triton. Where no GPU is present and nothing has imported Triton yet, TRITON_INTERPRET=1
    is set first, so the kernels run on CPU tensors under the interpreter (Triton reads the
    variable once, when its `jit` decorators run: at import)."""
    if "triton" not in sys.modules and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        from leviathan.model import _lev_triton_kernels
    except ImportError:
        return None
    return _lev_triton_kernels


def available() -> bool:
    """Triton imports here (Linux x86-64 wheels)."""
    return _triton() is not None


def interpreting() -> bool:
    """The kernels, and triton.language's own functions, run under the interpreter (CPU)."""
    kernels = _triton()
    if kernels is None:
        return False
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return all(
        isinstance(f, InterpretedFunction) for f in (kernels.spline_forward_kernel, tl.zeros)
    )


def usable(device: torch.device) -> bool:
    """The kernels can run on `device`: compiled on a GPU, interpreted on the CPU."""
    if not available():
        return False
    return interpreting() if device.type == "cpu" else device.type == "cuda"


def _kernel(name: str, device: torch.device) -> Any:
    """The kernel `name`, after checking it can run on `device`."""
    if not usable(device):
        raise RuntimeError(
            f"kernel='triton' cannot run on {device.type}: it needs Triton (Linux x86-64: pip "
            "install 'triton>=3.2') and, for CPU tensors, TRITON_INTERPRET=1 set before Triton "
            "is first imported"
        )
    return getattr(_triton(), name)


def _blocks(r: int, n_knots: int) -> tuple[int, int]:
    return (
        max(MIN_DOT, _next_power_of_2(r)),
        max(MIN_DOT, _next_power_of_2(n_knots)),
    )


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _check(t: torch.Tensor, coef: torch.Tensor, n_knots: int) -> tuple[int, int, int, int]:
    N, h, P = t.shape
    r = coef.shape[-1]
    if coef.shape != (h * P * n_knots, N_TAPS, r):
        raise ValueError(f"coef {tuple(coef.shape)}: expected {(h * P * n_knots, N_TAPS, r)}")
    for x in (t, coef):
        if x.dtype != torch.float32 or not x.is_contiguous():
            raise ValueError("the Triton spline kernels take contiguous fp32 t and coef")
    return N, h, P, r


def spline_forward(
    t: torch.Tensor, coef: torch.Tensor, n_knots: int, eps: float, block_ids: int = BLOCK_IDS
) -> torch.Tensor:
    """M [N, h, r] for t [N, h, P] and coef [h * P * kappa, 3, r] (fp32, contiguous)."""
    N, h, P, r = _check(t, coef, n_knots)
    M = torch.empty(N, h, r, dtype=torch.float32, device=t.device)
    if N == 0:
        return M
    block_r, _ = _blocks(r, n_knots)
    grid = (math.ceil(N / block_ids), h)
    _kernel("spline_forward_kernel", t.device)[grid](
        t, coef, M, N, h, P, eps, K=n_knots, R=r, BLOCK_N=block_ids, BLOCK_R=block_r,
        RESCALE=RESCALE,
    )  # fmt: skip
    return M


def spline_backward(
    t: torch.Tensor,
    coef: torch.Tensor,
    M: torch.Tensor,
    grad_M: torch.Tensor,
    n_knots: int,
    eps: float,
    block_ids: int = BLOCK_IDS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_t [N, h, P], grad_coef [h * P * kappa, 3, r]) given M and grad_M [N, h, r]."""
    N, h, P, r = _check(t, coef, n_knots)
    M, grad_M = M.float().contiguous(), grad_M.float().contiguous()
    grad_t = torch.empty_like(t)
    grad_coef = torch.empty_like(coef)
    block_r, block_k = _blocks(r, n_knots)
    _kernel("spline_backward_kernel", t.device)[(P, h)](
        t, coef, M, grad_M, grad_t, grad_coef, N, h, P, eps, K=n_knots, R=r,
        BLOCK_N=max(MIN_DOT, block_ids), BLOCK_R=block_r, BLOCK_K=block_k,
    )  # fmt: skip
    return grad_t, grad_coef
