"""LEV: learned embedding vectorization (SPEC section 2), the generator Leviathan uses
instead of a V x D input table.

Per token id i:
  1. digits  i -> (i_1..i_k) in base b, b = ceil(V^(1/k));
  2. seed    z = sum_r C_r[i_r]                          (k codebooks, b x d_seed);
  3. heads   t_l = sigmoid(LN_l(W_l z + c_l) * 1/2)     (l = 1..h, t_l in (0,1)^d_seed);
  4. basis   every coordinate t_p expanded in kappa quadratic B-splines (3 non-zero taps);
  5. KHRONOS phi_l[p, m] = sum_j B(t_p, j) S_l[p, j, m];  M_l[m] = prod_p phi_l[p, m];
  6. output  E_i = sum_l W_out_l M_l                      (one [h r] -> D matmul).

Steps 4-5 run in `SplineProduct`, a fused autograd function: it never materialises the
dense [N, d_seed, kappa] basis, processes ids in chunks so its memory is bounded by
`LEVConfig.chunk_elems`, saves only t and M for backward (phi is recomputed), and computes
the product in fp32 log space with an exact gradient where a factor phi is ~0.
`LEV.forward` evaluates each distinct id of a batch once (unique + gather).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from leviathan.model.bspline import N_TAPS, basis_taps
from leviathan.model.config import LEVConfig
from leviathan.model.generated import GeneratedInput


def _chunks(n: int, per_item: int, budget: int) -> Iterator[slice]:
    step = max(1, budget // max(1, per_item))
    for start in range(0, n, step):
        yield slice(start, min(n, start + step))


def _tap_rows(idx: torch.Tensor, n_knots: int) -> torch.Tensor:
    """Row numbers into S viewed as [h * d_seed * kappa, r] for tap indices idx [n, h, P, 3]."""
    _, h, P, _ = idx.shape
    base = torch.arange(h * P, device=idx.device).view(1, h, P, 1) * n_knots
    return base + idx


def _phi(w: torch.Tensor, rows: torch.Tensor, S_rows: torch.Tensor) -> torch.Tensor:
    """phi [n, h, P, r] = sum over the 3 taps of weight * S row."""
    n, h, P, _ = rows.shape
    r = S_rows.shape[1]
    phi = None
    for tap in range(N_TAPS):
        g = S_rows.index_select(0, rows[..., tap].reshape(-1)).view(n, h, P, r)
        term = g.mul_(w[..., tap, None])
        phi = term if phi is None else phi.add_(term)
    assert phi is not None
    return phi


def _clamped_abs(phi: torch.Tensor, eps: float) -> torch.Tensor:
    """|phi| clamped below at eps: the factor magnitudes the log-space product uses."""
    return phi.abs().clamp_min_(eps)


class SplineProduct(torch.autograd.Function):
    """M [N, h, r] = prod_p sum_taps B(t[n, l, p]) S[l, p, tap, :]   (steps 4-5 of LEV)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        t: torch.Tensor,
        S: torch.Tensor,
        eps: float,
        chunk_elems: int,
    ) -> torch.Tensor:
        dtype = torch.promote_types(t.dtype, torch.float32)
        t32, S32 = t.to(dtype), S.to(dtype)
        N, h, P = t.shape
        kappa, r = S.shape[2], S.shape[3]
        S_rows = S32.reshape(h * P * kappa, r)
        M = torch.empty(N, h, r, dtype=dtype, device=t.device)
        for sl in _chunks(N, h * P * r, chunk_elems):
            idx, w, _ = basis_taps(t32[sl], kappa)
            phi = _phi(w, _tap_rows(idx, kappa), S_rows)
            log_abs = _clamped_abs(phi, eps).log_().sum(2)
            negative = (phi < 0).sum(2).remainder_(2)  # odd count of negative factors
            M[sl] = log_abs.exp_().mul_(1 - 2 * negative)
        ctx.save_for_backward(t, S, M)
        ctx.eps = eps
        ctx.chunk_elems = chunk_elems
        return M

    @staticmethod
    @once_differentiable
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad_M: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None]:
        t, S, M = ctx.saved_tensors  # type: ignore[attr-defined]
        dtype = M.dtype
        t32, S32 = t.to(dtype), S.to(dtype)
        N, h, P = t.shape
        kappa, r = S.shape[2], S.shape[3]
        S_rows = S32.reshape(h * P * kappa, r)
        gM = (grad_M.to(dtype) * M).unsqueeze(2)  # d loss / d log|M|, [N, h, 1, r]
        grad_t = torch.empty_like(t32)
        grad_S_rows = torch.zeros_like(S_rows)
        for sl in _chunks(N, h * P * r, ctx.chunk_elems):  # type: ignore[attr-defined]
            idx, w, dw = basis_taps(t32[sl], kappa)
            rows = _tap_rows(idx, kappa)
            phi = _phi(w, rows, S_rows)
            # d M / d phi_p = M / phi_p: the product of the other factors. With |phi_p|
            # clamped to eps in both the forward and here, this stays exact at phi_p = 0.
            mag = _clamped_abs(phi, ctx.eps)  # type: ignore[attr-defined]
            g_phi = gM[sl] / torch.where(phi < 0, -mag, mag)  # [n, h, P, r]
            n = phi.shape[0]
            gt = torch.zeros(n, h, P, dtype=dtype, device=t.device)
            for tap in range(N_TAPS):
                tap_rows = rows[..., tap].reshape(-1)
                S_tap = S_rows.index_select(0, tap_rows).view(n, h, P, r)
                gt.add_((g_phi * S_tap).sum(-1) * dw[..., tap])
                grad_S_rows.index_add_(0, tap_rows, (g_phi * w[..., tap, None]).view(-1, r))
            grad_t[sl] = gt
        grad_S = grad_S_rows.view_as(S).to(S.dtype) if ctx.needs_input_grad[1] else None
        return (grad_t.to(t.dtype) if ctx.needs_input_grad[0] else None), grad_S, None, None


