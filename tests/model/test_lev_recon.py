"""LEV's three RECON choices (docs/method.md §6: `lev.seed_bias`, `lev.basis`, `lev.knot_scale`)
under every combination, for every path (plain torch ops, the custom op, the native C kernel
where a compiler exists, the Triton kernels under the interpreter, `materialize`), forward and
gradients against a float64 re-derivation written here from the method's equations (§2):

* the basis from the truncated-power form of the centred quadratic B-spline,
  B(u) = ((u + 3/2)_+^2 - 3 (u + 1/2)_+^2 + 3 (u - 1/2)_+^2 - (u - 3/2)_+^2) / 2, at
  u_j = (t - j / (kappa - 1)) s (s = kappa - 1 fixed, or the learned scale), not the
  piecewise form the code uses; normalised: divided by its sum over the kappa centres;
* phi = sum_j B_j S_j, M = the plain product over the coordinates, E = sum_l W_out_l M_l;
* steps 1-3 from their definitions (base-b digits by repeated division, LayerNorm from mean
  and variance, the sigmoid as 1 / (1 + exp(-y))).

Coordinates reach both ends of [0, 1] (0, 1 and the outermost half-intervals, where the
normalisation acts) and some factors are exactly zero. Shapes are tiny (Triton's interpreter
is slow): the whole file takes about 15 s on one core.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from leviathan.model import lev_native, lev_triton
from leviathan.model.config import LEVConfig
from leviathan.model.lev import LEV
from leviathan.model.spline_product import spline_product

COMBOS = list(
    itertools.product((True, False), ("unnormalised", "normalised"), ("fixed", "learned"))
)
EPS = 1e-30
KAPPA = 5


def _paths() -> list[str]:
    paths = ["plain", "auto"]
    if lev_native.available():
        paths.append("native")
    if lev_triton.usable(torch.device("cpu")):
        paths.append("triton")
    return paths


PATHS = _paths()


def bspline64(t: torch.Tensor, kappa: int, scale: torch.Tensor | None) -> torch.Tensor:
    """[..., kappa] in float64 from the truncated-power form (module docstring)."""
    s = torch.full(t.shape, kappa - 1.0, dtype=torch.float64) if scale is None else scale
    centres = torch.arange(kappa, dtype=torch.float64) / (kappa - 1)
    u = (t.unsqueeze(-1) - centres) * s.expand(t.shape).unsqueeze(-1)

    def p2(x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, min=0.0) ** 2

    return 0.5 * (p2(u + 1.5) - 3 * p2(u + 0.5) + 3 * p2(u - 0.5) - p2(u - 1.5))


def product64(
    t: torch.Tensor, S: torch.Tensor, normalised: bool, scale: torch.Tensor | None
) -> torch.Tensor:
    """M [N, h, r] = prod_p phi_p, phi_p = sum_j B_j(t_p) S_j (normalised: B / sum_j B)."""
    B = bspline64(t, S.shape[2], scale)
    if normalised:
        B = B / B.sum(-1, keepdim=True)
    phi = (B.unsqueeze(-1) * S.unsqueeze(0)).sum(3)  # [N, h, P, r]
    M = torch.ones(phi.shape[0], phi.shape[1], phi.shape[3], dtype=torch.float64)
    for p in range(phi.shape[2]):
        M = M * phi[:, :, p]
    return M


def _coordinates(N: int, h: int, P: int) -> torch.Tensor:
    """t [N, h, P] in [0, 1]: random, plus both ends and the outermost half-intervals."""
    torch.manual_seed(1)
    t = torch.rand(N, h, P, dtype=torch.float64)
    ends = torch.tensor([0.0, 1.0, 0.03, 0.97, 0.5 / (KAPPA - 1), 1 - 0.2 / (KAPPA - 1)])
    t[0, :, : len(ends)] = ends[:P].to(torch.float64)
    t[1, :, :] = torch.where(torch.arange(P) % 2 == 0, 0.0, 1.0).to(torch.float64)
    return t


def _splines(h: int, P: int, r: int) -> torch.Tensor:
    torch.manual_seed(2)
    S = 1.0 + 0.3 * torch.randn(h, P, KAPPA, r, dtype=torch.float64)
    S[0, 1, :, 0] = 0.0  # an exactly zero factor for every id (head 0, coordinate 1, lane 0)
    S[1, 0, :, 2] *= -1.0  # negative factors
    return S


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("scaled", [False, True], ids=["fixed", "learned"])
@pytest.mark.parametrize("basis_name", ["unnormalised", "normalised"])
def test_spline_product_and_gradients_against_float64(
    path: str, basis_name: str, scaled: bool
) -> None:
    N, h, P, r = 6, 2, 6, 3
    t64 = _coordinates(N, h, P)
    S64 = _splines(h, P, r)
    scale64 = None
    if scaled:
        torch.manual_seed(3)
        scale64 = (KAPPA - 1.0) * (0.5 + torch.rand(h, P, dtype=torch.float64))  # 0.5x..1.5x
    t = t64.float().requires_grad_()
    S = S64.float().requires_grad_()
    scale = None if scale64 is None else scale64.float().requires_grad_()
    if scale is not None and path in ("native", "triton"):
        with pytest.raises(ValueError, match="lev.knot_scale"):
            spline_product(t, S, EPS, 1 << 20, path, basis=basis_name, knot_scale=scale)
        return
    M = spline_product(t, S, EPS, 1 << 20, path, basis=basis_name, knot_scale=scale)
    t_ref = t64.clone().requires_grad_()
    S_ref = S64.clone().requires_grad_()
    s_ref = None if scale64 is None else scale64.clone().requires_grad_()
    M_ref = product64(t_ref, S_ref, basis_name == "normalised", s_ref)
    assert (M_ref[:, 0, 0] == 0).all()  # the zero factor reaches M
    top = M_ref.abs().max().item()
    assert (M.double() - M_ref).abs().max().item() <= 2e-6 * top
    torch.manual_seed(4)
    g = torch.randn(M_ref.shape, dtype=torch.float64)
    (M * g.float()).sum().backward()
    (M_ref * g).sum().backward()
    pairs = [(t.grad, t_ref.grad), (S.grad, S_ref.grad)]
    if scale is not None:
        pairs.append((scale.grad, s_ref.grad))
    for got, want in pairs:
        assert got is not None and want is not None
        assert (got.double() - want).abs().max().item() <= 2e-5 * want.abs().max().item()


def lev64(m: LEV, ids: torch.Tensor) -> torch.Tensor:
    """Steps 1-6 in float64 from their definitions, with m's parameters."""
    cfg = m.cfg
    k, b, d, h = cfg.n_digits, m.base, cfg.d_seed, cfg.n_heads
    table = m.codebooks.table.weight.double()
    rest = ids.clone()
    z = torch.zeros(ids.numel(), d, dtype=torch.float64)
    for r in range(k):
        z = z + table[r * b + rest % b]
        rest = rest // b
    W = m.head_proj.weight.double()
    u = z @ W.T
    if m.head_proj.bias is not None:
        u = u + m.head_proj.bias.double()
    u = u.view(-1, h, d)
    mean = u.mean(-1, keepdim=True)
    var = ((u - mean) ** 2).mean(-1, keepdim=True)
    y = (u - mean) / torch.sqrt(var + cfg.ln_eps) * m.ln_weight.double() + m.ln_bias.double()
    t = 1.0 / (1.0 + torch.exp(-y * cfg.sigmoid_scale))
    scale = None if m.knot_scale is None else m.knot_scale.double()
    M = product64(t, m.splines.double(), cfg.basis == "normalised", scale)
    return M.flatten(1) @ m.out_proj.weight.double().T


