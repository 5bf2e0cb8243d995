import numpy as np
import pytest
import torch
from scipy.interpolate import BSpline

from leviathan.model.bspline import basis_dense, basis_taps


def scipy_basis(t: np.ndarray, n_knots: int) -> np.ndarray:
    """Independent reference: scipy's quadratic B-spline basis element of each centre."""
    x = t * (n_knots - 1)
    out = np.zeros((len(t), n_knots))
    for j in range(n_knots):
        element = BSpline.basis_element([j - 1.5, j - 0.5, j + 0.5, j + 1.5], extrapolate=False)
        out[:, j] = np.nan_to_num(element(x))
    return out


def taps_to_dense(t: torch.Tensor, n_knots: int) -> torch.Tensor:
    idx, w, _ = basis_taps(t, n_knots)
    dense = torch.zeros(*t.shape, n_knots, dtype=t.dtype)
    return dense.scatter_add_(-1, idx, w)


@pytest.mark.parametrize("n_knots", [3, 8, 16])
def test_basis_matches_scipy(n_knots: int) -> None:
    t = torch.linspace(0.0, 1.0, 997, dtype=torch.float64)
    expected = scipy_basis(t.numpy(), n_knots)
    np.testing.assert_allclose(basis_dense(t, n_knots).numpy(), expected, atol=1e-12)
    np.testing.assert_allclose(taps_to_dense(t, n_knots).numpy(), expected, atol=1e-12)


def test_at_most_three_taps_and_partition_of_unity_in_interior() -> None:
    n_knots = 16
    t = torch.rand(10_000, dtype=torch.float64)
    dense = taps_to_dense(t, n_knots)
    assert int((dense > 0).sum(-1).max()) <= 3
    x = t * (n_knots - 1)
    interior = (x >= 0.5) & (x <= n_knots - 1.5)
    assert interior.sum() > 5000
    torch.testing.assert_close(
        dense[interior].sum(-1), torch.ones(int(interior.sum()), dtype=torch.float64)
    )
    # near the ends the basis loses mass (no partition of unity there)
    assert float(dense[~interior].sum(-1).min()) < 0.99


def test_tap_derivative_matches_finite_differences() -> None:
    n_knots, h = 16, 1e-7
    gen = torch.Generator().manual_seed(0)
    t = torch.rand(20000, dtype=torch.float64, generator=gen) * 0.98 + 0.01
    idx, _, dw = basis_taps(t, n_knots)
    plus, minus = basis_dense(t + h, n_knots), basis_dense(t - h, n_knots)
    numeric = ((plus - minus) / (2 * h)).gather(-1, idx)
    # taps that fall outside [0, kappa) are clamped onto an end centre with weight 0
    raw = torch.floor(t * (n_knots - 1) + 0.5).long().unsqueeze(-1) + torch.arange(-1, 2)
    valid = (raw >= 0) & (raw < n_knots)
    # central differences are O(h) accurate across a knot (where B'' jumps): atol covers it
    torch.testing.assert_close(dw[valid], numeric[valid], atol=1e-4, rtol=1e-5)
    assert (dw[~valid] == 0).all()
