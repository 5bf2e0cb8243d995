"""Pre-norm decoder-only Transformer: RMSNorm, RoPE, causal SDPA attention, SwiGLU, no biases.

The backbone maps embeddings [B, T, D] to final hidden states [B, T, D]; what turns ids into
embeddings and hidden states into logits is the variant's job (`leviathan.model.variants`).

The residual stream stays in its own dtype (fp32: `LanguageModel.hidden`); what branches off
it runs in the activation dtype (`activation_dtype`: autocast's, bf16 on a GPU): each RMSNorm
casts its input once and normalises in that dtype (`F.rms_norm` with input and weight of one
dtype, which torch can run as one fused kernel), so the Linears after it take its output
without autocast copies of their own; rotary embeddings rotate q and k in their dtype with
one flip and one multiply-add each (no fp32 round trip, no unbind/stack). Bytes per
token, layer and unit of D: BENCHMARKS.md, "Bytes per step".
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from leviathan.model.config import ModelConfig


def activation_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype computations on `t` run in here: autocast's, if it is on, else t's own."""
    if torch.is_autocast_enabled(t.device.type):
        return torch.get_autocast_dtype(t.device.type)
    return t.dtype


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x normalised in the activation dtype (one cast of x; the output in that dtype)."""
        dtype = activation_dtype(x)
        return F.rms_norm(x.to(dtype), (x.shape[-1],), self.weight.to(dtype), self.eps)


def rope_tables(head_dim: int, max_seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [T, head_dim/2] for rotary position embeddings (fp32)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of x [..., T, hd] by the position angle, in x's dtype:
    (x1, x2) * cos + (x2, x1) * (-sin, sin), a flip and a multiply-add; cos/sin [T, hd/2]."""
    pairs = x.unflatten(-1, (-1, 2))
    signed_sin = torch.stack((-sin, sin), dim=-1).to(x.dtype)  # [T, hd/2, 2]: the tables only
    return torch.addcmul(pairs * cos.to(x.dtype).unsqueeze(-1), pairs.flip(-1), signed_sin).flatten(
        -2
    )


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))


class SwiGLU(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(cfg.d_model, cfg.ffn_hidden, bias=False)
        self.up = nn.Linear(cfg.d_model, cfg.ffn_hidden, bias=False)
        self.down = nn.Linear(cfg.ffn_hidden, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.ffn = SwiGLU(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.ffn(self.ffn_norm(x))


class Backbone(nn.Module):
    """L blocks and a final RMSNorm; embeddings in, normalised hidden states out."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        cos, sin = rope_tables(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        std = self.cfg.init_std
        # GPT-2 style: residual output projections scaled by 1/sqrt(2 L).
        resid_std = std / math.sqrt(2 * self.cfg.n_layers)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(p)
            elif name.endswith(("proj.weight", "down.weight")):
                nn.init.normal_(p, 0.0, resid_std)
            else:
                nn.init.normal_(p, 0.0, std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]
        if T > self.cfg.max_seq_len:
            raise ValueError(
                f"sequence length {T} exceeds max_seq_len={self.cfg.max_seq_len}: "
                "shorten the input or raise max_seq_len in the model config"
            )
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.norm(x)
