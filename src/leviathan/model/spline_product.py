"""LEV's steps 4-5 (`leviathan.model.lev`): each id's per-head product over its seed
coordinates of their spline expansions, M_l[m] = prod_p phi_l[p, m].

`reference_product` (with `LEV.reference`) is steps 4-5 exactly as `leviathan.model.lev` writes them: a dense
basis over all kappa centres and a plain product over the seed coordinates, a few lines to
read the method by, which the tests hold the fast paths against. Training and evaluation run
steps 4-5 in fused paths (below). In the knot interval around its
nearest centre c (x = t (kappa-1), f = x - c in [-1/2, 1/2]) the 3-tap expansion of a coordinate is a
quadratic in f whose coefficients depend only on (l, p, c):
    phi = A0 + f A1 + f^2 A2,   A0 = (S[c-1] + 6 S[c] + S[c+1]) / 8,
                                A1 = (S[c+1] - S[c-1]) / 2,   A2 = (S[c-1] - 2 S[c] + S[c+1]) / 2
(S[-1] = S[kappa] = 0: out-of-range taps weigh nothing; `bspline.py` gives the 3 taps).
So each coordinate costs one gather of a [3, r] coefficient block and two fused
multiply-adds, never a dense [N, d_seed, kappa] basis. Only t and M are saved for backward
(phi is recomputed), and |phi| is clamped to eps so the gradient stays exact where a factor
phi is ~0.

The paths (`spline_product`'s `kernel`): "auto" runs one custom op,
`leviathan::spline_product` (with its backward op and autograd formula: torch.compile keeps
it one node, a dispatch mode sees its inputs and output; eager code with plain tensors and no
mode calls the op's bodies directly, `_EagerFusedProduct`, sparing each process torch's ~2 s
custom-op set-up), whose kernel is the Triton pair on a GPU (`lev_triton`), the native C
kernel on a CPU (`lev_native`), else the plain torch ops (a kernel that failed the run's
self-check, `kernel_check`, is left out: its direction runs the plain ops);
"plain" is those torch ops themselves (`SplineProduct`: the product in fp32 log space, ids in
chunks bounded by `LEVConfig.chunk_elems` on a CPU, by a share of the memory on a GPU,
`leviathan.device.chunk_elems`, which asks a GPU for its memory once; one chunk under torch.compile), which tracers and dispatch modes see through.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.utils._python_dispatch import is_in_torch_dispatch_mode

from leviathan.device import chunk_elems as device_chunk_elems
from leviathan.model import kernel_use, lev_native, lev_triton
from leviathan.model.bspline import N_TAPS, basis_dense, end_sum
from leviathan.model.config import LEV_BASES


def _chunks(n: int, per_item: int, budget: int) -> Iterator[slice]:
    """Slices of [0, n) holding about `budget` elements each. Under torch.compile: one slice,
    so the traced graph has no unrolled loop whatever n; inductor fuses the forward's
    per-factor work."""
    if torch.compiler.is_compiling():
        yield slice(0, n)
        return
    step = max(1, budget // max(1, per_item))
    for start in range(0, n, step):
        yield slice(start, min(n, start + step))


def knot_interval_coefficients(S: torch.Tensor) -> torch.Tensor:
    """S [h, P, kappa, r] -> per-interval quadratic coefficients [h * P * kappa, 3, r] (A0, A1, A2).

    Differentiable (plain autograd): the spline parameters stay S; only this small table,
    3x the size of S, enters the fused product."""
    h, P, kappa, r = S.shape
    padded = F.pad(S, (0, 0, 1, 1))  # zero taps beyond both ends
    left, mid, right = padded[:, :, :-2], padded[:, :, 1:-1], padded[:, :, 2:]
    a0 = 0.125 * (left + right) + 0.75 * mid
    a1 = 0.5 * (right - left)
    a2 = 0.5 * (left + right) - mid
    return torch.stack((a0, a1, a2), dim=3).reshape(h * P * kappa, 3, r)


class _KnotIntervals:
    """Per chunk: the gathered coefficient blocks and the offset f of every coordinate."""

    def __init__(self, t: torch.Tensor, coef: torch.Tensor, n_knots: int) -> None:
        n, h, P = t.shape
        x = t * (n_knots - 1)
        c = torch.floor(x + 0.5).clamp_(0, n_knots - 1)
        self.f = (x - c).unsqueeze(-1)  # [n, h, P, 1]
        base = torch.arange(h * P, device=t.device).view(h, P) * n_knots
        self.rows = (base + c.long()).view(-1)  # [n * h * P]
        # gather from the 2-D view: index_select over the rows of a 3-D tensor is much slower
        self.A = coef.flatten(1).index_select(0, self.rows).view(n, h, P, 3, -1)

    def phi(self) -> torch.Tensor:
        """phi [n, h, P, r] = A0 + f (A1 + f A2)."""
        A, f = self.A, self.f
        return torch.addcmul(A[..., 0, :], f, torch.addcmul(A[..., 1, :], f, A[..., 2, :]))

    def dphi_df(self) -> torch.Tensor:
        A = self.A
        return torch.addcmul(A[..., 1, :], self.f, A[..., 2, :], value=2.0)


KERNELS = ("auto", "native", "plain", "triton")


def _resolve(kernel: str, t: torch.Tensor, direction: str) -> str:
    """The path a kernel choice takes for t, in `direction` (forward or backward): "auto" is
    the Triton kernels on a GPU, the native kernel on a CPU (fp32 where they run; a kernel
    that failed the run's self-check, `kernel_use`, is not used), else the plain torch ops."""
    fp32 = torch.promote_types(t.dtype, torch.float32) == torch.float32
    native = fp32 and t.device.type == "cpu" and lev_native.available()
    triton = fp32 and t.device.type == "cuda" and lev_triton.usable(t.device)
    if kernel == "auto":
        if triton and kernel_use.usable(f"lev_triton_{direction}"):
            return "triton"
        return "native" if native and kernel_use.usable(f"lev_native_{direction}") else "plain"
    if kernel == "native" and not native:
        raise RuntimeError("kernel='native' needs fp32 CPU tensors and a C compiler")
    if kernel == "triton" and not (fp32 and lev_triton.usable(t.device)):
        raise RuntimeError(
            "kernel='triton' needs fp32 tensors on a GPU with Triton, or on the CPU Triton's "
            "interpreter (TRITON_INTERPRET=1 before Triton is imported)"
        )
    return kernel


def _plain_forward(
    t32: torch.Tensor, coef32: torch.Tensor, n_knots: int, eps: float, chunk_elems: int
) -> torch.Tensor:
    """The reference path in torch ops: the product in fp32 log space, chunk by chunk."""
    N, h, P = t32.shape
    r = coef32.shape[-1]
    M = torch.empty(N, h, r, dtype=t32.dtype, device=t32.device)
    for sl in _chunks(N, h * P * r, chunk_elems):
        phi = _KnotIntervals(t32[sl], coef32, n_knots).phi()
        # sign of the product = product of the factors' signs (+-1, -0.0 counts as
        # negative, as in backward's copysign); magnitude from the log-space sum
        sign = torch.copysign(torch.ones((), dtype=t32.dtype, device=t32.device), phi).prod(2)
        log_abs = phi.abs_().clamp_min_(eps).log_().sum(2)
        M[sl] = log_abs.exp_().mul_(sign)
    return M


def _plain_backward(
    t32: torch.Tensor,
    coef32: torch.Tensor,
    gMM: torch.Tensor,
    n_knots: int,
    eps: float,
    chunk_elems: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_t, grad_coef) given gMM = grad_M * M, in torch ops, chunk by chunk."""
    N, h, P = t32.shape
    r = coef32.shape[-1]
    gM = gMM.unsqueeze(2)  # [N, h, 1, r]
    grad_t = torch.empty_like(t32)
    grad_coef = torch.zeros_like(coef32)
    for sl in _chunks(N, h * P * r, chunk_elems):
        intervals = _KnotIntervals(t32[sl], coef32, n_knots)
        phi = intervals.phi()
        # d M / d phi_p = M / phi_p, the product of the other factors; |phi_p| is clamped
        # to eps here exactly as in the forward, so this stays exact at phi_p = 0.
        mag = phi.abs().clamp_min_(eps)
        g_phi = gM[sl] / torch.copysign(mag, phi)  # [n, h, P, r]
        grad_t[sl] = (g_phi * intervals.dphi_df()).sum(-1).mul_(n_knots - 1)
        g_f = g_phi * intervals.f
        g_A = torch.stack((g_phi, g_f, g_f * intervals.f), dim=3)  # d/dA0, d/dA1, d/dA2
        segment_add_(grad_coef, intervals.rows, g_A.view(-1, 3, r))
    return grad_t, grad_coef


def segment_add_(out: torch.Tensor, rows: torch.Tensor, values: torch.Tensor) -> None:
    """out[rows[i]] += values[i]. index_add_ accumulates with atomics on CUDA (not
    reproducible); under torch.use_deterministic_algorithms(True) the rows are summed by a
    sort-based segment reduction instead (index_put_ with accumulate=True, which sorts the
    indices and reduces each run in a fixed order)."""
    if torch.are_deterministic_algorithms_enabled():
        out.index_put_((rows,), values, accumulate=True)
    else:
        out.index_add_(0, rows, values)


class SplineProduct(torch.autograd.Function):
    """M [N, h, r] = prod_p phi[n, l, p, :] in plain torch ops (steps 4-5; the module
    docstring): what kernel="plain" runs, transparent to tracers and dispatch modes."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        t: torch.Tensor,
        coef: torch.Tensor,
        n_knots: int,
        eps: float,
        chunk_elems: int,
    ) -> torch.Tensor:
        dtype = torch.promote_types(t.dtype, torch.float32)
        if not torch.compiler.is_compiling():  # traced: one chunk whatever the budget
            chunk_elems = device_chunk_elems(t.device, chunk_elems)
        M = _plain_forward(t.to(dtype), coef.to(dtype), n_knots, eps, chunk_elems)
        ctx.save_for_backward(t, coef, M)
        ctx.n_knots, ctx.eps, ctx.chunk_elems = n_knots, eps, chunk_elems  # type: ignore[attr-defined]
        return M

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad_M: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None, None]:
        t, coef, M = ctx.saved_tensors  # type: ignore[attr-defined]
        dtype = M.dtype
        grad_t, grad_coef = _plain_backward(
            t.to(dtype),
            coef.to(dtype),
            grad_M.to(dtype) * M,
            ctx.n_knots,
            ctx.eps,
            ctx.chunk_elems,  # type: ignore[attr-defined]
        )
        return (
            grad_t.to(t.dtype) if ctx.needs_input_grad[0] else None,
            grad_coef.to(coef.dtype) if ctx.needs_input_grad[1] else None,
            None,
            None,
            None,
        )


