"""LEV's health, seen (docs/method.md §6): statistics of the generator on a fixed sample of ids.

Per head l, over the sample:
  near_ends    the share of coordinates t within one knot spacing 1 / (kappa - 1) of 0 or 1
               (where the basis choice `lev.basis` acts and the taps run out);
  log_std_M    ln of the standard deviation of the products M_l over ids and ranks;
  rms_head     the RMS of the head's contribution W_out_l M_l to the embeddings.
Over the heads: the RMS of the generated embeddings E, the RMS of the output head's rows
(all entries of the D x V matrix), their ratio, and the mean pairwise cosine of the sample's
embeddings (1: they all point one way). The trainer records them at initialisation and at
each validation (`kind: lev_health` in the metrics log); `leviathan params --init-stats`
prints them at initialisation.
"""

from __future__ import annotations

from typing import Any

import torch

from leviathan.model.lev import LEV

SAMPLE = 256


def sample_ids(vocab_size: int, n: int = SAMPLE) -> torch.Tensor:
    """A fixed sample: n ids spread evenly over [0, V) (all of them if V <= n)."""
    n = min(n, vocab_size)
    return torch.arange(n, dtype=torch.int64) * vocab_size // n


@torch.no_grad()
def lev_health(lev: LEV, head_weight: torch.Tensor, ids: torch.Tensor) -> dict[str, Any]:
    """The statistics of the module docstring for `ids` (head_weight: the D x V output
    head, rows as stored)."""
    cfg = lev.cfg
    device = lev.out_proj.weight.device
    ids = ids.to(device)
    t = lev.coordinates(lev.codebooks(ids)).double()  # [n, h, d]
    spacing = 1.0 / (cfg.n_knots - 1)
    near = ((t < spacing) | (t > 1.0 - spacing)).double().mean((0, 2))
    M = lev.products(ids).double().view(ids.numel(), cfg.n_heads, cfg.rank)
    log_std = M.permute(1, 0, 2).reshape(cfg.n_heads, -1).std(1).log()
    W = lev.out_proj.weight.double().view(-1, cfg.n_heads, cfg.rank)  # [D, h, r]
    parts = torch.einsum("nlr,dlr->nld", M, W)  # W_out_l M_l
    rms_head = parts.pow(2).mean((0, 2)).sqrt()
    E = parts.sum(1)
    emb_rms = E.pow(2).mean().sqrt().item()
    head_rms = head_weight.double().pow(2).mean().sqrt().item()
    unit = E / E.norm(dim=1, keepdim=True).clamp_min(1e-30)
    n = unit.shape[0]
    cos = unit @ unit.T
    mean_cos = ((cos.sum() - cos.diagonal().sum()) / max(1, n * (n - 1))).item()
    return {
        "ids": n,
        "near_ends": near.tolist(),
        "log_std_M": log_std.tolist(),
        "rms_head": rms_head.tolist(),
        "emb_rms": emb_rms,
        "head_row_rms": head_rms,
        "emb_vs_head_rms": emb_rms / head_rms if head_rms > 0 else float("nan"),
        "mean_cosine": mean_cos,
    }


def model_health(model: Any) -> dict[str, Any] | None:
    """`lev_health` of a LanguageModel's LEV input on the fixed sample; None for a variant
    without LEV."""
    io = model.io
    if not isinstance(io.input, LEV):
        return None
    return lev_health(io.input, io.output_weight, sample_ids(model.cfg.vocab_size))
