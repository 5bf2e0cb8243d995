"""The fused native spline product against the plain torch path and a float64 re-derivation
from SPEC 2.4-2.5 (dense basis, plain product); the deterministic segment reduction."""

from __future__ import annotations

import pytest
import torch
from test_lev import naive_product, random_inputs

from leviathan.model import lev_native
from leviathan.model.lev import segment_add_, spline_product

needs_native = pytest.mark.skipif(
    not lev_native.available(), reason="no C compiler for the native kernel"
)


def _grads(t: torch.Tensor, S: torch.Tensor, kernel: str, g: torch.Tensor):
    M = spline_product(t, S, 1e-30, 1 << 20, kernel)
    return (M, *torch.autograd.grad((M * g).sum(), (t, S)))


@needs_native
@pytest.mark.parametrize("P", [6, 20])  # 20 > RESCALE: the exponent rescaling is exercised
def test_native_matches_plain_and_float64_reference(P: int) -> None:
    torch.manual_seed(0)
    t, S = random_inputs(N=37, h=2, P=P, kappa=5, r=3, dtype=torch.float32)
    with torch.no_grad():
        S[0, 0, :, 1] *= -1  # negative factors
        S[1] *= 8.0  # products far from 1: 8^20 ~ 2^60 (rescaled, not overflowed)
    g = torch.randn(37, 2, 3)
    native = _grads(t, S, "native", g)
    plain = _grads(t, S, "plain", g)
    t64, S64 = t.detach().double().requires_grad_(), S.detach().double().requires_grad_()
    ref = naive_product(t64, S64)
    ref_grads = (ref, *torch.autograd.grad((ref * g.double()).sum(), (t64, S64)))
    for a, b, r in zip(native, plain, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * float(b.detach().abs().max()))
        torch.testing.assert_close(a.double(), r, rtol=1e-5, atol=1e-5 * float(r.abs().max()))


@needs_native
def test_native_forward_of_a_batch_is_each_id_alone_bitwise() -> None:
    """The forward runs ids in blocks (cache tiling); a block, or the ragged last one, must not
    change any id's arithmetic: each row equals that id computed by itself, bit for bit."""
    torch.manual_seed(1)
    t, S = random_inputs(N=70, h=2, P=20, kappa=5, r=3, dtype=torch.float32)
    with torch.no_grad():
        batch = spline_product(t, S, 1e-30, 1 << 20, "native")
        alone = torch.cat(
            [spline_product(t[i : i + 1], S, 1e-30, 1 << 20, "native") for i in range(70)]
        )
    assert torch.equal(batch, alone)


@needs_native
def test_native_gradient_is_exact_where_a_factor_is_zero() -> None:
    torch.manual_seed(3)
    t, S = random_inputs(N=1, h=1, P=4, kappa=5, r=2, dtype=torch.float32)
    with torch.no_grad():
        S[0, 2, :, 0] = 0.0
    g = torch.zeros(1, 1, 2)
    g[0, 0, 0] = 1.0
    native, plain = _grads(t, S, "native", g), _grads(t, S, "plain", g)
    assert abs(float(native[0][0, 0, 0])) < 1e-29
    torch.testing.assert_close(native[2], plain[2])
    assert float(native[2][0, 2, :, 0].abs().sum()) > 0


def test_deterministic_segment_reduction_equals_index_add() -> None:
    torch.manual_seed(4)
    rows = torch.randint(0, 7, (500,))
    values = torch.randn(500, 3, 4)
    fast = torch.zeros(7, 3, 4).index_add_(0, rows, values)
    det = torch.zeros(7, 3, 4)
    torch.use_deterministic_algorithms(True)
    try:
        segment_add_(det, rows, values)
        t, S = random_inputs(N=9)
        M = spline_product(t, S, 1e-30, 40, "plain")
        det_grads = torch.autograd.grad(M.sum(), (t, S))
    finally:
        torch.use_deterministic_algorithms(False)
    torch.testing.assert_close(det, fast)
    M = spline_product(t, S, 1e-30, 40, "plain")
    for a, b in zip(det_grads, torch.autograd.grad(M.sum(), (t, S)), strict=True):
        torch.testing.assert_close(a, b)
