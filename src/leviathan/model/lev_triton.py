"""Triton kernels for LEV's spline product (steps 4-5) on a GPU (their cost model:
`leviathan.cost.lev_kernels`).

Why: the plain torch path moves what a GPU pays for, bytes: a gathered [3, r] coefficient
block per factor and ~16 passes over phi-sized fp32 tensors, 15.4 MB of HBM traffic per
distinct id at the 400m shape. These kernels keep phi in registers and read and write only
t, M and their gradients (`cost.lev_kernels.cost_per_id`: ~18 KB per id); the per-interval coefficient table
[h * P * kappa, 3, r] (12.6 MB at the paper's shape) is re-read from L2, not HBM.

Forward (`spline_forward`): one program per (128 ids, head, 16 lanes of r) walks the P seed
coordinates; per coordinate it gathers each id's [3, 16] coefficients and multiplies phi into
a running product per lane, exactly as the native CPU kernel (`lev_native`): |phi| clamped to eps,
its sign kept (-0.0 counts negative), and every `RESCALE` factors each lane's exponent moved
into an integer (bit operations, exact), so no transcendental is evaluated and the result is
bitwise the native kernel's wherever neither contracts multiply-adds (the interpreter, the C
kernel; on a GPU Triton fuses multiply-adds: rounding differs, determinism does not).

Backward (`spline_backward`, given grad_M): one program per (4 coordinates, head, range of
ids) walks its ids in a fixed order, forms grad_M * M once per block of ids for its 4
coordinates, recomputes phi, writes grad_t and owns those coordinates' kappa x 3 x r rows of
the coefficient gradient, accumulated in registers as one-hot matrix products
(kappa x ids) @ (ids x r) on tf32 tensor cores, each operand split into two tf32-exact parts
(fp32 to within 2^-21 of each term: tl.dot truncates the low part to tf32). Each range of
ids fills its own partial table; the (at most `MAX_SPLITS`) tables are summed in range order.
Deterministic, no atomics: a rerun is bitwise on a GPU. Its cost against an atomic scatter: kappa times the multiply-adds for
the gradient rows (2 x 2 kappa 3 r per factor, on tensor cores, instead of 3 r atomic adds),
M and grad_M re-read from L2 by each of the P / 4 coordinate programs, and where there are
several ranges their partial tables (12.6 MB each at the paper's shape) written and summed
(one range at the paper's shape); in exchange no atomic traffic
(1.6 G adds contending for 16 rows per coordinate at 8,192 ids) and reproducible sums.

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
BLOCK_IDS = 128  # ids per program of the forward, FORWARD_LANES lanes of r each
FORWARD_LANES = 16  # (8 warps: 75 registers on sm_90, no spills: leviathan.compiled)
BACKWARD_BLOCK_IDS = 16  # ids per step of the backward's walk (8 warps: 152 registers)
TARGET_PROGRAMS = 256  # backward programs wanted: about two per SM of an H100 or H200
SPLIT_IDS = 1024  # ids per range of the backward's walk, at least
MAX_SPLITS = 8
MIN_DOT = 16  # tl.dot's smallest block side
COORDINATES_PER_PROGRAM = 4  # the backward's (its kernel's constexpr COORDINATES)

# a kernel launch: grid, positional arguments, keyword arguments (constexprs and options)
Launch = tuple[tuple[int, ...], tuple[Any, ...], dict[str, Any]]


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


def block_sizes(r: int, n_knots: int) -> tuple[int, int]:
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
    N, h, _, r = _check(t, coef, n_knots)
    M = torch.empty(N, h, r, dtype=torch.float32, device=t.device)
    if N == 0:
        return M
    grid, args, options = forward_launch(t, coef, M, n_knots, eps, block_ids)
    _kernel("spline_forward_kernel", t.device)[grid](*args, **options)
    return M


def forward_launch(
    t: torch.Tensor,
    coef: torch.Tensor,
    M: torch.Tensor,
    n_knots: int,
    eps: float,
    block_ids: int = BLOCK_IDS,
) -> Launch:
    """The forward kernel's (grid, arguments, options): what `spline_forward` launches, and
    what `leviathan.compiled` compiles as Triton's JIT does (meta tensors will do)."""
    N, h, P, r = _check(t, coef, n_knots)
    block_r = min(FORWARD_LANES, block_sizes(r, n_knots)[0])
    grid = (math.ceil(N / block_ids), h, math.ceil(r / block_r))
    even = P % RESCALE == 0 and r % block_r == 0
    blocks = {"BLOCK_N": block_ids, "BLOCK_R": block_r, "RESCALE": RESCALE, "EVEN": even}
    return grid, (t, coef, M, N, h, P, eps), {**_shape(n_knots, r), **blocks}


