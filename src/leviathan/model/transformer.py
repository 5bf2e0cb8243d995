"""The language model: a variant's input, the shared backbone, the variant's output head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from leviathan.model.backbone import Backbone
from leviathan.model.config import ModelConfig
from leviathan.model.variants import InputOutput, build_variant


class LanguageModel(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg.validate()
        self.io: InputOutput = build_variant(cfg)
        self.backbone = Backbone(cfg)

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] -> final normalised hidden states [B, T, D]."""
        return self.backbone(self.io.embed(ids))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] -> logits [B, T, V]."""
        return self.io.logits(self.hidden(ids))

    def loss(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy (nats) of `targets` [B, T] given `ids` [B, T]."""
        logits = self(ids)
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def build_model(cfg: ModelConfig, device: torch.device | str | None = None) -> LanguageModel:
    """Build (and initialise) a model; device='meta' gives shapes only, for accounting."""
    with torch.device(device or "cpu"):
        return LanguageModel(cfg)
