"""The language model: a variant's input, the shared backbone, the variant's output head."""

from __future__ import annotations

import torch
from torch import nn

from leviathan.model.config import ModelConfig
from leviathan.model.loss import DEFAULT_CHUNK_ELEMS, linear_cross_entropy, token_losses
from leviathan.model.transformer import Backbone
from leviathan.model.variants import InputOutput, build_variant


class LanguageModel(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg.validate()
        self.io: InputOutput = build_variant(cfg)
        self.backbone = Backbone(cfg)

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] -> final normalised hidden states [B, T, D].

        The embeddings enter the residual stream in fp32 whatever the variant: under bf16
        autocast a generated input (LEV, the MLPs) ends in a Linear and would otherwise put a
        bf16 residual stream against the tables' fp32 one, confounding the comparison."""
        return self.backbone(self.io.embed(ids).float())

    def forward(
        self,
        ids: torch.Tensor,
        targets: torch.Tensor | None = None,
        chunk_elems: int = DEFAULT_CHUNK_ELEMS,
    ) -> torch.Tensor:
        """ids [B, T] -> logits [B, T, V]; with `targets` [B, T], the mean cross-entropy.

        The loss path never materialises the whole batch's logits (`leviathan.model.loss`);
        targets equal to -100 are ignored. (One entry point for both, so that DDP's
        forward hooks see the training loss.)"""
        if targets is None:
            return self.io.logits(self.hidden(ids))
        h = self.hidden(ids).flatten(0, 1)
        return linear_cross_entropy(h, self.io.output_weight, targets.flatten(), chunk_elems)

    def loss(
        self, ids: torch.Tensor, targets: torch.Tensor, chunk_elems: int = DEFAULT_CHUNK_ELEMS
    ) -> torch.Tensor:
        """Mean next-token cross-entropy (nats) of `targets` [B, T] given `ids` [B, T]."""
        return self(ids, targets, chunk_elems)

    @torch.no_grad()
    def token_losses(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-token cross-entropy [B, T] (0 where the target is -100), for evaluation."""
        h = self.hidden(ids).flatten(0, 1)
        return token_losses(h, self.io.output_weight, targets.flatten()).view_as(targets)


def build_model(cfg: ModelConfig, device: torch.device | str | None = None) -> LanguageModel:
    """Build (and initialise) a model; device='meta' gives shapes only, for accounting."""
    with torch.device(device or "cpu"):
        return LanguageModel(cfg)
