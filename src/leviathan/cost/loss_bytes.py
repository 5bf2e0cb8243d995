"""The GPU loss's HBM bytes: the model the roofline uses (`fused_loss_bytes`) and the count
of the real code's reads and writes it is held to (`counted_loss_bytes`, on FakeTensors).

The GPU path (`leviathan.model.loss.fused_linear_cross_entropy`) under bf16 autocast: per
logit, G in bf16 written once by its kernel and read by the two GEMMs of the backward; per
element of the hidden states [N, D] (bf16, as the backbone's final norm gives them) and of the
head [V, D] (an fp32 parameter), their reads by the kernels and GEMMs and the head's casts.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from leviathan.cost.traffic import TrafficCounter
from leviathan.device import forced_policy
from leviathan.model.loss import LossFn, fused_linear_cross_entropy
from leviathan.model.loss_head import HEAD_ROWS_MULTIPLE

FUSED_BYTES_PER_LOGIT = 6
FUSED_BYTES_PER_HIDDEN = 8  # read by both kernels and d W's GEMM, dh written: 4 x 2
FUSED_BYTES_PER_HEAD = 28  # cast 6, pad and its backward 4 + 4, three reads, dw 2, cast back 6


def fused_loss_bytes(n_tokens: int, vocab: int, d_model: int) -> int:
    """HBM bytes of the GPU path's loss forward and backward for `n_tokens` hidden states of
    width `d_model` and a head of `vocab` rows (padded to HEAD_ROWS_MULTIPLE): what
    `TrafficCounter` counts for it (tests/model/test_loss_kernel.py), the roofline's model."""
    padded = vocab + -vocab % HEAD_ROWS_MULTIPLE
    return (
        FUSED_BYTES_PER_LOGIT * n_tokens * padded
        + FUSED_BYTES_PER_HIDDEN * n_tokens * d_model
        + FUSED_BYTES_PER_HEAD * padded * d_model
    )


def counted_loss_bytes(n_tokens: int, vocab: int, d_model: int, loss: LossFn | None = None) -> int:
    """Bytes `TrafficCounter` counts for one forward and backward of `loss` (default: the
    GPU path's, `fused_linear_cross_entropy`) under the GPU rule and bf16 CPU autocast, as a
    GPU runs it: bf16 hidden states (the backbone's final norm gives them so), an fp32 head,
    on FakeTensors (no memory, any shape in seconds; CPU ones: a CPU build has no fake CUDA
    autograd, and the kernels' custom ops count alike on any device)."""
    with FakeTensorMode(), forced_policy("gpu"):
        hidden = torch.empty(n_tokens, d_model, dtype=torch.bfloat16, requires_grad=True)
        weight = torch.empty(vocab, d_model, requires_grad=True)
        targets = torch.zeros(n_tokens, dtype=torch.long)
        with TrafficCounter() as counter, torch.autocast("cpu", dtype=torch.bfloat16):
            (loss or fused_linear_cross_entropy)(hidden, weight, targets).backward()
    return counter.by_part()["all"]
