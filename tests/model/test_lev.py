import pytest
import torch
from torch.func import functional_call

from leviathan.model import lev_native
from leviathan.model.bspline import basis_dense
from leviathan.model.config import LEVConfig
from leviathan.model.lev import LEV
from leviathan.model.spline_product import reference_product, spline_product

SMALL = LEVConfig(d_seed=6, n_heads=2, n_knots=5, rank=3, chunk_elems=40)


def naive_product(t: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """Dense reference: phi = B(t) @ S over all kappa centres, then a plain product over p."""
    B = basis_dense(t, S.shape[2])  # [N, h, P, kappa]
    phi = torch.einsum("nlpj,lpjm->nlpm", B, S)
    return phi.prod(dim=2)


def random_inputs(
    N: int = 7, h: int = 2, P: int = 6, kappa: int = 5, r: int = 3, dtype=torch.float64
):
    t = torch.rand(N, h, P, dtype=dtype).clamp(0.02, 0.98).requires_grad_()
    S = (1 + 0.3 * torch.randn(h, P, kappa, r, dtype=dtype)).requires_grad_()
    return t, S


def test_spline_product_matches_naive_dense_including_gradients() -> None:
    torch.manual_seed(0)
    t, S = random_inputs()
    S.data[0, 0, :, 1] *= -1  # negative factors: the sign must survive the log space
    M = spline_product(t, S, 1e-30, 40)
    g = torch.randn_like(M)
    gt, gS = torch.autograd.grad((M * g).sum(), (t, S))
    # the float64 re-derivation here and the plain reference beside the fused path in lev.py
    for ref in (naive_product(t, S), reference_product(t, S)):
        torch.testing.assert_close(M, ref)
        rt, rS = torch.autograd.grad((ref * g).sum(), (t, S))
        torch.testing.assert_close(gt, rt)
        torch.testing.assert_close(gS, rS)


def test_spline_product_chunking_is_exact() -> None:
    torch.manual_seed(1)
    t, S = random_inputs(N=33)
    whole = spline_product(t, S, 1e-30, 1 << 30)
    torch.testing.assert_close(spline_product(t, S, 1e-30, 1), whole, rtol=0, atol=0)


def test_spline_product_gradcheck() -> None:
    torch.manual_seed(2)
    t, S = random_inputs(N=4)
    assert torch.autograd.gradcheck(lambda a, b: spline_product(a, b, 1e-30, 40), (t, S))


def test_gradient_is_exact_where_a_factor_is_zero() -> None:
    # Make phi exactly zero for one (n, l, p, m): every S row that coordinate touches is 0.
    torch.manual_seed(3)
    t, S = random_inputs(N=1, h=1, P=4, kappa=5, r=2)
    with torch.no_grad():
        S[0, 2, :, 0] = 0.0
    M = spline_product(t, S, 1e-30, 40)
    assert abs(float(M.detach()[0, 0, 0])) < 1e-29  # |phi| clamped to eps: zero up to eps
    gt, gS = torch.autograd.grad(M[0, 0, 0], (t, S))
    # d M / d S[0, 2, j, 0] = B_j(t_2) * prod_{p != 2} phi_p: finite, non-zero, exact.
    B = basis_dense(t.detach(), 5)[0, 0]  # [P, kappa]
    phi = torch.einsum("pj,pjm->pm", B, S.detach()[0])
    others = phi[[0, 1, 3], 0].prod()
    torch.testing.assert_close(gS[0, 2, :, 0], B[2] * others)
    assert torch.isfinite(gt).all()
    assert torch.isfinite(gS).all()


def _lev(vocab: int = 200, d_model: int = 8, cfg: LEVConfig = SMALL, dtype=torch.float32) -> LEV:
    from leviathan.model.config import digit_base

    torch.manual_seed(0)
    return LEV(vocab, d_model, digit_base(vocab, cfg.n_digits), cfg).to(dtype)


def test_lev_gradcheck_float64() -> None:
    lev = _lev(dtype=torch.float64)
    ids = torch.tensor([0, 5, 17, 199, 42])
    names = [n for n, _ in lev.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in lev.parameters())

    def f(*ps: torch.Tensor) -> torch.Tensor:
        return functional_call(lev, dict(zip(names, ps, strict=True)), (ids,))

    assert torch.autograd.gradcheck(f, params)


KERNEL_PATHS = [
    "plain",
    pytest.param(
        "native",
        marks=pytest.mark.skipif(not lev_native.available(), reason="no C compiler"),
    ),
]


@pytest.mark.parametrize("kernel", KERNEL_PATHS)
def test_fast_paths_equal_the_plain_reference_including_gradients(kernel: str) -> None:
    """LEV.generate (fused spline product, torch or native kernel) against LEV.reference
    (dense basis, plain product, output projection): outputs and every parameter's gradient."""
    lev = _lev(vocab=300)
    lev.kernel = kernel
    with torch.no_grad():
        lev.splines[0, 1, :, 2] *= -1  # negative factors: the sign must survive the log space
    ids = torch.tensor([0, 5, 17, 299, 42, 17, 128])
    fast, ref = lev.generate(ids), lev.reference(ids)
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-6)
    g = torch.randn_like(ref)
    params = list(lev.parameters())
    fast_grads = torch.autograd.grad((fast * g).sum(), params)
    ref_grads = torch.autograd.grad((ref * g).sum(), params)
    for name, a, b in zip(
        [n for n, _ in lev.named_parameters()], fast_grads, ref_grads, strict=True
    ):
        scale = float(b.abs().max())
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * scale, msg=name)


