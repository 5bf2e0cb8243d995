"""train/optimizer.py: the optimizer step the trainer and the GPU check share: AdamW with the
recipe's hyperparameters (fused on CUDA, foreach elsewhere) and clipping to grad_clip."""

from __future__ import annotations

import torch

from leviathan.train.config import train_config
from leviathan.train.optimizer import build_optimizer, clip_gradients


def test_adamw_takes_the_recipe_and_fuses_on_cuda() -> None:
    recipe = train_config("micro", "gpt2", "tied", weight_decay=0.1, betas=[0.9, 0.95])
    params = [torch.nn.Parameter(torch.ones(3))]
    cpu = build_optimizer(params, recipe, torch.device("cpu"))
    assert cpu.defaults["lr"] == recipe.lr
    assert cpu.defaults["betas"] == (0.9, 0.95)
    assert cpu.defaults["weight_decay"] == 0.1
    assert cpu.defaults["eps"] == recipe.eps
    assert (cpu.defaults["foreach"], cpu.defaults["fused"]) == (True, False)
    # on CUDA, one fused kernel (what the roofline's optimizer part models); only the flags
    # are asked here, so the parameters may stay on the CPU
    cuda = build_optimizer(params, recipe, torch.device("cuda"))
    assert (cuda.defaults["foreach"], cuda.defaults["fused"]) == (False, True)


def test_clipping_scales_to_grad_clip_and_zero_turns_it_off() -> None:
    def grads() -> list[torch.nn.Parameter]:
        p = torch.nn.Parameter(torch.zeros(2))
        p.grad = torch.tensor([3.0, 4.0])  # norm 5
        return [p]

    clipped = grads()
    assert float(clip_gradients(clipped, 1.0)) == 5.0  # the norm before clipping
    assert torch.allclose(clipped[0].grad, torch.tensor([0.6, 0.8]))
    kept = grads()
    assert float(clip_gradients(kept, 0.0)) == 5.0
    assert torch.equal(kept[0].grad, torch.tensor([3.0, 4.0]))
