"""LEV's predicted GPU figures (no GPU needed): what `make gpu-check` will be read against.

    python bench/lev_predict.py [--gpu H200] [--micro-batch 16] [--ids 8192] [--compiled]

Per figure, on the stated GPU (`lev_kernels.GPU_RATES`, efficiencies as the roofline's), by
default at 400m's micro-batch of 16 sequences with 8,192 distinct ids (`make gpu-check` asks
the same functions at the shapes it measures: `step_ratio`, `materialize_seconds`):
  kernels      the Triton forward and backward at the step's distinct ids
               (`lev_kernels.cost_per_id`, `kernel_seconds`: each kernel's slowest unit);
  materialize  LEV materialize() of o200k at D = 2048 (fp32, as gpu-check times it): the
               forward kernel over every id, plus every other op's HBM bytes (counted by the
               dispatch mode, `cost.traffic`, on FakeTensors for one 8,192-id chunk: steps
               1-3 and the out-projection) and the fp32 GEMMs at the fp32 cores' rate;
  step ratio   leviathan / tied optimizer-step time at 400m, eager (--compiled: the tied step
               compiled; LEV stays eager): the roofline's tied step (`cost.roofline`) plus LEV's extra, which is the kernels, LEV's other ops'
               counted bytes (fp32: an upper bound under bf16 autocast) and its parameters'
               optimizer traffic (the roofline's difference of the two variants' optimizer parts).
               `step_ratio` keeps the tied table's own work in the leviathan step (an upper
               bound); `step_ratio_net` takes out what LEV replaces, the tied input part (its
               rows' gather, the dense V x D gradient and its sum with the head's), and adds
               the gather of the generated rows per token.
Each is the sum of its kernels' times (no overlap between kernels): an upper bound of the model.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace
from functools import cache

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from leviathan.cost import lev_kernels
from leviathan.cost.roofline import (
    BANDWIDTH_EFFICIENCY,
    GENERATED_TOKEN_BYTES,
    Roofline,
    roofline,
)
from leviathan.cost.traffic import TrafficCounter
from leviathan.device import forced_policy
from leviathan.model import model_config
from leviathan.model.config import ModelConfig
from leviathan.model.lev import LEV

IDS = 8192  # distinct ids of a 400m micro-batch of 16 x 512 (at most)
MICRO_BATCH = 16  # the micro-batch of the default figures


def other_bytes_per_id(lev: LEV, run: Callable[[LEV, torch.Tensor], None]) -> float:
    """HBM bytes per id of every op but the spline product's custom ops, for `run` over IDS."""
    with TrafficCounter() as counter:
        run(lev, torch.arange(IDS))
    other = sum(
        r.total for (_, op), r in counter.records.items() if not op.startswith("leviathan.")
    )
    return other / IDS


def _train(lev: LEV, ids: torch.Tensor) -> None:
    rows = lev.generate(ids)
    rows.backward(torch.ones(()).expand_as(rows))  # the backbone's gradient: read, not made


def _materialize_chunk(lev: LEV, ids: torch.Tensor) -> None:
    with torch.no_grad():
        lev.generate_into(ids, torch.empty(len(ids), lev.d_model))


@cache
def _other_bytes(cfg: ModelConfig, d_model: int, train: bool) -> float:
    """`other_bytes_per_id` of cfg's LEV at width `d_model`: a training step's or a
    materialize chunk's (FakeTensors: no memory, no device)."""
    with FakeTensorMode(), forced_policy("gpu"):
        lev = LEV(cfg.vocab_size, d_model, cfg.lev_base, cfg.lev)
        return other_bytes_per_id(lev, _train if train else _materialize_chunk)


@cache
def step_roofline(cfg: ModelConfig, micro_batch: int, fused: bool = False) -> Roofline:
    """The roofline of one micro-batch per optimizer step (cached: a model built per call)."""
    return roofline(cfg, micro_batch, micro_batch, fused=fused)


def _hbm(gpu: str) -> float:
    return lev_kernels.GPU_RATES[gpu].hbm * BANDWIDTH_EFFICIENCY


