"""LEV's Triton kernels (`lev_triton`) on CPU under Triton's interpreter (on a GPU: compiled),
against a float64 re-derivation from docs/method.md §2, steps 4-5 (`naive_product`: dense basis, plain
product) and the native and plain paths: random and adversarial coordinates (on knots, at 0
and 1, factors exactly +-0), several block sizes, id counts that are not multiples of a block,
and bitwise reruns. tests/conftest.py sets TRITON_INTERPRET=1 before Triton is imported."""

from __future__ import annotations

import pytest
import torch
from test_lev import naive_product, random_inputs

from leviathan.model import lev_native, lev_triton
from leviathan.model.spline_product import (
    _plain_backward,
    _plain_forward,
    knot_interval_coefficients,
    spline_product,
)

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
EPS = 1e-30
pytestmark = pytest.mark.skipif(
    not lev_triton.usable(DEVICE),
    reason="Triton is not importable here (Linux x86-64 only), or it was imported without "
    "TRITON_INTERPRET=1 in a process with no GPU",
)
# the interpreter computes as the C kernel does (no fused multiply-adds): bitwise the same
BITWISE_NATIVE = DEVICE.type == "cpu" and lev_native.available()


def _inputs(N: int, P: int, kappa: int = 5, r: int = 3, seed: int = 0):
    torch.manual_seed(seed)
    t, S = random_inputs(N=N, h=2, P=P, kappa=kappa, r=r, dtype=torch.float32)
    with torch.no_grad():
        S[0, 0, :, 1] *= -1  # negative factors
        S[1] *= 4.0  # products far from 1 (rescaled, not overflowed)
    return t.detach(), S.detach()


def _coef(S: torch.Tensor) -> torch.Tensor:
    return knot_interval_coefficients(S).contiguous()


def _forward(t: torch.Tensor, coef: torch.Tensor, kappa: int, block: int = 16) -> torch.Tensor:
    return lev_triton.spline_forward(t.to(DEVICE), coef.to(DEVICE), kappa, EPS, block).cpu()


def _native_forward(t: torch.Tensor, coef: torch.Tensor, kappa: int) -> torch.Tensor:
    h, P, r = t.shape[1], t.shape[2], coef.shape[-1]
    return lev_native.spline_forward(t.contiguous(), coef.view(h, P, kappa, 3, r).contiguous(), EPS)


@pytest.mark.parametrize(("N", "P", "block"), [(37, 20, 16), (5, 6, 64), (70, 9, 32)])
def test_forward_equals_the_float64_reference(N: int, P: int, block: int) -> None:
    """P = 20 > RESCALE: the exponent rescaling runs; N not a multiple of the block."""
    t, S = _inputs(N, P)
    M = _forward(t, _coef(S), 5, block)
    ref = naive_product(t.double(), S.double())
    torch.testing.assert_close(M.double(), ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()))


@pytest.mark.skipif(not BITWISE_NATIVE, reason="bitwise only against the C kernel on CPU")
@pytest.mark.parametrize("block", [16, 64])
def test_forward_is_the_native_kernel_bitwise(block: int) -> None:
    t, S = _inputs(37, 20, seed=1)
    assert torch.equal(_forward(t, _coef(S), 5, block), _native_forward(t, _coef(S), 5))


def _adversarial(kappa: int = 5) -> torch.Tensor:
    """t on every knot centre and half-way point, at 0 and 1 (clamped intervals)."""
    knots = torch.arange(2 * (kappa - 1) + 1, dtype=torch.float32) / (2 * (kappa - 1))
    return torch.cat([knots, torch.tensor([0.0, 1.0, 1e-7, 1 - 1e-7])])


def test_forward_at_knots_ends_and_exact_zero_factors() -> None:
    """Every coordinate on a knot, a half-knot, 0 or 1; a (p, m) whose spline is 0 everywhere
    gives phi = +0 exactly (M = +-eps x the rest); a coefficient row of -0.0 gives phi = -0.0,
    which counts negative. Held against the plain and native paths and float64."""
    kappa = 5
    values = _adversarial(kappa)
    N, P = len(values), 6
    t = values[torch.randperm(N * 2 * P) % N].view(N, 2, P).contiguous()
    _, S = _inputs(N, P, kappa)
    S[0, 2, :, 0] = 0.0  # phi exactly +0 for every id, head 0, lane 0
    coef = _coef(S)
    coef.view(2, P, kappa, 3, -1)[1, 4, :, :, 2] = -0.0  # phi exactly -0.0: head 1, lane 2
    M = _forward(t, coef, kappa)
    plain = _plain_forward(t, coef, kappa, EPS, 1 << 20)
    torch.testing.assert_close(M, plain, rtol=1e-5, atol=0.0)
    assert (M[:, 1, 2] < 0).equal(plain[:, 1, 2] < 0)
    assert bool((M[:, 0, 0].abs() < 1e-28).all())
    ref = naive_product(t.double(), S.double())
    torch.testing.assert_close(M[:, :, 1].double(), ref[:, :, 1], rtol=1e-5, atol=1e-12)
    if BITWISE_NATIVE:
        assert torch.equal(M, _native_forward(t, coef, kappa))


