"""The optimizer step as training runs it: AdamW built from the recipe's hyperparameters (fused
on CUDA, one kernel; the foreach ops elsewhere) and the gradients clipped to `grad_clip` first.

The trainer steps with these two functions, and so does the GPU check (`bench/gpu_check.py`),
so the check times the optimizer the roofline models (`step_count.OPTIMIZER_IMPL`). Only torch
is imported: the GPU image has no data layer."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import torch


class AdamWRecipe(Protocol):
    """The recipe's optimizer fields (`TrainConfig` has them)."""

    @property
    def lr(self) -> float: ...
    @property
    def betas(self) -> tuple[float, float]: ...
    @property
    def eps(self) -> float: ...
    @property
    def weight_decay(self) -> float: ...


def build_optimizer(
    params: Iterable[torch.nn.Parameter], recipe: AdamWRecipe, device: torch.device
) -> torch.optim.AdamW:
    """AdamW over `params` with the recipe's hyperparameters: fused on CUDA, foreach elsewhere."""
    return torch.optim.AdamW(
        params,
        lr=recipe.lr,
        betas=recipe.betas,
        eps=recipe.eps,
        weight_decay=recipe.weight_decay,
        fused=device.type == "cuda",
        foreach=device.type != "cuda",
    )


def clip_gradients(params: Iterable[torch.nn.Parameter], grad_clip: float) -> torch.Tensor:
    """Clip the gradients' total norm to `grad_clip` (0: no clipping); the norm before clipping."""
    clip = grad_clip if grad_clip > 0 else float("inf")
    return torch.nn.utils.clip_grad_norm_(params, clip)
