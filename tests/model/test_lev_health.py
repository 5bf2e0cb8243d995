"""LEV's health statistics (`leviathan.model.lev_health`, docs/method.md §6) against a float64
re-derivation from their definitions, under defaults and the other RECON choices, and
`leviathan params --init-stats` at the paper's 400m shape."""

from __future__ import annotations

import json

import pytest
import torch
from test_lev_recon import KAPPA, _lev, product64

from leviathan.cli import main
from leviathan.model.lev_health import lev_health, sample_ids


def _t64(m, ids: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def]
    cfg = m.cfg
    b, d, h = m.base, cfg.d_seed, cfg.n_heads
    table = m.codebooks.table.weight.double()
    z = sum(table[r * b + (ids // b**r) % b] for r in range(cfg.n_digits))
    u = z @ m.head_proj.weight.double().T
    if m.head_proj.bias is not None:
        u = u + m.head_proj.bias.double()
    u = u.view(-1, h, d)
    x = (u - u.mean(-1, keepdim=True)) / torch.sqrt(
        u.var(-1, unbiased=False, keepdim=True) + cfg.ln_eps
    )
    return torch.sigmoid((x * m.ln_weight.double() + m.ln_bias.double()) * cfg.sigmoid_scale)


@pytest.mark.parametrize(
    ("seed_bias", "basis", "knot_scale"),
    [(True, "unnormalised", "fixed"), (False, "normalised", "learned")],
)
def test_health_against_float64(seed_bias: bool, basis: str, knot_scale: str) -> None:
    m = _lev(seed_bias, basis, knot_scale)
    head = torch.randn(30, 8) * 0.05
    ids = sample_ids(30, 20)
    assert ids.unique().numel() == 20
    got = lev_health(m, head, ids)
    t = _t64(m, ids)
    h, r = m.cfg.n_heads, m.cfg.rank
    scale = None if m.knot_scale is None else m.knot_scale.double()
    M = product64(t, m.splines.double(), basis == "normalised", scale)
    W = m.out_proj.weight.double()
    for hd in range(h):
        tl = t[:, hd].flatten()
        near = ((tl < 1 / (KAPPA - 1)) | (tl > 1 - 1 / (KAPPA - 1))).double().mean().item()
        assert got["near_ends"][hd] == pytest.approx(near, abs=1e-12)
        Ml = M[:, hd].flatten()
        std = ((Ml - Ml.mean()) ** 2).sum().div(Ml.numel() - 1).sqrt()
        assert got["log_std_M"][hd] == pytest.approx(std.log().item(), abs=1e-5)
        part = M[:, hd] @ W[:, hd * r : (hd + 1) * r].T
        assert got["rms_head"][hd] == pytest.approx(part.pow(2).mean().sqrt().item(), rel=1e-5)
    E = M.flatten(1) @ W.T
    assert got["emb_rms"] == pytest.approx(E.pow(2).mean().sqrt().item(), rel=1e-5)
    assert got["head_row_rms"] == pytest.approx(head.double().pow(2).mean().sqrt().item())
    cos = [
        torch.dot(E[i], E[j]).item() / (E[i].norm() * E[j].norm()).item()
        for i in range(len(ids))
        for j in range(len(ids))
        if i != j
    ]
    assert got["mean_cosine"] == pytest.approx(sum(cos) / len(cos), abs=1e-5)
    assert 0.0 < max(got["near_ends"])  # the test LEV reaches the ends


def test_params_init_stats_at_the_paper_shape(capsys: pytest.CaptureFixture[str]) -> None:
    """The printed statistics of the 400m LEV at initialisation (seed 0) against float64."""
    from leviathan.model.config import model_config
    from leviathan.model.language_model import build_model

    assert (
        main(["params", "--init-stats", "--scale", "400m", "--vocab", "o200k_base", "--json"]) == 0
    )
    got = json.loads(capsys.readouterr().out)
    torch.manual_seed(0)
    model = build_model(model_config("400m", "o200k_base", "leviathan"))
    m = model.io.input
    ids = sample_ids(model.cfg.vocab_size)
    assert got["ids"] == ids.numel() == 256
    with torch.no_grad():
        t = _t64(m, ids)
        S = m.splines.double()
        M = torch.cat([product64(t[i : i + 8], S, False, None) for i in range(0, len(ids), 8)])
        K = m.cfg.n_knots
        near = ((t < 1 / (K - 1)) | (t > 1 - 1 / (K - 1))).double().mean((0, 2))
        log_std = torch.stack([M[:, hd].flatten().std().log() for hd in range(M.shape[1])])
        E = M.flatten(1) @ m.out_proj.weight.double().T
        unit = E / E.norm(dim=1, keepdim=True)
        cos = unit @ unit.T
        n = len(ids)
        mean_cos = (cos.sum() - cos.diagonal().sum()) / (n * (n - 1))
        head_rms = model.io.output_weight.double().pow(2).mean().sqrt()
    assert got["near_ends"] == pytest.approx(near.tolist(), abs=1e-12)
    assert got["log_std_M"] == pytest.approx(log_std.tolist(), abs=1e-4)
    assert got["emb_rms"] == pytest.approx(E.pow(2).mean().sqrt().item(), rel=1e-4)
    assert got["head_row_rms"] == pytest.approx(head_rms.item(), rel=1e-9)
    assert got["mean_cosine"] == pytest.approx(mean_cos.item(), abs=1e-4)