def test_repeated_ids_equal_per_position_evaluation() -> None:
    lev = _lev()
    ids = torch.tensor([[3, 3, 150, 7], [7, 199, 3, 0]])
    out = lev(ids)
    per_position = torch.stack([lev.generate(i.view(1))[0] for i in ids.flatten()]).view(2, 4, -1)
    torch.testing.assert_close(out, per_position)
    assert out.shape == (2, 4, 8)


def test_forward_evaluates_each_distinct_id_once() -> None:
    lev = _lev()
    seen: list[int] = []
    lev.codebooks.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].numel()))
    lev(torch.tensor([[5, 5, 5, 9], [9, 5, 1, 1]]))
    assert seen == [3]


def test_materialize_equals_forward() -> None:
    lev = _lev(vocab=300)
    table = lev.materialize(chunk=64)
    assert table.shape == (300, 8)
    ids = torch.tensor([[0, 299, 77], [128, 128, 5]])
    torch.testing.assert_close(table[ids], lev(ids).detach())
    # materialize writes step 6 straight into the table: bitwise generate()'s rows
    with torch.no_grad():
        rows = torch.cat(
            [lev.generate(torch.arange(s, min(300, s + 64))) for s in range(0, 300, 64)]
        )
    assert torch.equal(table, rows)


def test_coordinates_equal_the_float64_equation() -> None:
    """Step 3 as the method writes it, t_l = sigmoid(LN_l(W_l z + c_l) / 2), re-derived in
    float64 with the LayerNorm by hand (mean, biased variance, gain, bias), against the fused
    multiply-add and sigmoid the model runs in fp32."""
    lev = _lev(vocab=300)
    with torch.no_grad():
        lev.ln_weight.normal_()
        lev.ln_bias.normal_()
    z = lev.codebooks(torch.arange(300))
    h, d = lev.cfg.n_heads, lev.cfg.d_seed
    W, c = lev.head_proj.weight.double(), lev.head_proj.bias.double()
    u = (z.double() @ W.T + c).view(-1, h, d)
    centred = u - u.mean(-1, keepdim=True)
    ln = centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + lev.cfg.ln_eps)
    expected = torch.sigmoid((ln * lev.ln_weight.double() + lev.ln_bias.double()) * 0.5)
    torch.testing.assert_close(lev.coordinates(z).double(), expected, rtol=0, atol=2e-6)


def test_coordinates_without_autograd_are_the_training_ones_bitwise() -> None:
    """Without autograd (materialize, evaluation) step 3 runs its ops in place; the values must
    be those the training path computes, bit for bit, so evaluation sees the trained model."""
    lev = _lev(vocab=300)
    with torch.no_grad():
        lev.ln_weight.normal_()
        lev.ln_bias.normal_()
    z = lev.codebooks(torch.arange(300))
    trained = lev.coordinates(z)
    assert trained.requires_grad
    with torch.no_grad():
        assert torch.equal(lev.coordinates(z), trained.detach())
    with torch.inference_mode():
        assert torch.equal(lev.coordinates(z.detach()), trained.detach())


def test_digits_and_codebook_rows() -> None:
    lev = _lev(vocab=200)  # b = ceil(200^(1/3)) = 6
    assert lev.base == 6
    ids = torch.tensor([0, 1, 6, 36, 199])
    digits = lev.codebooks.digits(ids)
    recon = (digits * torch.tensor([1, 6, 36])).sum(-1)
    torch.testing.assert_close(recon, ids)
    assert int(digits.max()) < 6


def test_out_of_range_ids_are_rejected() -> None:
    lev = _lev(vocab=200)
    with pytest.raises(ValueError, match=r"token id 200 is outside \[0, 200\)"):
        lev(torch.tensor([1, 200]))
    with pytest.raises(ValueError, match=r"token id -1"):
        lev(torch.tensor([-1, 3]))


def test_default_lev_parameter_count_is_the_papers() -> None:
    from leviathan.model.config import digit_base

    with torch.device("meta"):
        lev = LEV(200019, 2048, digit_base(200019, 3), LEVConfig())
    assert lev.base == 59
    assert sum(p.numel() for p in lev.parameters()) == 1_205_376 + 512 * 2048 == 2_253_952