def spline_product(t: torch.Tensor, S: torch.Tensor, eps: float, chunk_elems: int) -> torch.Tensor:
    return SplineProduct.apply(t, S, eps, chunk_elems)


class DigitCodebooks(nn.Module):
    """LEV steps 1-2 (shared with the factored_mlp ablation): id -> z [.., d_seed]."""

    def __init__(self, base: int, n_digits: int, d_seed: int) -> None:
        super().__init__()
        self.base = base
        self.table = nn.Embedding(n_digits * base, d_seed)  # C_1..C_k stacked: row r*b + digit
        self.register_buffer("offsets", torch.arange(n_digits) * base, persistent=False)
        self.register_buffer(
            "divisors", torch.tensor([base**r for r in range(n_digits)]), persistent=False
        )

    def digits(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [N] -> base-b digits [N, k], least significant first."""
        return torch.div(ids.unsqueeze(-1), self.divisors, rounding_mode="floor") % self.base

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """z [N, d_seed] = sum of the k codebook rows of the id's digits."""
        return self.table(self.digits(ids) + self.offsets).sum(-2)


class LEV(GeneratedInput):
    """ids (any shape, int64 in [0, V)) -> embeddings [..., D]."""

    def __init__(self, vocab_size: int, d_model: int, base: int, cfg: LEVConfig) -> None:
        super().__init__(vocab_size, d_model)
        self.base, self.cfg = base, cfg
        k, d, h = cfg.n_digits, cfg.d_seed, cfg.n_heads
        self.codebooks = DigitCodebooks(base, k, d)
        self.head_proj = nn.Linear(d, h * d, bias=True)  # W_l, c_l for all heads at once
        self.ln_weight = nn.Parameter(torch.ones(h, d))
        self.ln_bias = nn.Parameter(torch.zeros(h, d))
        self.splines = nn.Parameter(torch.empty(h, d, cfg.n_knots, cfg.rank))  # S_l
        self.out_proj = nn.Linear(h * cfg.rank, d_model, bias=False)  # [W_out_1 .. W_out_h]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        cfg = self.cfg
        nn.init.normal_(self.codebooks.table.weight, 0.0, cfg.init_std)
        nn.init.normal_(self.head_proj.weight, 0.0, cfg.init_std)
        nn.init.zeros_(self.head_proj.bias)
        nn.init.ones_(self.ln_weight)
        nn.init.zeros_(self.ln_bias)
        with torch.no_grad():
            self.splines.normal_(0.0, 1.0).mul_(cfg.spline_init_std).add_(1.0)
        nn.init.normal_(self.out_proj.weight, 0.0, cfg.init_std / math.sqrt(cfg.n_heads))

    def extra_flops_per_id(self) -> int:
        """FLOPs of steps 4-5 per id beyond the matmuls: 3 tap multiply-adds and the log-sum,
        for each of the h * d_seed * r factors (the accounting convention of `accounting`)."""
        cfg = self.cfg
        return cfg.n_heads * cfg.d_seed * cfg.rank * (2 * N_TAPS + 1)

    def coordinates(self, z: torch.Tensor) -> torch.Tensor:
        """Step 3: t [N, h, d_seed] in (0, 1)."""
        cfg = self.cfg
        u = self.head_proj(z).unflatten(-1, (cfg.n_heads, cfg.d_seed))
        u = F.layer_norm(u, (cfg.d_seed,), eps=cfg.ln_eps) * self.ln_weight + self.ln_bias
        return torch.sigmoid(u * cfg.sigmoid_scale)

    def generate(self, ids: torch.Tensor) -> torch.Tensor:
        """Embeddings [N, D] of a flat id vector, one evaluation per entry (no dedup)."""
        cfg = self.cfg
        t = self.coordinates(self.codebooks(ids))
        M = spline_product(t, self.splines, cfg.log_eps, cfg.chunk_elems)  # fp32 [N, h, r]
        return self.out_proj(M.flatten(1).to(self.out_proj.weight.dtype))
