"""Parameter and FLOP accounting, computed from the model itself (one counter).

Parameters are counted from the instantiated modules (on the meta device, so the 1.2B
shape costs no memory), split into input side, backbone, output head and the unique total
(a tied head shares the input table and adds nothing).

FLOPs per token follow the usual convention (Kaplan et al.; PaLM appendix B): 2 FLOPs per
multiply-accumulate of every matmul, attention scores and mixing as dense T x T
(4 T D per layer, what the SDPA math path computes; causal kernels skip about half),
training = 3 x forward. Table lookups cost nothing; generated inputs (LEV and the MLP
ablations) are counted per evaluated id and reported per token as if every position held a
distinct id, an upper bound: in training the generator runs once per distinct id of a batch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from torch import nn

from leviathan.model.config import ModelConfig
from leviathan.model.language_model import LanguageModel, build_model


def _linear_flops(module: nn.Module) -> int:
    return sum(2 * m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))


def _count(params: Any) -> int:
    return sum(p.numel() for p in params)


@dataclass(frozen=True)
class Accounting:
    variant: str
    vocab_size: int
    d_model: int
    n_layers: int
    seq_len: int
    input_params: int
    backbone_params: int
    head_params: int  # 0 for tied: the head is the input table
    total_params: int
    input_flops: int  # forward, per token (every position a distinct id for generators)
    backbone_flops: int  # forward matmuls of the blocks, per token
    attention_flops: int  # forward QK^T and AV, per token at seq_len
    head_flops: int  # forward, per token

    @property
    def forward_flops(self) -> int:
        return self.input_flops + self.backbone_flops + self.attention_flops + self.head_flops

    @property
    def train_flops(self) -> int:
        return 3 * self.forward_flops

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["forward_flops"] = self.forward_flops
        d["train_flops"] = self.train_flops
        return d


def account_model(model: LanguageModel, seq_len: int | None = None) -> Accounting:
    cfg = model.cfg
    T = seq_len or cfg.max_seq_len
    io = model.io
    input_params = _count(io.input.parameters())
    head_params = 0 if io.head is None else _count(io.head.parameters())
    backbone_params = _count(model.backbone.parameters())
    extra = sum(
        m.extra_flops_per_id() for m in io.input.modules() if hasattr(m, "extra_flops_per_id")
    )
    return Accounting(
        variant=cfg.variant,
        vocab_size=cfg.vocab_size,
        d_model=cfg.d_model,
        n_layers=cfg.n_layers,
        seq_len=T,
        input_params=input_params,
        backbone_params=backbone_params,
        head_params=head_params,
        total_params=_count(model.parameters()),
        input_flops=_linear_flops(io.input) + extra,
        backbone_flops=_linear_flops(model.backbone),
        attention_flops=4 * T * cfg.d_model * cfg.n_layers,
        head_flops=2 * cfg.vocab_size * cfg.d_model,
    )


def account(cfg: ModelConfig, seq_len: int | None = None) -> Accounting:
    """Accounting of a config, built on the meta device (no memory, any scale)."""
    return account_model(build_model(cfg, device="meta"), seq_len)


def overhead(a: Accounting, reference: Accounting) -> dict[str, float]:
    """Relative parameter and training-FLOP overhead of `a` over `reference` (fractions)."""
    return {
        "params": a.total_params / reference.total_params - 1.0,
        "train_flops": a.train_flops / reference.train_flops - 1.0,
    }