def _lev(seed_bias: bool, basis: str, knot_scale: str) -> LEV:
    cfg = LEVConfig(
        n_digits=2,
        d_seed=6,
        n_heads=2,
        n_knots=KAPPA,
        rank=3,
        seed_bias=seed_bias,
        basis=basis,
        knot_scale=knot_scale,
    )
    torch.manual_seed(5)
    m = LEV(30, 8, 6, cfg)
    with torch.no_grad():  # wide LayerNorm outputs: coordinates near both ends of [0, 1]
        m.ln_weight.mul_(12.0)
        if m.head_proj.bias is not None:
            m.head_proj.bias.normal_(0.0, 0.02)
        if m.knot_scale is not None:
            m.knot_scale.mul_(0.6 + 0.8 * torch.rand(m.knot_scale.shape))
    return m


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("seed_bias", "basis", "knot_scale"), COMBOS)
def test_lev_every_combination_against_float64(
    path: str, seed_bias: bool, basis: str, knot_scale: str
) -> None:
    m = _lev(seed_bias, basis, knot_scale)
    m.kernel = path
    ids = torch.arange(30)
    if knot_scale == "learned" and path in ("native", "triton"):
        with pytest.raises(ValueError, match="lev.knot_scale"):
            m.generate(ids)
        return
    E = m.generate(ids)
    E_ref = lev64(m, ids)
    t = m.coordinates(m.codebooks(ids)).detach()
    assert (t < 0.5 / (KAPPA - 1)).any() and (t > 1 - 0.5 / (KAPPA - 1)).any()
    top = E_ref.abs().max().item()
    assert (E.double() - E_ref).abs().max().item() <= 1e-5 * top
    torch.manual_seed(6)
    g = torch.randn(E.shape, dtype=torch.float64)
    (E * g.float()).sum().backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters()}
    m64 = _lev(seed_bias, basis, knot_scale).double()
    (lev64(m64, ids) * g).sum().backward()
    for name, p in m64.named_parameters():
        want = p.grad
        assert want is not None, name
        got = grads[name].double()
        assert (got - want).abs().max().item() <= 1e-4 * want.abs().max().item(), name
    # step 6 evaluated once over all V ids for evaluation and serving: the same embeddings
    with torch.no_grad():
        table = m.materialize()
    assert (table.double() - E_ref).abs().max().item() <= 1e-5 * top


@pytest.mark.parametrize(("seed_bias", "knot_scale"), [(True, "fixed"), (False, "learned")])
def test_parameter_counts_follow_the_choices(seed_bias: bool, knot_scale: str) -> None:
    m = _lev(seed_bias, "unnormalised", knot_scale)
    h, d = m.cfg.n_heads, m.cfg.d_seed
    base = _lev(True, "unnormalised", "fixed")
    n = sum(p.numel() for p in m.parameters())
    n0 = sum(p.numel() for p in base.parameters())
    assert n - n0 == (0 if seed_bias else -h * d) + (h * d if knot_scale == "learned" else 0)
    assert base.knot_scale is None and (m.knot_scale is None) == (knot_scale == "fixed")