def _fused_forward(
    t: torch.Tensor, coef: torch.Tensor, n_knots: int, eps: float, chunk_elems: int, kernel: str
) -> torch.Tensor:
    """The fused product by the kernel `_resolve` picks, in fp32 (fp64 in, fp64 out)."""
    dtype = torch.promote_types(t.dtype, torch.float32)
    t32, coef32 = t.to(dtype).contiguous(), coef.to(dtype).contiguous()
    path = _resolve(kernel, t, "forward")
    if path == "triton":
        return lev_triton.spline_forward(t32, coef32, n_knots, eps)
    if path == "native":
        return lev_native.spline_forward(t32, coef32.view(_native_shape(t, coef, n_knots)), eps)
    return _plain_forward(t32, coef32, n_knots, eps, device_chunk_elems(t.device, chunk_elems))


def _fused_backward(
    t: torch.Tensor,
    coef: torch.Tensor,
    M: torch.Tensor,
    grad_M: torch.Tensor,
    n_knots: int,
    eps: float,
    chunk_elems: int,
    kernel: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_t, grad_coef) of `_spline_op` in M's dtype, phi recomputed from t."""
    dtype = M.dtype
    t32, coef32 = t.to(dtype).contiguous(), coef.to(dtype).contiguous()
    path = _resolve(kernel, t, "backward")
    if path == "triton":
        return lev_triton.spline_backward(t32, coef32, M, grad_M, n_knots, eps)
    gMM = grad_M.to(dtype) * M
    if path == "native":
        shape = _native_shape(t, coef, n_knots)
        grad_t, grad_coef = lev_native.spline_backward(t32, coef32.view(shape), gMM, eps)
        return grad_t, grad_coef.view_as(coef32)
    chunk = device_chunk_elems(t.device, chunk_elems)
    return _plain_backward(t32, coef32, gMM, n_knots, eps, chunk)


