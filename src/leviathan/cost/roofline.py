"""A roofline of one training micro-batch step on one GPU: FLOPs and HBM bytes by part, the
time each part needs at the GPU's compute or bandwidth (whichever binds; each at the stated
share of its peak a good kernel reaches, `GEMM_EFFICIENCY`, `BANDWIDTH_EFFICIENCY`), and the
MFU that allows. It is a prediction to read the first GPU figures against (`make gpu-check`),
not a measurement; `leviathan config show` prints it per cell of the study, and the plan's
GPU-hours come from its MFU.

FLOPs come from `accounting` (the counter MFU uses). Bytes are an analytic model: per token,
logit, distinct id and parameter, the bytes the step's kernels read and write, stated below
beside the kernels they add up. Eager: the kernels PyTorch runs for today's code; compiled
(`fused=True`): what inductor's fusion leaves (each elementwise chain one kernel reading its
inputs and writing its outputs once; matmuls, attention and the optimizer unchanged).
tests/cost/test_step_count.py holds each eager part within 1.5x of a dispatch-mode count of
one real micro-batch step (`leviathan.cost.step_count`) at the 400m and 1.2b shapes and says
why each differs. When a kernel changes (a fused loss, a leaner backbone, LEV's own kernel),
the constants of its part change with it: each says which code it describes.

Parts (the counter's: by the module an op runs under, forward and backward alike):
  backbone   the blocks and the final norm: per token and layer, the linears' bf16
             activations, the norms, rotary embeddings and attention, SwiGLU and the
             residual adds; per parameter, its bf16 copy, the matmuls' reads of it and its
             gradient's fp32 copy.
  head+loss  the chunked cross-entropy (`loss.py`, GPU rule): per logit (N x V_pad) the
             passes over the logits; per chunk the bf16 weight read by two matmuls; per head
             parameter its casts and the head gradient's passes.
  input      the variant's input module. A table: the looked-up rows, the dense table
             gradient (and, tied, its sum with the head's). LEV (and the MLP ablations): per
             distinct id, U = `step_count.distinct_ids` (the accounting's bound), the
             vectors it generates and the spline product's passes (LEV's plain torch path);
             per token the gather of the generated rows and its gradient.
  optimizer  gradient clipping and AdamW over all parameters, once per optimizer step,
             spread over its micro-batches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from leviathan.cost import lev_kernels
from leviathan.cost.loss_bytes import FUSED_BYTES_PER_HEAD, fused_loss_bytes
from leviathan.cost.step_count import OPTIMIZER_IMPL, distinct_ids
from leviathan.gpus import require_gpu_model
from leviathan.model.accounting import Accounting, account_model
from leviathan.model.config import ModelConfig
from leviathan.model.language_model import build_model
from leviathan.model.loss_head import HEAD_ROWS_MULTIPLE
from leviathan.model.loss_tiles import tile_flops, tile_l2_bytes

# stated, not measured: the share of peak that large bf16 GEMMs and streaming kernels reach
# (cuBLAS at these shapes; what the first gpu-check's figures will correct)
GEMM_EFFICIENCY = 0.7
BANDWIDTH_EFFICIENCY = 0.8

# ---- backbone, per token and layer (bytes per unit of width) -----------------------------
# A linear of widths a -> b in bf16: forward reads x and writes y (2a + 2b), backward reads
# dy and writes dx, then reads dy and x for dW (4a + 4b): 6 bytes per unit of a + b. A block's
# linears: qkv D -> 3D, proj D -> D, gate and up D -> F, down F -> D.
LINEAR_BYTES = 6
# RMSNorm, per norm and unit of D (transformer.RMSNorm: the fp32 residual cast once to the
# activation dtype, then F.rms_norm with input and weight in bf16, which CUDA runs as ATen's
# fused kernel). Eager: the cast in (read 4, write 2) and the gradient's cast back (6), the
# fused forward (read 2, write 2) and backward (read dy, x: 4, write dx 2), and the sum of the
# norm's input gradient into the fp32 residual gradient (read 8, write 4): 34 as counted.
# Compiled: the cast fuses into the kernels (forward reads fp32 x, writes bf16: 6; backward
# reads x and dy, writes dx: 10).
RMSNORM_BYTES, FUSED_RMSNORM_BYTES = 34, 16
# Rotary embeddings in the activation dtype (transformer.apply_rope: the pairs swapped by a
# flip, one multiply and one addcmul; their backward) and the layout copies of q, k, v around
# attention (permute + contiguous, the heads' stack), per unit of D: 88 eager, as counted.
# Compiled: q and k read and written in bf16 once each way, the copies folded (16).
ROPE_BYTES, FUSED_ROPE_BYTES = 88, 16
# SDPA (flash attention): forward reads q, k, v and writes the output (8), backward reads
# q, k, v, the output and its gradient and writes dq, dk, dv (16): 24 per unit of D.
SDPA_BYTES = 24
# SwiGLU per unit of F: forward silu(gate) (4) and its product with up (6); backward the
# product's two gradients (12), silu's backward (6) and the bf16 casts of the gradients (10):
# 38 eager. Compiled: forward reads gate and up and writes the product (6), backward reads
# gate, up and dy and writes d gate, d up (10). Per unit of D, both: the input gradients of
# gate and up summed (read 8, written 4).
SWIGLU_BYTES, FUSED_SWIGLU_BYTES, SWIGLU_DX_BYTES = 38, 16, 12
# The two residual adds, per unit of D: forward an fp32 stream plus a bf16 branch (read 6,
# write 4, twice); eager backward casts the fp32 gradient to bf16 for each branch (6, twice):
# 32; compiled the casts fuse into the norms' backward: 20.
RESIDUAL_BYTES, FUSED_RESIDUAL_BYTES = 32, 20
# per parameter of a matmul, per micro-batch: autocast's bf16 copy (read 4, write 2), the
# three matmuls' reads and writes of it (forward, input gradient, weight gradient: 6), the
# bf16 gradient's fp32 copy (read 2, write 4)
PARAM_MATMUL_BYTES = 6
PARAM_BYTES = 6 + PARAM_MATMUL_BYTES + 6

# ---- head + loss -----------------------------------------------------------------------
# The GPU's loss is the fused linear cross-entropy (loss.py: two Triton kernels, custom ops,
# the same eagerly and compiled): `loss_bytes.fused_loss_bytes`, 6 bytes per logit (G written once
# in bf16, read by the two gradient GEMMs), 8 per hidden element, 28 per head element (its
# casts and padding). The kernels form the logits tile by tile while they compute (streamed
# like a matmul's operands); the head's casts are elementwise. Its FLOPs: the backward
# recomputes the logits, 4 matmuls of N x V_pad x D where the accounting counts 3.
HEAD_MATMULS = 4

# ---- input -----------------------------------------------------------------------------
# a table, per token and unit of D: the row gathered (read 4, written 4), its gradient read
# by the dense backward (4); per table element: the dense gradient written (4) and, tied, its
# sum with the head's gradient (read 8, write 4)
TABLE_ROW_BYTES, TABLE_GRAD_BYTES, TIED_GRAD_SUM_BYTES = 12, 4, 12
# LEV (per distinct id): its spline product is one custom op (model/spline_product.py), whose kernels move
# `lev_kernels.cost_per_id` (t, M and their gradients; the coefficient table, L2-resident, once
# per step), eager and compiled alike. Around it, steps 1-3 and the out-projection in torch
# ops: eager, 23 fp32 passes over the h x d_seed coordinates (the codebook rows' sum, the
# heads' projection, LayerNorm, its gain, bias and 1/2 as one multiply-add with the sigmoid
# after it, `lev._AffineSigmoid`, and their gradients) and 13 bytes per unit of D (the generated row's cast, its gradient's), as
# counted (within 3% at 200m, 400m and 1.2b). The same compiled: the regional compile
# (`train/regions.py`) compiles the transformer blocks and leaves LEV eager (its distinct-id
# count changes every batch).
LEV_COORD_PASSES, LEV_ROW_BYTES = 23, 13
# per generated row and token: the gather of the bf16 rows (4), the fp32 residual copy (6),
# the gradient's bf16 cast (6) and the dense backward's read (2): per unit of D
GENERATED_TOKEN_BYTES = 18

# ---- optimizer, per parameter ----------------------------------------------------------
# clip_grad_norm_: the norm reads g (4), the scale reads and writes it (8)
CLIP_BYTES = 12
# AdamW: foreach (torch's pick on CUDA; step_count.OPTIMIZER_IMPL): weight decay's mul_ on p
# (8), lerp_ of m (12), mul_ of v (8), addcmul_ of g^2 (16), sqrt of v (8), div_ and add_ of
# the denominator (16), addcdiv_ into p (16): 84. fused=True: p, g, m, v read, p, m, v
# written once: 28.
ADAMW_BYTES = {"foreach": 84, "fused": 28}


@dataclass(frozen=True)
class Part:
    """A part's FLOPs (all in matmuls and attention) and bytes; `matmul_bytes`: those the
    matmul and attention kernels move themselves, streamed while they compute. The rest are
    the elementwise kernels', which run between them at the bandwidth's pace."""

    name: str
    flops: float
    bytes: float
    matmul_bytes: float = 0.0
    tile_flops: float = 0.0  # of `flops`, those of Triton tiles that stream from L2 ...
    l2_bytes: float = 0.0  # ... and the bytes those tiles read from L2

    def _times(self, gpu: str) -> tuple[float, float, float]:
        """(matmul compute, matmul streaming, elementwise streaming) seconds; the tiles'
        compute or their L2 reads, whichever is slower, where the GPU's L2 rate is known."""
        model = require_gpu_model(gpu)
        bandwidth = model.bandwidth * BANDWIDTH_EFFICIENCY
        peak = model.bf16_flops * GEMM_EFFICIENCY
        tiles = self.tile_flops / peak
        if model.l2_bandwidth:
            tiles = max(tiles, self.l2_bytes / model.l2_bandwidth)
        return (
            (self.flops - self.tile_flops) / peak + tiles,
            self.matmul_bytes / bandwidth,
            (self.bytes - self.matmul_bytes) / bandwidth,
        )

    def seconds(self, gpu: str) -> float:
        compute, matmul_memory, elementwise = self._times(gpu)
        return max(compute, matmul_memory) + elementwise

    def bound(self, gpu: str) -> str:
        """Which of the part's times is the larger: its matmuls' compute or its memory."""
        compute, matmul_memory, elementwise = self._times(gpu)
        return "compute" if compute >= matmul_memory + elementwise else "memory"


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
        return self.model_flops / (self.seconds(gpu) * require_gpu_model(gpu).bf16_flops)

    def part(self, name: str) -> Part:
        return next(p for p in self.parts if p.name == name)