def test_forward_reruns_bitwise_and_handles_no_ids() -> None:
    t, S = _inputs(23, 10, seed=2)
    coef = _coef(S)
    assert torch.equal(_forward(t, coef, 5), _forward(t, coef, 5))
    assert _forward(t[:0], coef, 5).shape == (0, 2, 3)


def test_a_nan_coordinate_turns_its_row_nan_and_no_other() -> None:
    t, S = _inputs(12, 6, seed=3)
    t[3, 1, 4] = float("nan")
    M = _forward(t, _coef(S), 5)
    assert M[3, 1].isnan().all()
    rest = torch.ones_like(M, dtype=torch.bool)
    rest[3, 1] = False
    assert M[rest].isfinite().all()


def _backward(t, coef, kappa, g, block=16, splits=None):
    """The kernel pair's (M, grad_t, grad_coef) for upstream gradient g."""
    t, coef, g = t.to(DEVICE), coef.to(DEVICE), g.to(DEVICE)
    M = lev_triton.spline_forward(t, coef, kappa, EPS, block)
    grad_t, grad_coef = lev_triton.spline_backward(t, coef, M, g, kappa, EPS, block, splits)
    return M.cpu(), grad_t.cpu(), grad_coef.cpu()


def _grad_S(S: torch.Tensor, grad_coef: torch.Tensor) -> torch.Tensor:
    """The spline parameters' gradient from the table's (the table is linear in S)."""
    S = S.detach().requires_grad_()
    return torch.autograd.grad(knot_interval_coefficients(S), S, grad_coef.to(S.dtype))[0]


@pytest.mark.parametrize(
    ("N", "P", "block", "splits"), [(37, 20, 16, 1), (19, 6, 32, 2), (70, 9, 16, 3)]
)
def test_gradients_equal_the_float64_reference(N: int, P: int, block: int, splits: int) -> None:
    """P = 6, 9: the last program's coordinates run past P; splits: the ids walked in ranges
    (the last one short) into partial tables summed in order."""
    t, S = _inputs(N, P, r=9)
    g = torch.randn(N, 2, 9)
    _, grad_t, grad_coef = _backward(t, _coef(S), 5, g, block, splits)
    t64, S64 = t.double().requires_grad_(), S.double().requires_grad_()
    ref_t, ref_S = torch.autograd.grad((naive_product(t64, S64) * g.double()).sum(), (t64, S64))
    for got, ref in ((grad_t, ref_t), (_grad_S(S64, grad_coef), ref_S)):
        scale = float(ref.abs().max())
        torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-5 * scale)


def test_gradients_against_the_plain_and_native_paths_and_rerun_bitwise() -> None:
    """Both gradients sum in another order than the other paths (a tree over the lanes,
    one-hot products over the ids): close to theirs, and a rerun is bitwise."""
    t, S = _inputs(29, 12, r=5, seed=4)
    g = torch.randn(29, 2, 5)
    coef = _coef(S)
    M, grad_t, grad_coef = _backward(t, coef, 5, g)
    plain_t, plain_coef = _plain_backward(t, coef, g * M, 5, EPS, 1 << 20)
    torch.testing.assert_close(grad_t, plain_t, rtol=1e-5, atol=1e-6 * float(plain_t.abs().max()))
    scale = float(plain_coef.abs().max())
    torch.testing.assert_close(grad_coef, plain_coef, rtol=1e-5, atol=1e-6 * scale)
    again = _backward(t, coef, 5, g)
    assert torch.equal(again[1], grad_t)
    assert torch.equal(again[2], grad_coef)
    split = _backward(t, coef, 5, g, splits=2)
    assert torch.equal(split[1], grad_t)  # grad_t does not depend on the ranges
    torch.testing.assert_close(split[2], grad_coef, rtol=1e-6, atol=1e-6 * scale)
    if lev_native.available():
        native_t, native_coef = lev_native.spline_backward(
            t, coef.view(2, 12, 5, 3, 5).contiguous(), g * M, EPS
        )
        torch.testing.assert_close(
            grad_t, native_t, rtol=1e-5, atol=1e-6 * float(native_t.abs().max())
        )
        torch.testing.assert_close(
            grad_coef, native_coef.view_as(grad_coef), rtol=1e-5, atol=1e-6 * scale
        )