def _native_shape(t: torch.Tensor, coef: torch.Tensor, n_knots: int) -> tuple[int, ...]:
    return (t.shape[1], t.shape[2], n_knots, N_TAPS, coef.shape[-1])


@torch.library.custom_op("leviathan::spline_product", mutates_args=())
def _spline_op(
    t: torch.Tensor, coef: torch.Tensor, n_knots: int, eps: float, chunk_elems: int, kernel: str
) -> torch.Tensor:
    """The fused product as one opaque op (torch.compile keeps it one node; a dispatch mode
    sees its inputs and output)."""
    return _fused_forward(t, coef, n_knots, eps, chunk_elems, kernel)


@torch.library.custom_op("leviathan::spline_product_backward", mutates_args=())
def _spline_backward_op(
    t: torch.Tensor,
    coef: torch.Tensor,
    M: torch.Tensor,
    grad_M: torch.Tensor,
    n_knots: int,
    eps: float,
    chunk_elems: int,
    kernel: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_t, grad_coef) of `_spline_op`."""
    return _fused_backward(t, coef, M, grad_M, n_knots, eps, chunk_elems, kernel)


@_spline_op.register_fake
def _(t: torch.Tensor, coef: torch.Tensor, *_: Any) -> torch.Tensor:
    dtype = torch.promote_types(t.dtype, torch.float32)
    return t.new_empty((t.shape[0], t.shape[1], coef.shape[-1]), dtype=dtype)


@_spline_backward_op.register_fake
def _(t: torch.Tensor, coef: torch.Tensor, M: torch.Tensor, *_: Any) -> tuple[torch.Tensor, ...]:
    return t.new_empty(t.shape, dtype=M.dtype), coef.new_empty(coef.shape, dtype=M.dtype)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    t, coef, n_knots, eps, chunk_elems, kernel = inputs
    ctx.save_for_backward(t, coef, output)  # per id: t and M only
    ctx.args = (n_knots, eps, chunk_elems, kernel)


def _spline_op_backward(ctx: Any, grad_M: torch.Tensor) -> tuple[Any, ...]:
    return _input_grads(ctx, grad_M, _spline_backward_op)


def _input_grads(ctx: Any, grad_M: torch.Tensor, backward: Any) -> tuple[Any, ...]:
    """The inputs' gradients from what `_setup_context` saved, by `backward` (the op, or its
    body where the product skipped the op)."""
    t, coef, M = ctx.saved_tensors
    grad_t, grad_coef = backward(t, coef, M, grad_M.contiguous(), *ctx.args)
    return grad_t.to(t.dtype), grad_coef.to(coef.dtype), None, None, None, None


_spline_op.register_autograd(_spline_op_backward, setup_context=_setup_context)


class _EagerFusedProduct(torch.autograd.Function):
    """The op's forward and backward bodies, called without the op where no tracer or mode
    could see it (`_skips_the_op`): the same kernels and saved tensors, without the op's
    first-call set-up (torch's custom-op dispatch imports torch._dynamo: ~2 s per process,
    once in each of the default run's LEV jobs)."""

    @staticmethod
    def forward(ctx: Any, *inputs: Any) -> torch.Tensor:  # type: ignore[override]
        M = _fused_forward(*inputs)
        _setup_context(ctx, inputs, M)
        return M

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_M: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        return _input_grads(ctx, grad_M, _fused_backward)


def _skips_the_op(*tensors: torch.Tensor) -> bool:
    """Whether the fused product may run without its custom op: eager (not traced by
    torch.compile), no dispatch or torch-function mode active (a FakeTensor or traffic count
    sees the op as one record) and plain tensors on a real device (no subclass, no meta)."""
    return not (
        torch.compiler.is_compiling()
        or is_in_torch_dispatch_mode()
        or torch._C._is_torch_function_mode_enabled()
        or any(type(x) is not torch.Tensor or x.device.type == "meta" for x in tensors)
    )


def spline_product(
    t: torch.Tensor,
    S: torch.Tensor,
    eps: float,
    chunk_elems: int,
    kernel: str = "auto",
    *,
    basis: str = "unnormalised",
    knot_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """M [N, h, r] = prod_p sum_j B(t[n, l, p], j) S[l, p, j, :], for t [N, h, P], S [h, P, kappa, r].

    kernel: "auto" (the Triton kernels on a GPU, the native C kernel on a CPU, where they
    run, else the plain torch ops; as one custom op where a tracer or mode could see it, its
    bodies directly otherwise: `_skips_the_op`; fp64 takes the plain
    path directly), "native", "triton"
    (the CPU runs it under Triton's interpreter: tests) or "plain" (the torch ops themselves,
    which tracers and dispatch modes see through: the reference, benchmarks).

    basis "normalised" (docs/method.md §6): with the fixed spacing the normalised factor is
    phi / n(t_p), n the sum of the in-range taps (`bspline.end_sum`), so M is the kernel's
    product times prod_p 1 / n(t_p), one factor per (id, head) formed in torch after
    whichever path computed M (autograd carries its gradient): the fused product is
    unchanged. knot_scale [h, P] (the learned scales, `LEVConfig.knot_scale`): a basis
    function then spans 3 / s, not 3 knot spacings, which no fixed per-interval table
    holds; the product runs in torch ops over the dense basis (`scaled_spline_product`),
    for "auto" and "plain"; "native" and "triton" are refused."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel={kernel!r}: use one of {KERNELS}")
    if basis not in LEV_BASES:
        raise ValueError(f"basis={basis!r}: use one of {LEV_BASES}")
    if knot_scale is not None:
        if kernel in ("native", "triton"):
            raise ValueError(
                f"kernel={kernel!r} evaluates the fixed knot spacing only: with "
                "lev.knot_scale='learned' use kernel 'auto' or 'plain' (torch ops)"
            )
        return scaled_spline_product(t, S, knot_scale, eps, normalised=basis == "normalised")
    coef = knot_interval_coefficients(S)
    fp32 = torch.promote_types(t.dtype, torch.float32) == torch.float32
    if kernel == "plain" or (kernel == "auto" and not fp32):  # fp64: the kernels are fp32
        M = SplineProduct.apply(t, coef, S.shape[2], eps, chunk_elems)
    elif _skips_the_op(t, coef):
        M = _EagerFusedProduct.apply(t, coef, S.shape[2], eps, chunk_elems, kernel)
    else:
        M = _spline_op(t, coef, S.shape[2], eps, chunk_elems, kernel)
    if basis == "normalised":
        M = M * end_factor(t.to(M.dtype), S.shape[2]).unsqueeze(-1)
    return M


def end_factor(t: torch.Tensor, n_knots: int) -> torch.Tensor:
    """prod_p 1 / n(t[n, l, p]) [N, h]: what normalising the basis multiplies M by (the
    sum over the coordinates of -log n, exponentiated; n in [0.875, 1] for t in [0, 1])."""
    return end_sum(t, n_knots).log().sum(-1).neg().exp()


class _LogProduct(torch.autograd.Function):
    """M [N, h, r] = prod_p phi[:, :, p, :], as the fused paths take it: sign x exp(sum
    log max(|phi|, eps)), and backward the product of the other factors, grad_M M / phi_p
    with |phi_p| clamped to eps (exact where a factor is zero)."""

    @staticmethod
    def forward(ctx: Any, phi: torch.Tensor, eps: float) -> torch.Tensor:  # type: ignore[override]
        sign = torch.copysign(torch.ones((), dtype=phi.dtype, device=phi.device), phi).prod(2)
        M = phi.abs().clamp_min(eps).log().sum(2).exp().mul_(sign)
        ctx.save_for_backward(phi, M)
        ctx.eps = eps
        return M

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_M: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        phi, M = ctx.saved_tensors
        mag = phi.abs().clamp_min(ctx.eps)
        return (grad_M * M).unsqueeze(2) / torch.copysign(mag, phi), None


def scaled_spline_product(
    t: torch.Tensor,
    S: torch.Tensor,
    knot_scale: torch.Tensor,
    eps: float,
    *,
    normalised: bool = False,
) -> torch.Tensor:
    """Steps 4-5 with learned knot scales [h, P] (KHRONOS, docs/method.md §6): the dense
    basis of every coordinate (`bspline.basis_dense` with the scales), phi = B S, and the
    product as the fused paths take it (`_LogProduct`), in fp32 (fp64 in, fp64 out).
    Torch ops and autograd throughout, so the scales, t and S all get their gradients; it
    holds the [N, h, P, kappa] basis and [N, h, P, r] phi for backward (the fixed-spacing
    paths hold t and M only)."""
    dtype = torch.promote_types(t.dtype, torch.float32)
    B = basis_dense(t.to(dtype), S.shape[2], normalised=normalised, scale=knot_scale.to(dtype))
    phi = torch.einsum("nlpj,lpjm->nlpm", B, S.to(dtype))
    return _LogProduct.apply(phi, eps)


def reference_product(
    t: torch.Tensor,
    S: torch.Tensor,
    *,
    basis: str = "unnormalised",
    knot_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Steps 4-5 as the paper writes them: the plain reference of `spline_product`, for
    reading and as a check of the fast paths (tests compare them). t [N, h, P], S [h, P,
    kappa, r] -> M [N, h, r]. Dense in kappa (kappa/3 times the taps), a plain product (no
    log space, no guard where phi ~ 0), no chunking: never on a hot path. basis and
    knot_scale: the RECON choices (`bspline.basis_dense`)."""
    B = basis_dense(t, S.shape[2], normalised=basis == "normalised", scale=knot_scale)
    phi = torch.einsum("nlpj,lpjm->nlpm", B, S)  # phi_l[p, m] = sum_j B(t_p, j) S_l[p, j, m]
    return phi.prod(dim=2)  # M_l[m] = prod_p phi_l[p, m]                     [N, h, r]
