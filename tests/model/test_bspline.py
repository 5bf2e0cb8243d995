import numpy as np
import pytest
import torch
from scipy.interpolate import BSpline

from leviathan.model.bspline import basis_dense


def scipy_basis(t: np.ndarray, n_knots: int) -> np.ndarray:
    """Independent reference: scipy's quadratic B-spline basis element of each centre."""
    x = t * (n_knots - 1)
    out = np.zeros((len(t), n_knots))
    for j in range(n_knots):
        element = BSpline.basis_element([j - 1.5, j - 0.5, j + 0.5, j + 1.5], extrapolate=False)
        out[:, j] = np.nan_to_num(element(x))
    return out


@pytest.mark.parametrize("n_knots", [3, 8, 16])
def test_basis_matches_scipy(n_knots: int) -> None:
    t = torch.linspace(0.0, 1.0, 997, dtype=torch.float64)
    expected = scipy_basis(t.numpy(), n_knots)
    np.testing.assert_allclose(basis_dense(t, n_knots).numpy(), expected, atol=1e-12)


def test_at_most_three_non_zero_and_partition_of_unity_in_interior() -> None:
    n_knots = 16
    t = torch.rand(10_000, dtype=torch.float64)
    dense = basis_dense(t, n_knots)
    assert int((dense > 0).sum(-1).max()) <= 3
    x = t * (n_knots - 1)
    interior = (x >= 0.5) & (x <= n_knots - 1.5)
    assert interior.sum() > 5000
    torch.testing.assert_close(
        dense[interior].sum(-1), torch.ones(int(interior.sum()), dtype=torch.float64)
    )
    # near the ends the basis loses mass (no partition of unity there)
    assert float(dense[~interior].sum(-1).min()) < 0.99
