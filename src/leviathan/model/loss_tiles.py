"""The GPU loss kernels' tiles (`loss_kernel`) and what they stream through L2: Triton-free,
so the roofline and the plan read them where Triton is absent.

Each program of the two kernels forms one BLOCK_N x BLOCK_V tile of logits at a time, over
BLOCK_D-wide steps of the width, reading the tile's BLOCK_N rows of h and BLOCK_V rows of w
for every tile (the rows do not fit on chip across tiles at these widths). HBM sees each
operand about once (L2 holds the head's working set); the SMs' reads from L2 are per tile:
(BLOCK_N + BLOCK_V) x D elements per 2 x BLOCK_N x BLOCK_V x D FLOPs. At 128 x 256 that is
85 FLOP per bf16 byte (64 x 128 gave 43 and needed ~4x a Hopper's L2 bandwidth); Triton's own
Hopper matmul tiles are these. The compiled resources (sm_90: 255 registers, no spills, 145 KB
of shared memory) are held by tests/compiled.
"""

from __future__ import annotations

import math

SPLITS = 8  # shares of the vocabulary per row block in the forward (more programs than SMs)
# (BLOCK_N, BLOCK_V, BLOCK_D) on a GPU, 8 warps: Hopper (sm_90) and later; before it (sm_80,
# sm_86, sm_89) 128 x 128, as 128 x 256 spills registers there (64 FLOP per byte)
HOPPER_BLOCKS = (128, 256, 64)
AMPERE_BLOCKS = (128, 128, 64)
WARPS = 8


def gpu_blocks(major: int) -> tuple[int, int, int]:
    """The tiles for a GPU of compute capability `major`.x."""
    return HOPPER_BLOCKS if major >= 9 else AMPERE_BLOCKS


INTERPRETER_BLOCKS = (32, 64, 16)  # in Triton's interpreter: few programs, several tiles


def tile_l2_bytes(
    n_tokens: int,
    head_rows: int,
    d_model: int,
    blocks: tuple[int, int, int] = HOPPER_BLOCKS,
    itemsize: int = 2,
) -> int:
    """Bytes the forward and the backward kernel read from L2 for `n_tokens` rows against a
    head of `head_rows` rows of width `d_model` (bf16 operands): every tile's h and w rows.
    The roofline's GPUs with a known L2 rate are Hopper's: its tiles are the default."""
    block_n, block_v, _ = blocks
    tiles = math.ceil(n_tokens / block_n) * math.ceil(head_rows / block_v)
    per_tile = (block_n + block_v) * d_model * itemsize
    return 2 * tiles * per_tile


def tile_flops(n_tokens: int, head_rows: int, d_model: int) -> int:
    """FLOPs of the two kernels' logit tiles (the backward recomputes the forward's)."""
    return 2 * 2 * n_tokens * head_rows * d_model
