"""The fused native spline product against the plain torch path and a float64 re-derivation
from docs/method.md §2, steps 4-5 (dense basis, plain product); the deterministic segment reduction."""

from __future__ import annotations

import pytest
import torch
from test_lev import naive_product, random_inputs

from leviathan.model import lev_native
from leviathan.model.spline_product import (
    knot_interval_coefficients,
    segment_add_,
    spline_product,
)

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
        r = r.detach()
        torch.testing.assert_close(
            a.detach().double(), r, rtol=1e-5, atol=1e-5 * float(r.abs().max())
        )


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
def test_native_backward_of_a_batch_is_each_id_alone_summed_in_id_order_bitwise() -> None:
    """The backward walks ids and coordinates in blocks (ragged here: 19 ids, 20 coordinates)
    and takes several ids' lane sums together. Neither may change the arithmetic: grad_t of
    each id is that id's alone, and grad_S is the ids' own gradients added in id order, bit for
    bit (deterministic: one fixed order, no atomics)."""
    torch.manual_seed(2)
    t, S = random_inputs(N=19, h=2, P=20, kappa=5, r=9, dtype=torch.float32)
    g = torch.randn(19, 2, 9)
    _, grad_t, grad_S = _grads(t, S, "native", g)
    alone = [_grads(t[i : i + 1], S, "native", g[i : i + 1]) for i in range(19)]
    assert torch.equal(grad_t, torch.cat([a[1] for a in alone]))
    # grad_S is linear in the per-interval coefficients' gradients (a fixed float map per id), so
    # compare at the kernel's own output: the coefficient gradient, accumulated id by id
    coef_grads = [
        lev_native.spline_backward(*_kernel_args(t[i : i + 1], S, g[i : i + 1])) for i in range(19)
    ]
    summed = torch.zeros_like(coef_grads[0][1])
    for _, gc in coef_grads:
        summed = summed + gc
    assert torch.equal(lev_native.spline_backward(*_kernel_args(t, S, g))[1], summed)
    assert grad_S.abs().sum() > 0


def _kernel_args(t: torch.Tensor, S: torch.Tensor, g: torch.Tensor):
    """The native backward's inputs for spline_product(t, S) with upstream gradient g."""
    h, P, kappa, r = S.shape
    with torch.no_grad():
        coef = knot_interval_coefficients(S).reshape(h, P, kappa, 3, r).contiguous()
        M = lev_native.spline_forward(t.detach().contiguous(), coef, 1e-30)
    return t.detach().contiguous(), coef, g * M, 1e-30


@needs_native
def test_native_gradient_is_exact_where_a_factor_is_zero() -> None:
    torch.manual_seed(3)
    t, S = random_inputs(N=1, h=1, P=4, kappa=5, r=2, dtype=torch.float32)
    with torch.no_grad():
        S[0, 2, :, 0] = 0.0
    g = torch.zeros(1, 1, 2)
    g[0, 0, 0] = 1.0
    native, plain = _grads(t, S, "native", g), _grads(t, S, "plain", g)
    assert abs(float(native[0][0, 0, 0].detach())) < 1e-29
    torch.testing.assert_close(native[2], plain[2])
    assert float(native[2][0, 2, :, 0].abs().sum()) > 0


@needs_native
def test_native_kernel_turns_a_nan_coordinate_into_nan_not_an_out_of_range_read() -> None:
    """A diverged model can hand the kernel a NaN t. Its knot interval must stay in range (a NaN cast
    to int is INT_MIN in C: a read far outside the coefficients); that id's outputs and
    gradients turn NaN, which the trainer's non-finite check reports, and no other id's do."""
    torch.manual_seed(5)
    t, S = random_inputs(N=12, h=2, P=20, kappa=5, r=9, dtype=torch.float32)
    with torch.no_grad():
        t[3, 1, 7] = float("nan")
    M, grad_t, _ = _grads(t, S, "native", torch.ones(12, 2, 9))
    assert M[3, 1].isnan().all()
    assert grad_t[3, 1].isnan().any()
    rest = torch.ones(12, dtype=torch.bool)
    rest[3] = False
    assert M[rest].isfinite().all()
    assert grad_t[rest].isfinite().all()


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


# A fresh interpreter (a library once loaded stays loaded in a process) that loads the kernel
# from the cache named by LEVIATHAN_KERNEL_CACHE, logging to stderr, and checks one product
# against the plain path.
LOAD_KERNEL = """
import logging, torch
logging.basicConfig(level=logging.WARNING)
from leviathan.model import lev_native
from leviathan.model.spline_product import spline_product
assert lev_native.available()
torch.manual_seed(0)
t = torch.rand(5, 2, 3).clamp(0.02, 0.98)  # t [N, h, P] in (0, 1), as test_lev's inputs
S = 1 + 0.3 * torch.randn(2, 3, 6, 3)  # S [h, P, kappa, r]
native = spline_product(t, S, 1e-30, 1 << 20, "native")
plain = spline_product(t, S, 1e-30, 1 << 20, "plain")
assert torch.allclose(native, plain, rtol=1e-5, atol=1e-6), (native - plain).abs().max()
"""

# A library with the kernel's entry points that computes nothing: what a foreign or tampered
# cache entry could be (the old loader took any file of the right name)
FOREIGN = """
#include <stdint.h>
void lev_spline_forward(void) {}
void lev_spline_backward(void) {}
"""


@needs_native
@pytest.mark.parametrize("damage", ["foreign", "garbage"])
def test_a_library_in_the_cache_that_is_not_the_built_one_is_rebuilt(tmp_path, damage) -> None:
    import os
    import shutil
    import subprocess
    import sys

    from leviathan.io import read_json, sha256_file

    env = {**os.environ, "LEVIATHAN_KERNEL_CACHE": str(tmp_path / "cache")}
    first = subprocess.run(
        [sys.executable, "-c", LOAD_KERNEL], env=env, capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    (lib,) = (tmp_path / "cache").glob("lev_spline_*.so")
    assert read_json(lib.with_name(lib.name + ".sha256.json"))["sha256"] == sha256_file(lib)
    if damage == "foreign":
        src = tmp_path / "foreign.c"
        src.write_text(FOREIGN)
        cc = shutil.which(os.environ.get("CC", "cc"))
        subprocess.run([cc, "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    else:
        lib.write_bytes(b"\x7fELF not a library")
    placed = sha256_file(lib)
    again = subprocess.run(
        [sys.executable, "-c", LOAD_KERNEL], env=env, capture_output=True, text=True
    )
    assert again.returncode == 0, again.stderr  # the kernel computes LEV's product again
    assert "not the library built from this source" in again.stderr
    assert sha256_file(lib) != placed
    assert read_json(lib.with_name(lib.name + ".sha256.json"))["sha256"] == sha256_file(lib)
