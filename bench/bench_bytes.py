"""Bytes a GPU step moves in the loss and in the backbone, counted without a GPU.

`leviathan.model.traffic.TrafficCounter` over FakeTensors (no memory, seconds) adds up every
kernel's reads and writes of one micro-batch's forward and backward at a scale's real shapes
(default: 400m, 32 x 512 tokens, o200k). Printed per part:

  * loss: bytes per logit (N tokens x V padded classes) of the chunked loss (the CPU rule's
    code, run under the GPU rule) and of the GPU path (the Triton kernels' custom ops), both
    on fake CPU tensors under bf16 CPU autocast, beside
    `leviathan.model.loss.fused_loss_bytes`, the model the roofline uses;
  * backbone: bytes per token, layer and unit of D of the blocks' forward and backward (fp32
    residual stream, bf16 autocast as on a GPU), and the ops that move the most.

    python bench/bench_bytes.py [--scale 400m] [--vocab o200k] [--micro-batch 32] [--top 8]
"""

from __future__ import annotations

import argparse

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from leviathan.model import model_config
from leviathan.model.loss import (
    HEAD_ROWS_MULTIPLE,
    counted_loss_bytes,
    fused_linear_cross_entropy,
    fused_loss_bytes,
    linear_cross_entropy,
)
from leviathan.model.traffic import TrafficCounter
from leviathan.model.transformer import Backbone


def backbone_bytes(scale: str, vocab: str, batch: int, top: int) -> tuple[int, int, int, int]:
    """Bytes of the backbone's forward and backward at `scale` (bf16 CPU autocast, fp32
    residual stream); prints its `top` ops. Returns (bytes, tokens, layers, D)."""
    cfg = model_config(scale, vocab, "tied")
    T, D = cfg.max_seq_len, cfg.d_model
    with FakeTensorMode():
        backbone = Backbone(cfg)
        x = torch.empty(batch, T, D, requires_grad=True)
        with TrafficCounter() as counter, torch.autocast("cpu", dtype=torch.bfloat16):
            backbone(x).sum().backward()
    for op, record in counter.top("all", top):
        print(f"  {op:<40} {record.calls:>5} calls {record.total / 1e9:>9.2f} GB")
    return counter.by_part()["all"], batch * T, cfg.n_layers, D


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="400m")
    parser.add_argument("--vocab", default="o200k")
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    cfg = model_config(args.scale, args.vocab, "tied")
    n, vocab, d = args.micro_batch * cfg.max_seq_len, cfg.vocab_size, cfg.d_model
    logits = n * (vocab + -vocab % HEAD_ROWS_MULTIPLE)
    print(f"loss, {n} tokens x V={vocab} (padded {logits // n}), D={d}: bytes per logit")
    paths = (("chunked loss", linear_cross_entropy), ("GPU path", fused_linear_cross_entropy))
    for label, loss in paths:
        print(f"  {label:<32} {counted_loss_bytes(n, vocab, d, loss) / logits:6.2f}")
    print(f"  {'model (fused_loss_bytes)':<32} {fused_loss_bytes(n, vocab, d) / logits:6.2f}")
    print(f"backbone, {args.scale}: top ops")
    total, tokens, layers, width = backbone_bytes(
        args.scale, args.vocab, args.micro_batch, args.top
    )
    per = total / (tokens * layers * width)
    print(f"backbone: {total / 1e9:.1f} GB = {per:.0f} B per token, layer and unit of D")


if __name__ == "__main__":
    main()
