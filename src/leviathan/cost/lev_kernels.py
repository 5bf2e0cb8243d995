"""The cost model of LEV's Triton kernels (`leviathan.model.lev_triton`): what each moves and
computes per distinct id, and its predicted time on a GPU of known rates (the roofline's LEV
part, `leviathan.cost.roofline`; bench/lev_predict.py). No GPU has run them: the
instructions per factor are read from the kernels compiled for sm_90 (`leviathan.compiled`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from leviathan.gpus import require_gpu_model
from leviathan.model.bspline import N_TAPS
from leviathan.model.config import LEVConfig
from leviathan.model.lev_triton import (
    BACKWARD_BLOCK_IDS,
    BLOCK_IDS,
    COORDINATES_PER_PROGRAM,
    FORWARD_LANES,
    MIN_DOT,
    RESCALE,
    block_sizes,
)

# SASS instructions issued per factor (one id, head, coordinate and lane), read from the
# kernels compiled for sm_90 by the GPU image's Triton at the paper's LEV shape (`python -m
# leviathan.compiled`; tests/compiled holds these to the compile within 5%): the hot loop's
# instructions over the factors one step of it does per thread (`factors_per_step`). The
# forward's ~8 arithmetic ones per factor (2 multiply-adds, |phi|, eps and sign tests with
# their selects, the product) come with the coefficient loads and the row index arithmetic;
# the backward's step also re-forms phi, the division, grad_t and the tf32 splits, and
# stages each one-hot product's operands through shared memory (61 barriers per step).
FORWARD_OPS_PER_FACTOR = 14.0
BACKWARD_OPS_PER_FACTOR = 69.4
THREADS = 8 * 32  # both kernels run 8 warps (`lev_triton._shape`)


def factors_per_step(kernel: str, lev: LEVConfig) -> int:
    """Factors one step of the kernel's hot loop evaluates per thread: the forward's step
    is RESCALE coordinates of BLOCK_IDS ids x its lanes, the backward's
    COORDINATES_PER_PROGRAM coordinates of BACKWARD_BLOCK_IDS ids x all of r's lanes."""
    block_r, _ = block_sizes(lev.rank, lev.n_knots)
    if kernel == "lev_forward":
        return RESCALE * BLOCK_IDS * min(FORWARD_LANES, block_r) // THREADS
    if kernel == "lev_backward":
        return COORDINATES_PER_PROGRAM * max(MIN_DOT, BACKWARD_BLOCK_IDS) * block_r // THREADS
    raise ValueError(f"{kernel!r}: lev_forward or lev_backward")


@dataclass(frozen=True)
class KernelCost:
    """One kernel's work per distinct id: HBM bytes it reads and writes, L2 bytes beyond them
    (an upper bound), instructions on the fp32 cores, tf32 tensor-core FLOPs, and
    transcendentals (the SFU's reciprocals)."""

    hbm_bytes: int
    l2_bytes: int
    simt_ops: int
    tensor_flops: int
    transcendentals: int


@dataclass(frozen=True)
class LevCost:
    """The kernel pair's cost model (`cost_per_id`)."""

    forward: KernelCost
    backward: KernelCost
    table_bytes_per_step: int  # the coefficient table read by both, its gradient written

    @property
    def bytes_per_id(self) -> int:
        """HBM bytes per distinct id of forward + backward: t, M and their gradients."""
        return self.forward.hbm_bytes + self.backward.hbm_bytes


def cost_per_id(lev: LEVConfig) -> LevCost:
    """What `spline_forward` + `spline_backward` move and compute per distinct id (fp32).

    HBM: forward reads t [h, P] and writes M [h, r]; backward reads t, M and grad_M and writes
    grad_t. The coefficient table [h P kappa, 3, r] stays in L2 (12.6 MB at the paper's shape,
    L2 50 MB): counted once per step (`table_bytes_per_step`: read twice, gradient written once,
    one id range). L2 beyond HBM: the forward's gathers, at most kappa rows of 3 r per (block of
    ids, head, coordinate); the backward's re-reads of M and grad_M by each of the P / 4
    coordinate programs (its gathers hit the program's own 12 KB rows in L1)."""
    h, P, r, K = lev.n_heads, lev.d_seed, lev.rank, lev.n_knots
    f32, factors = 4, h * P * r
    rows_per_block = min(BLOCK_IDS, K)
    block_k = block_sizes(r, K)[1]
    per_program = COORDINATES_PER_PROGRAM
    forward = KernelCost(
        hbm_bytes=f32 * (h * P + h * r),
        l2_bytes=f32 * h * P * rows_per_block * N_TAPS * r // BLOCK_IDS,
        simt_ops=round(factors * FORWARD_OPS_PER_FACTOR),
        tensor_flops=0,
        transcendentals=0,
    )
    backward = KernelCost(
        hbm_bytes=f32 * (2 * h * P + 2 * h * r),
        l2_bytes=f32 * 2 * h * r * math.ceil(P / per_program),
        simt_ops=round(factors * BACKWARD_OPS_PER_FACTOR),
        tensor_flops=factors * N_TAPS * 2 * 2 * block_k,  # 3 rows x 2 tf32 parts x 2 x kappa
        transcendentals=factors,
    )
    return LevCost(forward, backward, f32 * 3 * h * P * K * N_TAPS * r)


@dataclass(frozen=True)
class GpuRates:
    """Per second, the whole GPU: HBM and L2 bytes, fp32-core instructions, dense tf32
    tensor FLOPs, SFU operations."""

    hbm: float
    l2: float
    simt: float
    tf32: float
    sfu: float


# H100 and H200 SXM share the GH100 die (132 SMs at 1.98 GHz: 128 fp32 lanes and 16 SFU
# lanes per SM; dense tf32 495 TFLOP/s, data sheets); they differ in HBM. HBM and L2 from
# `leviathan.gpus`.
_SM_HZ = 132 * 1.98e9


def _rates(name: str) -> GpuRates:
    model = require_gpu_model(name)
    assert model.l2_bandwidth is not None
    return GpuRates(model.bandwidth, model.l2_bandwidth, 128 * _SM_HZ, 495e12, 16 * _SM_HZ)


GPU_RATES = {name: _rates(name) for name in ("H100", "H200")}
COMPUTE_EFFICIENCY = 0.7  # stated, as the roofline's: the share of a peak a kernel reaches
MEMORY_EFFICIENCY = 0.8


def kernel_seconds(cost: KernelCost, ids: int, gpu: str = "H200") -> float:
    """A kernel's predicted time over `ids` distinct ids: its slowest unit, the others
    overlapping (HBM and compute at the stated efficiencies, L2 and the SFU at their peak)."""
    rates = GPU_RATES[gpu]
    return ids * max(
        cost.hbm_bytes / (rates.hbm * MEMORY_EFFICIENCY),
        cost.l2_bytes / rates.l2,
        cost.simt_ops / (rates.simt * COMPUTE_EFFICIENCY),
        cost.tensor_flops / (rates.tf32 * COMPUTE_EFFICIENCY),
        cost.transcendentals / rates.sfu,
    )
