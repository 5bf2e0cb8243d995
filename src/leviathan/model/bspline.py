"""Uniform quadratic B-spline basis on [0, 1], in compact (3-tap) form.

kappa centres g_j = j / (kappa - 1). With x = t (kappa - 1), the basis function of centre j
is B(u), u = |x - j|:
    B(u) = 0.75 - u^2            for u < 0.5
         = 0.5 (1.5 - u)^2       for 0.5 <= u < 1.5
         = 0                     otherwise.
Let c = round(x) and f = x - c in [-0.5, 0.5]; only centres c-1, c, c+1 can be non-zero:
    w(c-1) = 0.5 (0.5 - f)^2,  w(c) = 0.75 - f^2,  w(c+1) = 0.5 (0.5 + f)^2,
which sum to 1 (partition of unity). Centres outside [0, kappa) get weight 0 (there the
basis is not a partition of unity: only the interior is). The basis is C^1, so the choice
of c at f = +-0.5 does not matter for values or derivatives.
"""

from __future__ import annotations

import torch

N_TAPS = 3


def basis_taps(t: torch.Tensor, n_knots: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For coordinates t (any shape) return (index, weight, d weight / d t), each t.shape + (3,).

    index is int64 in [0, n_knots) (out-of-range taps are clamped and get weight 0).
    """
    scale = n_knots - 1
    x = t * scale
    c = torch.floor(x + 0.5)
    f = x - c
    half = 0.5
    w = torch.stack((half * (half - f) ** 2, 0.75 - f * f, half * (half + f) ** 2), dim=-1)
    dw = torch.stack((-(half - f), -2.0 * f, half + f), dim=-1) * scale
    idx = c.long().unsqueeze(-1) + torch.arange(-1, 2, device=t.device)
    valid = (idx >= 0) & (idx < n_knots)
    w = torch.where(valid, w, torch.zeros((), dtype=w.dtype, device=w.device))
    dw = torch.where(valid, dw, torch.zeros((), dtype=dw.dtype, device=dw.device))
    return idx.clamp_(0, n_knots - 1), w, dw


def basis_dense(t: torch.Tensor, n_knots: int) -> torch.Tensor:
    """Dense basis t.shape + (kappa,) straight from the formula (the reference path
    `lev.reference_product` and tests; not the hot path)."""
    centres = torch.arange(n_knots, dtype=t.dtype, device=t.device)
    u = (t.unsqueeze(-1) * (n_knots - 1) - centres).abs()
    inner = 0.75 - u**2
    outer = 0.5 * (1.5 - u) ** 2
    zero = torch.zeros((), dtype=t.dtype, device=t.device)
    return torch.where(u < 0.5, inner, torch.where(u < 1.5, outer, zero))
