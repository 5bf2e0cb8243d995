"""LEV: learned embedding vectorization (docs/method.md §2), the generator Leviathan uses
instead of a V x D input table.

Per token id i:
  1. digits  i -> (i_1..i_k) in base b, b = ceil(V^(1/k));
  2. seed    z = sum_r C_r[i_r]                          (k codebooks, b x d_seed);
  3. heads   t_l = sigmoid(LN_l(W_l z + c_l) * 1/2)     (l = 1..h, t_l in (0,1)^d_seed);
  4. basis   every coordinate t_p expanded in kappa quadratic B-splines (3 non-zero taps);
  5. KHRONOS phi_l[p, m] = sum_j B(t_p, j) S_l[p, j, m];  M_l[m] = prod_p phi_l[p, m];
  6. output  E_i = sum_l W_out_l M_l                      (one [h r] -> D matmul).

Steps 4-5 run in `leviathan.model.spline_product`: its fused paths (the knot-interval form,
the Triton, native C and plain kernels) and `reference_product`, the method as written.
`LEV.forward` evaluates each distinct id of a batch once (unique + gather).

The RECON choices (docs/method.md §6): `LEVConfig.seed_bias` (c_l in `head_proj`),
`basis="normalised"` (a per-(id, head) factor prod_p 1 / n(t_p) applied after any path's M)
and `knot_scale="learned"` (the dense-basis torch path `spline_product.scaled_spline_product`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from leviathan.model.bspline import N_TAPS
from leviathan.model.config import LEVConfig
from leviathan.model.generated import GeneratedInput
from leviathan.model.spline_product import reference_product, spline_product


class _AffineSigmoid(torch.autograd.Function):
    """t = sigmoid(u gain + shift), gain and shift [h, d_seed] broadcast over the ids: one
    pass over the coordinates forward, and backward the sigmoid's gradient, its product with
    the gain and the two parameter sums. On a GPU the eager coordinate chain's bytes are what
    LEV costs beside its kernel; autograd's own formulas for a multiply, an add and a scale
    (or for addcmul, which rescales u by its `value` first) pass over them twice as often."""

    @staticmethod
    def forward(ctx: Any, u: torch.Tensor, gain: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        t = torch.addcmul(shift, u, gain).sigmoid_()
        ctx.save_for_backward(u, gain, t)
        return t

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        u, gain, t = ctx.saved_tensors
        g = torch.ops.aten.sigmoid_backward(grad_t, t)  # grad_t t (1 - t)
        ids = tuple(range(g.dim() - gain.dim()))
        return g * gain, (g * u).sum(ids), g.sum(ids)


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
        # W_l (and c_l unless lev.seed_bias is off) for all heads at once
        self.head_proj = nn.Linear(d, h * d, bias=cfg.seed_bias)
        self.ln_weight = nn.Parameter(torch.ones(h, d))
        self.ln_bias = nn.Parameter(torch.zeros(h, d))
        self.splines = nn.Parameter(torch.empty(h, d, cfg.n_knots, cfg.rank))  # S_l
        self.out_proj = nn.Linear(h * cfg.rank, d_model, bias=False)  # [W_out_1 .. W_out_h]
        # s_lp, one per head and coordinate (lev.knot_scale 'learned'; KHRONOS)
        learned = cfg.knot_scale == "learned"
        self.knot_scale = nn.Parameter(torch.empty(h, d)) if learned else None
        self.kernel = "auto"  # spline product path (see `spline_product`); not a model setting
        self.reset_parameters()

    def reset_parameters(self) -> None:
        cfg = self.cfg
        nn.init.normal_(self.codebooks.table.weight, 0.0, cfg.init_std)
        nn.init.normal_(self.head_proj.weight, 0.0, cfg.init_std)
        if self.head_proj.bias is not None:
            nn.init.zeros_(self.head_proj.bias)
        if self.knot_scale is not None:
            nn.init.constant_(self.knot_scale, cfg.n_knots - 1.0)
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
        """Step 3: t [N, h, d_seed] in (0, 1).

        The LayerNorm's gain and bias and the 1/2 are one multiply-add after the plain
        LayerNorm, sigmoid(LN(u) (s w) + s b) (`_AffineSigmoid`)."""
        cfg = self.cfg
        u = self.head_proj(z).unflatten(-1, (cfg.n_heads, cfg.d_seed))
        u = F.layer_norm(u, (cfg.d_seed,), eps=cfg.ln_eps)
        s = cfg.sigmoid_scale
        gain, shift = self.ln_weight * s, self.ln_bias * s
        if torch.is_grad_enabled():
            return _AffineSigmoid.apply(u, gain, shift)
        # the same ops in place where nothing is saved for backward (materialize, evaluation):
        # bitwise the same values without a fresh [N, h, d_seed] buffer (a third of
        # materialize's time went to allocating and faulting such buffers in)
        return torch.addcmul(shift, u, gain, out=u).sigmoid_()

    def products(self, ids: torch.Tensor) -> torch.Tensor:
        """Steps 1-5: the heads' products [M_1 .. M_h] of each id, [N, h r] in the
        out-projection's dtype (the product itself is taken in fp32)."""
        cfg = self.cfg
        t = self.coordinates(self.codebooks(ids))
        M = spline_product(
            t,
            self.splines,
            cfg.log_eps,
            cfg.chunk_elems,
            self.kernel,
            basis=cfg.basis,
            knot_scale=self.knot_scale,
        )
        return M.flatten(1).to(self.out_proj.weight.dtype)

    def generate(self, ids: torch.Tensor) -> torch.Tensor:
        """Embeddings [N, D] of a flat id vector, one evaluation per entry (no dedup)."""
        return self.out_proj(self.products(ids))

    def generate_into(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        """Step 6 straight into `out` (the same matmul as `generate`'s out_proj: bitwise the
        same rows, without a [N, D] buffer per chunk and a copy of the whole table)."""
        W = self.out_proj.weight
        if out.dtype != W.dtype or out.device != W.device or not out.is_contiguous():
            return super().generate_into(ids, out)
        torch.mm(self.products(ids), W.t(), out=out)

    def reference(self, ids: torch.Tensor) -> torch.Tensor:
        """What `generate` computes, plainly: steps 1-3, then `reference_product` (steps
        4-5) and step 6, E = sum_l W_out_l M_l. For reading and tests, not for training."""
        t = self.coordinates(self.codebooks(ids))
        M = reference_product(t, self.splines, basis=self.cfg.basis, knot_scale=self.knot_scale)
        return M.flatten(1) @ self.out_proj.weight.T