def spline_backward(
    t: torch.Tensor,
    coef: torch.Tensor,
    M: torch.Tensor,
    grad_M: torch.Tensor,
    n_knots: int,
    eps: float,
    block_ids: int = BACKWARD_BLOCK_IDS,
    splits: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_t [N, h, P], grad_coef [h * P * kappa, 3, r]) given M and grad_M [N, h, r].

    The ids are walked in `splits` contiguous ranges (more programs for a GPU to run at
    once; default `default_splits`), each into its own partial table, which are then summed
    in split order: deterministic whatever the number."""
    M, grad_M = M.float().contiguous(), grad_M.float().contiguous()
    grad_t = torch.empty_like(t)
    grid, args, options = backward_launch(
        t, coef, M, grad_M, grad_t, n_knots, eps, block_ids, splits
    )
    kernel = _kernel("spline_backward_kernel", t.device)
    kernel[grid](*args, **options)
    partial = args[5]
    return grad_t, partial[0] if partial.shape[0] == 1 else partial.sum(0)


def backward_launch(
    t: torch.Tensor,
    coef: torch.Tensor,
    M: torch.Tensor,
    grad_M: torch.Tensor,
    grad_t: torch.Tensor,
    n_knots: int,
    eps: float,
    block_ids: int = BACKWARD_BLOCK_IDS,
    splits: int | None = None,
) -> Launch:
    """The backward kernel's (grid, arguments, options), its partial tables allocated (one
    per id range): what `spline_backward` launches, and what `leviathan.compiled` compiles."""
    N, h, P, r = _check(t, coef, n_knots)
    programs = h * math.ceil(P / COORDINATES_PER_PROGRAM)
    splits = default_splits(N, programs) if splits is None else splits
    block = max(MIN_DOT, block_ids)
    split_ids = max(1, math.ceil(N / (splits * block))) * block
    splits = max(1, math.ceil(N / split_ids))
    partial = torch.empty((splits, *coef.shape), dtype=torch.float32, device=t.device)
    block_r, block_k = block_sizes(r, n_knots)
    args = (t, coef, M, grad_M, grad_t, partial, N, h, P, eps, split_ids)
    blocks = {"BLOCK_N": block, "BLOCK_R": block_r, "BLOCK_K": block_k}
    blocks |= {"COORDINATES": COORDINATES_PER_PROGRAM}
    grid = (math.ceil(P / COORDINATES_PER_PROGRAM), h, splits)
    return grid, args, {**_shape(n_knots, r), **blocks}


def _shape(n_knots: int, r: int) -> dict[str, int]:
    """The kernels' compile-time shape and launch width (8 warps)."""
    return {"K": n_knots, "R": r, "num_warps": 8}


def default_splits(n_ids: int, programs: int) -> int:
    """Id ranges of the backward: enough that `TARGET_PROGRAMS` programs run (one program
    fills an SM's registers), at most `MAX_SPLITS`, each of at least `SPLIT_IDS` ids. The
    paper's shape has 256 programs per range already: one range, no partial tables."""
    wanted = math.ceil(TARGET_PROGRAMS / programs)
    return max(1, min(MAX_SPLITS, wanted, n_ids // SPLIT_IDS))
