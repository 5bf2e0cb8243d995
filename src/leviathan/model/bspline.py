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
`spline_product.py` evaluates the 3 taps there as one quadratic in f (`knot_interval_coefficients`).
`basis_dense` is the formula itself, over all kappa centres: the reference path.

The two RECON choices of the basis (docs/method.md §6, `LEVConfig.basis` and `knot_scale`):
* normalised: every basis function divided by the sum over the kappa centres. With the
  fixed spacing that sum is 1 less the one tap dropped at an end: for t in [0, 1] only the
  outermost half-intervals lose one (c = 0 drops w(c-1), c = kappa-1 drops w(c+1)), so the
  sum is a per-coordinate scalar n(t) in [0.875, 1] (`end_sum`), the same for every rank.
* learned scale s (one per head and coordinate): u_j = |t - g_j| s, with the centres g_j
  where they are (KHRONOS; t is not clamped: the sigmoid keeps it in (0, 1)). At
  s = kappa - 1 this is the fixed basis; otherwise a basis function spans 3 / s, not 3
  knot spacings, and more or fewer than 3 taps are non-zero.
"""

from __future__ import annotations

import torch

N_TAPS = 3


def basis_dense(
    t: torch.Tensor,
    n_knots: int,
    *,
    normalised: bool = False,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dense basis t.shape + (kappa,) straight from the formula (the reference path
    `spline_product.reference_product`, the learned-scale path and tests; not the fixed hot path).

    scale: None (the fixed spacing, x = t (kappa - 1)) or the learned scales, broadcast
    against t (t [N, h, P], scale [h, P]): u_j = |t - j / (kappa - 1)| scale. normalised:
    divided by the sum over the kappa centres (clamped to 1e-12 where a narrow scale leaves
    a gap with no basis function)."""
    centres = torch.arange(n_knots, dtype=t.dtype, device=t.device)
    if scale is None:
        u = (t.unsqueeze(-1) * (n_knots - 1) - centres).abs()
    else:
        u = (t.unsqueeze(-1) - centres / (n_knots - 1)).abs() * scale.to(t.dtype).unsqueeze(-1)
    inner = 0.75 - u**2
    outer = 0.5 * (1.5 - u) ** 2
    zero = torch.zeros((), dtype=t.dtype, device=t.device)
    B = torch.where(u < 0.5, inner, torch.where(u < 1.5, outer, zero))
    if normalised:
        B = B / B.sum(-1, keepdim=True).clamp_min(1e-12)
    return B


def end_sum(t: torch.Tensor, n_knots: int) -> torch.Tensor:
    """n(t): the sum of the in-range taps of the fixed-spacing basis, t.shape, for t in
    [0, 1]: 1 less the tap dropped beyond an end (module docstring). Differentiable in t
    (the centre c is piecewise constant; f carries the gradient)."""
    x = t * (n_knots - 1)
    c = torch.floor(x + 0.5).clamp(0, n_knots - 1)
    f = x - c
    zero = torch.zeros((), dtype=t.dtype, device=t.device)
    below = torch.where(c == 0, 0.5 * (0.5 - f) ** 2, zero)  # w(c-1), centre -1
    above = torch.where(c == n_knots - 1, 0.5 * (0.5 + f) ** 2, zero)  # w(c+1), centre kappa
    return 1.0 - below - above