def test_gradient_is_exact_where_a_factor_is_zero() -> None:
    """phi = 0 for (head 0, p = 2, lane 0): d M / d S there is the product of the other
    factors, finite and non-zero (the eps clamp divides exactly back out)."""
    t, S = _inputs(3, 4, seed=5)
    S[0, 2, :, 0] = 0.0
    g = torch.zeros(3, 2, 3)
    g[:, 0, 0] = 1.0
    _, grad_t, grad_coef = _backward(t, _coef(S), 5, g)
    t64, S64 = t.double().requires_grad_(), S.double().requires_grad_()
    ref_t, ref_S = torch.autograd.grad(naive_product(t64, S64)[:, 0, 0].sum(), (t64, S64))
    grad_S = _grad_S(S64, grad_coef)
    torch.testing.assert_close(grad_S.double(), ref_S, rtol=1e-5, atol=1e-7)
    assert float(grad_S[0, 2, :, 0].abs().sum()) > 0
    torch.testing.assert_close(grad_t.double(), ref_t, rtol=1e-5, atol=1e-7)


def test_backward_at_knots_and_ends() -> None:
    kappa = 5
    values = _adversarial(kappa)
    N, P = len(values), 6
    torch.manual_seed(6)
    t = values[torch.randperm(N * 2 * P) % N].view(N, 2, P).contiguous()
    _, S = _inputs(N, P, kappa)
    g = torch.randn(N, 2, 3)
    _, grad_t, grad_coef = _backward(t, _coef(S), kappa, g)
    t64, S64 = t.double().requires_grad_(), S.double().requires_grad_()
    ref_t, ref_S = torch.autograd.grad((naive_product(t64, S64) * g.double()).sum(), (t64, S64))
    torch.testing.assert_close(grad_t.double(), ref_t, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(_grad_S(S64, grad_coef).double(), ref_S, rtol=1e-4, atol=1e-5)


def _product_grads(t: torch.Tensor, S: torch.Tensor, kernel: str, g: torch.Tensor, fn=None):
    t, S = t.to(DEVICE).requires_grad_(), S.to(DEVICE).requires_grad_()
    fn = fn or spline_product
    M = fn(t, S, EPS, 1 << 20, kernel)
    grads = torch.autograd.grad((M * g.to(DEVICE)).sum(), (t, S))
    return [x.detach().cpu() for x in (M, *grads)]


def test_spline_product_through_the_custom_op_equals_float64_and_the_plain_path() -> None:
    """kernel="triton" end to end: the custom op, its autograd formula, the table's own
    gradient back to S."""
    t, S = _inputs(21, 10, r=5, seed=7)
    g = torch.randn(21, 2, 5)
    triton = _product_grads(t, S, "triton", g)
    plain = _product_grads(t, S, "plain", g)
    t64, S64 = t.double().requires_grad_(), S.double().requires_grad_()
    ref = naive_product(t64, S64)
    refs = [ref.detach(), *torch.autograd.grad((ref * g.double()).sum(), (t64, S64))]
    for got, p, r in zip(triton, plain, refs, strict=True):
        scale = float(r.abs().max())
        torch.testing.assert_close(got.double(), r, rtol=1e-4, atol=1e-5 * scale)
        torch.testing.assert_close(got, p, rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.slow  # ~15 s: inductor compiles the graph around the interpreted kernels
def test_inductor_runs_the_triton_op_as_one_node_equal_to_eager() -> None:
    t, S = _inputs(30, 6, seed=8)
    g = torch.randn(30, 2, 3)
    torch._dynamo.reset()
    compiled = torch.compile(spline_product, fullgraph=True)
    got = _product_grads(t, S, "triton", g, compiled)
    for a, b in zip(got, _product_grads(t, S, "triton", g), strict=True):
        assert torch.equal(a, b)