def lev_extra(cfg: ModelConfig, micro_batch: int, ids: int, gpu: str) -> dict[str, float]:
    """Seconds LEV adds to one optimizer step of `micro_batch` sequences holding `ids` distinct
    ids: its two kernels, its other ops' counted bytes (fp32: an upper bound under bf16
    autocast) and its parameters' optimizer traffic (the roofline's leviathan optimizer part
    less the tied one's, one micro-batch per optimizer step)."""
    cost = lev_kernels.cost_per_id(cfg.lev)
    tied = step_roofline(replace(cfg, variant="tied"), micro_batch)
    leviathan = step_roofline(cfg, micro_batch)
    parts = {
        "forward": lev_kernels.kernel_seconds(cost.forward, ids, gpu),
        "backward": lev_kernels.kernel_seconds(cost.backward, ids, gpu),
        "other": ids * _other_bytes(cfg, cfg.d_model, True) / _hbm(gpu),
        "optimizer": leviathan.part("optimizer").seconds(gpu) - tied.part("optimizer").seconds(gpu),
    }
    return {**parts, "total": sum(parts.values())}


def step_ratio(
    cfg: ModelConfig, micro_batch: int, ids: int, gpu: str, fused: bool = False
) -> dict[str, float]:
    """leviathan / tied step time: the roofline's tied step (`fused`: compiled) plus
    `lev_extra`; `step_ratio_net` without the tied input part LEV replaces, with the gather of
    the generated rows per token. Seconds and ratios."""
    tied = step_roofline(replace(cfg, variant="tied"), micro_batch, fused)
    tied_s, input_s = tied.seconds(gpu), tied.part("input").seconds(gpu)
    extra = lev_extra(cfg, micro_batch, ids, gpu)
    tokens = tied.tokens * cfg.d_model * GENERATED_TOKEN_BYTES / _hbm(gpu)
    return {
        "tied_step": tied_s,
        "tied_input": input_s,
        "lev_extra": extra["total"],
        "forward": extra["forward"],
        "backward": extra["backward"],
        "step_ratio": (tied_s + extra["total"]) / tied_s,
        "step_ratio_net": (tied_s - input_s + extra["total"] + tokens) / tied_s,
    }


def materialize_seconds(cfg: ModelConfig, d_model: int, gpu: str) -> float:
    """LEV materialize() of cfg's vocabulary at width `d_model` (fp32): the forward kernel over
    every id, the other ops' counted bytes and the fp32 GEMMs at the fp32 cores' rate."""
    lev, V = cfg.lev, cfg.vocab_size
    fp32 = 2 * lev_kernels.GPU_RATES[gpu].simt * lev_kernels.COMPUTE_EFFICIENCY  # multiply-add: 2
    gemm = 2 * (lev.d_seed * lev.n_heads * lev.d_seed + lev.n_heads * lev.rank * d_model)
    return (
        lev_kernels.kernel_seconds(lev_kernels.cost_per_id(lev).forward, V, gpu)
        + V * _other_bytes(cfg, d_model, False) / _hbm(gpu)
        + V * gemm / fp32
    )


def predict(
    gpu: str, micro_batch: int = MICRO_BATCH, ids: int = IDS, fused: bool = False
) -> dict[str, float]:
    cfg = model_config("400m", "o200k_base", "leviathan")
    big = model_config("1.2b", "o200k_base", "leviathan")
    ratio = step_ratio(cfg, micro_batch, ids, gpu, fused)
    ms = {k: 1e3 * ratio[k] for k in ("forward", "backward")}
    return {
        "forward_ms": ms["forward"],
        "backward_ms": ms["backward"],
        "materialize_ms": 1e3 * materialize_seconds(big, 2048, gpu),
        "tied_step_ms": 1e3 * ratio["tied_step"],
        "lev_extra_ms": 1e3 * ratio["lev_extra"],
        "step_ratio": ratio["step_ratio"],
        "tied_input_ms": 1e3 * ratio["tied_input"],
        "step_ratio_net": ratio["step_ratio_net"],
        "kernel_bytes_per_id": lev_kernels.cost_per_id(cfg.lev).bytes_per_id,
        "other_train_bytes_per_id": _other_bytes(cfg, cfg.d_model, True),
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--gpu", default="H200", choices=sorted(lev_kernels.GPU_RATES))
    ap.add_argument("--micro-batch", type=int, default=MICRO_BATCH, help="400m sequences per step")
    ap.add_argument("--ids", type=int, default=IDS, help="distinct ids of the step")
    ap.add_argument("--compiled", action="store_true", help="the tied step compiled")
    args = ap.parse_args(argv)
    figures = predict(args.gpu, args.micro_batch, args.ids, args.compiled)
    for key, value in figures.items():
        print(f"{key:<26} {value:,.5g}")
    return figures


if __name__ == "__main__":
    main()