def padded_vocab(cfg: ModelConfig) -> int:
    """The head's rows under the GPU rule (`loss.matmul_weight`)."""
    return math.ceil(cfg.vocab_size / HEAD_ROWS_MULTIPLE) * HEAD_ROWS_MULTIPLE


def roofline(
    cfg: ModelConfig, micro_batch: int, global_batch: int, label: str = "", fused: bool = False
) -> Roofline:
    """The roofline of one micro-batch of `micro_batch` sequences of cfg.max_seq_len tokens,
    with `global_batch` sequences per optimizer step on this GPU; `fused`: torch.compile."""
    acc = account_model(build_model(cfg, device="meta"), cfg.max_seq_len)
    N = micro_batch * cfg.max_seq_len
    micro_per_step = max(1, global_batch // micro_batch)
    parts = (
        _backbone_part(cfg, acc, N, fused),
        _head_part(cfg, N),
        _input_part(cfg, acc, N),
        Part("optimizer", 0.0, acc.total_params * _optimizer_bytes() / micro_per_step),
    )
    return Roofline(label or cfg.variant, N, float(acc.train_flops) * N, parts)


def _backbone_part(cfg: ModelConfig, acc: Accounting, N: int, fused: bool) -> Part:
    """Blocks and final norm: 3 x forward FLOPs (attention dense T x T, the accounting's)."""
    D, F, L = cfg.d_model, cfg.ffn_hidden, cfg.n_layers
    norm = FUSED_RMSNORM_BYTES if fused else RMSNORM_BYTES
    per_layer = (
        LINEAR_BYTES * (9 * D + 3 * F)
        + 2 * norm * D
        + ((FUSED_ROPE_BYTES if fused else ROPE_BYTES) + SDPA_BYTES) * D
        + (FUSED_SWIGLU_BYTES if fused else SWIGLU_BYTES) * F
        + SWIGLU_DX_BYTES * D
        + (FUSED_RESIDUAL_BYTES if fused else RESIDUAL_BYTES) * D
    )
    matmuls = N * L * (LINEAR_BYTES * (9 * D + 3 * F) + SDPA_BYTES * D)
    return Part(
        "backbone",
        3.0 * (acc.backbone_flops + acc.attention_flops) * N,
        float(N * (L * per_layer + norm * D) + acc.backbone_params * PARAM_BYTES),
        float(matmuls + acc.backbone_params * PARAM_MATMUL_BYTES),
    )


def _head_part(cfg: ModelConfig, N: int) -> Part:
    """The fused loss (`loss_bytes.fused_loss_bytes`): HEAD_MATMULS matmuls of N x V_pad x D, two
    of them the Triton kernels' tiles, paced by their L2 reads where those bind
    (`loss_tiles.tile_l2_bytes`)."""
    D, V_pad = cfg.d_model, padded_vocab(cfg)
    total = fused_loss_bytes(N, cfg.vocab_size, D)
    return Part(
        "head+loss",
        HEAD_MATMULS * 2.0 * V_pad * D * N,
        float(total),
        float(total - V_pad * D * FUSED_BYTES_PER_HEAD),
        float(tile_flops(N, V_pad, D)),
        float(tile_l2_bytes(N, V_pad, D)),
    )


def _input_part(cfg: ModelConfig, acc: Accounting, N: int) -> Part:
    """The variant's input over N tokens and U = distinct_ids distinct ids."""
    D = cfg.d_model
    if not acc.input_flops:  # a table (albert's factors: their rows and gradients alike)
        grad = TABLE_GRAD_BYTES + (TIED_GRAD_SUM_BYTES if cfg.variant == "tied" else 0)
        return Part("input", 0.0, float(N * D * TABLE_ROW_BYTES + acc.input_params * grad))
    ids = distinct_ids(cfg, N)
    per_id, per_step = 4 * 2 * D, 0  # an MLP's output and its gradient, fp32
    if cfg.variant == "leviathan":
        lev, cost = cfg.lev, lev_kernels.cost_per_id(cfg.lev)
        per_id = (
            cost.bytes_per_id + 4 * LEV_COORD_PASSES * lev.n_heads * lev.d_seed + LEV_ROW_BYTES * D
        )
        per_step = cost.table_bytes_per_step
    return Part(
        "input",
        3.0 * acc.input_flops * ids,
        float(
            ids * per_id + per_step + N * D * GENERATED_TOKEN_BYTES + acc.input_params * PARAM_BYTES
        ),
    )


def _optimizer_bytes() -> int:
    return CLIP_BYTES + ADAMW_BYTES[OPTIMIZER_IMPL]


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
