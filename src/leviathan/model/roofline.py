"""A roofline of one training micro-batch step on one GPU: FLOPs and HBM bytes by part, the
time each part needs at the GPU's compute or bandwidth (whichever binds; each at the stated
share of its peak a good kernel reaches, `GEMM_EFFICIENCY`, `BANDWIDTH_EFFICIENCY`), and the
MFU that allows. It is a prediction to read the first GPU figures against (`make gpu-check`),
not a measurement; `leviathan config show` prints it per cell of the study.

Parts (FLOPs from `accounting`, the counter MFU uses; bytes from the stated models below):
  backbone   blocks' matmuls and attention, 3 x forward (attention dense T x T, the
             accounting's convention). Bytes: per parameter, the fp32 master read and its
             bf16 copy written by autocast, three bf16 reads (forward, input and weight
             gradients), the fp32 gradient read and written: `PARAM_BYTES`; activations as
             Korthikanti et al. 2022 count them (34 bytes per token, layer and unit of D in
             16 bits with a fused attention kernel), written in forward and read in backward.
  head+loss  the chunked cross-entropy (`loss.py`, GPU rule): 3 matmuls of N x V_pad x D;
             bytes `LOGIT_BYTES` per logit (fp32 logits written, read by logsumexp, softmax
             in place, the one-hot and mask, the bf16 copy and G written and read twice) and
             the head's parameters as the backbone's. Under torch.compile inductor fuses
             the elementwise passes: `FUSED_LOGIT_BYTES` (bf16 logits written, read by the
             logsumexp and the softmax passes, G written and read by two matmuls).
  input      a table: the looked-up rows and their gradient rows. LEV (and the MLP
             ablations): U distinct ids, U = min(tokens, V) (the accounting's bound: every
             position a distinct id); bytes per id: the output and its gradient in fp32 and
             the parameters, and for LEV its spline kernels' own (`lev_triton.cost_per_id`:
             t, M and their gradients) with their 12.6 MB coefficient table, which stays in
             L2, once per step. Its real risk is latency (kernel count, atomics),
             which the roofline cannot see and gpu-check's step ratio measures.
  optimizer  AdamW over all parameters (fp32 p, g, m, v: `ADAMW_BYTES` per parameter), once
             per optimizer step, spread over its micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass

from leviathan.model import lev_triton
from leviathan.model.accounting import Accounting, account_model
from leviathan.model.config import ModelConfig
from leviathan.model.language_model import build_model
from leviathan.model.loss import HEAD_ROWS_MULTIPLE

# (dense bf16 peak FLOP/s, HBM bandwidth bytes/s), vendor data sheets (SXM parts)
GPUS: dict[str, tuple[float, float]] = {"H100": (989e12, 3.35e12), "H200": (989e12, 4.8e12)}
# stated, not measured: the share of peak that large bf16 GEMMs and streaming kernels reach
# (cuBLAS at these shapes; what the first gpu-check's figures will correct)
GEMM_EFFICIENCY = 0.7
BANDWIDTH_EFFICIENCY = 0.8
PARAM_BYTES = 4 + 2 + 3 * 2 + 2 * 4  # per parameter per micro-batch (see the docstring)
ACTIVATION_BYTES = 2 * 34  # per token, layer and unit of D: written forward, read backward
LOGIT_BYTES = 4 + 4 + 8 + 8 + 4 + 2 + 2 * 2 + 2 * 2  # per logit of the chunked loss, eager
FUSED_LOGIT_BYTES = 2 + 2 * 2 + 2 + 2 * 2  # compiled: bf16 logits, two fused passes, G
ADAMW_BYTES = 4 * 7  # p read + written, g read, m and v read + written (fp32)


@dataclass(frozen=True)
class Part:
    name: str
    flops: float
    bytes: float

    def _times(self, gpu: str) -> tuple[float, float]:
        peak, bandwidth = GPUS[gpu]
        return (
            self.flops / (peak * GEMM_EFFICIENCY),
            self.bytes / (bandwidth * BANDWIDTH_EFFICIENCY),
        )

    def seconds(self, gpu: str) -> float:
        return max(self._times(gpu))

    def bound(self, gpu: str) -> str:
        compute, memory = self._times(gpu)
        return "compute" if compute >= memory else "memory"


@dataclass(frozen=True)
class Roofline:
    label: str
    tokens: int  # per micro-batch
    model_flops: float  # what MFU counts: accounting's train FLOPs per token x tokens
    parts: tuple[Part, ...]

    def seconds(self, gpu: str) -> float:
        return sum(p.seconds(gpu) for p in self.parts)

    def mfu(self, gpu: str) -> float:
        """The MFU this roofline allows: model FLOPs over (predicted time x peak)."""
        return self.model_flops / (self.seconds(gpu) * GPUS[gpu][0])


def roofline(
    cfg: ModelConfig, micro_batch: int, global_batch: int, label: str = "", fused: bool = False
) -> Roofline:
    """The roofline of one micro-batch of `micro_batch` sequences of cfg.max_seq_len tokens,
    with `global_batch` sequences per optimizer step (one GPU); `fused`: the loss's
    elementwise passes fused (torch.compile)."""
    model = build_model(cfg, device="meta")
    acc = account_model(model, cfg.max_seq_len)
    N = micro_batch * cfg.max_seq_len
    D, L = cfg.d_model, cfg.n_layers
    V_pad = -(-cfg.vocab_size // HEAD_ROWS_MULTIPLE) * HEAD_ROWS_MULTIPLE
    backbone = Part(
        "backbone",
        3.0 * (acc.backbone_flops + acc.attention_flops) * N,
        float(acc.backbone_params * PARAM_BYTES + N * L * D * ACTIVATION_BYTES),
    )
    head_params = cfg.vocab_size * D  # a tied head is the table: the same traffic
    head = Part(
        "head+loss",
        3.0 * 2 * V_pad * D * N,
        float(
            N * V_pad * (FUSED_LOGIT_BYTES if fused else LOGIT_BYTES) + head_params * PARAM_BYTES
        ),
    )
    parts = [backbone, head, _input_part(cfg, acc, N)]
    micro_per_step = max(1, global_batch // micro_batch)
    parts.append(Part("optimizer", 0.0, acc.total_params * ADAMW_BYTES / micro_per_step))
    return Roofline(label or cfg.variant, N, float(acc.train_flops) * N, tuple(parts))


def _input_part(cfg: ModelConfig, acc: Accounting, N: int) -> Part:
    """LEV (or an MLP ablation) over U = min(N, V) distinct ids; a table: N row lookups and
    their gradient rows (a tied table's parameter traffic is the head's)."""
    D = cfg.d_model
    if not acc.input_flops:  # a table
        params = 0 if cfg.variant == "tied" else acc.input_params
        return Part("input", 0.0, float(N * D * 2 * 4 + params * PARAM_BYTES))
    ids = min(N, cfg.vocab_size)
    per_id, per_step = 4 * 2 * D, 0  # the output and its gradient
    if cfg.variant == "leviathan":  # and the spline kernels' own traffic (lev_triton)
        cost = lev_triton.cost_per_id(cfg.lev)
        per_id, per_step = per_id + cost.bytes_per_id, cost.table_bytes_per_step
    return Part(
        "input",
        3.0 * acc.input_flops * ids,
        float(ids * per_id + per_step + acc.input_params * PARAM_BYTES),
    )


def render(
    cells: list[tuple[str, ModelConfig, int, int]], gpus: tuple[str, ...] = ("H100", "H200")
) -> str:
    """Per cell (label, model config, micro-batch, global batch): the eager roofline's parts
    (GFLOP, GB, ms on each GPU), then the MFU it allows, eager and compiled."""
    head = f"{'cell':<34} {'part':<10} {'GFLOP':>9} {'GB':>7}" + "".join(
        f" {g + ' ms':>10}" for g in gpus
    )
    lines = [
        f"roofline of one training micro-batch on one GPU (a prediction: GEMMs at {GEMM_EFFICIENCY:.0%} of peak, memory at {BANDWIDTH_EFFICIENCY:.0%})",
        head,
    ]
    for label, cfg, micro_batch, global_batch in cells:
        eager = roofline(cfg, micro_batch, global_batch, label)
        fused = roofline(cfg, micro_batch, global_batch, label, fused=True)
        for p in eager.parts:
            times = "".join(f" {1e3 * p.seconds(g):>8.2f} {p.bound(g)[0]}" for g in gpus)
            lines.append(
                f"{label:<34} {p.name:<10} {p.flops / 1e9:>9.0f} {p.bytes / 1e9:>7.2f}{times}"
            )
        mfus = "; ".join(f"{g} {eager.mfu(g):.0%} eager, {fused.mfu(g):.0%} compiled" for g in gpus)
        lines.append(f"{label:<34} {'MFU <=':<10} {mfus} ({eager.tokens} tokens)")
    lines.append(
        "(c/m: compute/memory-bound; eager parts shown; MFU counts the accounting's train FLOPs)"
    )
    return "\n".join(lines)
