"""Uniform quadratic B-spline basis on [0, 1] (docs/method.md §2, step 4).

kappa centres g_j = j / (kappa - 1). With x = t (kappa - 1), the basis function of centre j
is B(u), u = |x - j|:
    B(u) = 0.75 - u^2            for u < 0.5
         = 0.5 (1.5 - u)^2       for 0.5 <= u < 1.5
         = 0                     otherwise.
Let c = round(x) and f = x - c in [-0.5, 0.5]; only centres c-1, c, c+1 can be non-zero:
    w(c-1) = 0.5 (0.5 - f)^2,  w(c) = 0.75 - f^2,  w(c+1) = 0.5 (0.5 + f)^2,
which sum to 1 (partition of unity). Centres outside [0, kappa) get weight 0 (there the
basis is not a partition of unity: only the interior is). The basis is C^1, so the choice
of c at f = +-0.5 does not matter for values or derivatives. The interval x in
[c - 1/2, c + 1/2) is one knot interval of the spline (its knots are the half-integers);
`lev.py` evaluates the 3 taps there as one quadratic in f (`knot_interval_coefficients`).
`basis_dense` is the formula itself, over all kappa centres: the reference path.
"""

from __future__ import annotations

import torch

N_TAPS = 3


def basis_dense(t: torch.Tensor, n_knots: int) -> torch.Tensor:
    """Dense basis t.shape + (kappa,) straight from the formula (the reference path
    `lev.reference_product` and tests; not the hot path)."""
    centres = torch.arange(n_knots, dtype=t.dtype, device=t.device)
    u = (t.unsqueeze(-1) * (n_knots - 1) - centres).abs()
    inner = 0.75 - u**2
    outer = 0.5 * (1.5 - u) ** 2
    zero = torch.zeros((), dtype=t.dtype, device=t.device)
    return torch.where(u < 0.5, inner, torch.where(u < 1.5, outer, zero))
