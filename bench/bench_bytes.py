"""Bytes a GPU step moves in the loss and in the backbone, counted without a GPU.

`leviathan.cost.traffic.TrafficCounter` over FakeTensors (no memory, seconds) adds up every
kernel's reads and writes of one micro-batch's forward and backward at a scale's real shapes
(default: 400m, 32 x 512 tokens, o200k). Printed per part:

  * loss: bytes per logit (N tokens x V padded classes) of the chunked loss (the CPU rule's
    code, run under the GPU rule) and of the GPU path (the Triton kernels' custom ops), both
    on fake CPU tensors under bf16 CPU autocast, beside
    `leviathan.cost.loss_bytes.fused_loss_bytes`, the model the roofline uses;
  * backbone: bytes per token, layer and unit of D of the blocks' forward and backward (fp32
    residual stream, bf16 autocast as on a GPU), and the ops that move the most.

    python bench/bench_bytes.py [--scale 400m] [--vocab o200k] [--micro-batch 32] [--top 8]
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from leviathan.cost.loss_bytes import counted_loss_bytes, fused_loss_bytes
from leviathan.cost.step_count import rms_norm_as_on_cuda
from leviathan.cost.traffic import TrafficCounter
from leviathan.model import model_config
from leviathan.model.loss import fused_linear_cross_entropy, linear_cross_entropy
from leviathan.model.loss_head import HEAD_ROWS_MULTIPLE
from leviathan.model.transformer import Backbone


@contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    before = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, before)


def _backbone_part(parents: set[str]) -> str:
    """A block's part by the innermost module an op runs under: its norms, its Linears,
    attention's other ops (RoPE, SDPA, reshapes), the FFN's activation; else the residual
    adds of the block (and the final norm's, under `norm`)."""
    innermost = max(parents, key=lambda name: name.count("."), default="")
    leaf = innermost.rsplit(".", 1)[-1]
    return leaf if leaf in BACKBONE_PARTS else "residual"


BACKBONE_PARTS = ("attn_norm", "ffn_norm", "norm", "qkv", "proj", "gate", "up", "down", "attn")
BACKBONE_PARTS += ("ffn",)


def backbone_bytes(scale: str, vocab: str, batch: int, top: int, fused_norm: bool) -> None:
    """Prints the bytes of the backbone's forward and backward at `scale` (bf16 CPU autocast,
    fp32 residual stream) per token, layer and unit of D, by part, and its `top` ops; with
    `fused_norm`, each RMSNorm counted as CUDA's fused kernels (one op each way)."""
    cfg = model_config(scale, vocab, "tied")
    T, D = cfg.max_seq_len, cfg.d_model
    with FakeTensorMode(), ExitStack() as stack:
        if fused_norm:
            stack.enter_context(_patched(F, "rms_norm", rms_norm_as_on_cuda))
        backbone = Backbone(cfg)
        x = torch.empty(batch, T, D, requires_grad=True)
        with (
            TrafficCounter(_backbone_part) as counter,
            torch.autocast("cpu", dtype=torch.bfloat16),
        ):
            backbone(x).sum().backward()
    unit = batch * T * cfg.n_layers * D
    parts = counter.by_part()
    how = "norms as CUDA's fused kernels" if fused_norm else "as dispatched on a CPU"
    print(f"backbone, {scale} ({how}): bytes per token, layer and unit of D, by part")
    for part in sorted(parts, key=parts.__getitem__, reverse=True):
        print(f"  {part:<12} {parts[part] / unit:7.1f}")
    print(f"  {'total':<12} {sum(parts.values()) / unit:7.1f}")
    ops = [(op, r) for (_, op), r in counter.records.items()]
    by_op: dict[str, int] = {}
    for op, r in ops:
        by_op[op] = by_op.get(op, 0) + r.total
    print(
        "  top ops: "
        + ", ".join(
            f"{op.removeprefix('aten.')} {n / unit:.0f}"
            for op, n in sorted(by_op.items(), key=lambda kv: -kv[1])[:top]
        )
    )


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
    for fused_norm in (False, True):
        backbone_bytes(args.scale, args.vocab, args.micro_batch, args.top, fused_norm)


if __name__ == "__main__":
    main()
