"""LEV's predicted GPU figures (no GPU needed): what `make gpu-check` will be read against.

    python bench/lev_predict.py [--gpu H200]

Per figure, on the stated GPU (`lev_triton.GPU_RATES`, efficiencies as the roofline's):
  kernels      the Triton forward and backward at the 400m micro-batch's 8,192 distinct ids
               (`lev_triton.cost_per_id`, `kernel_seconds`: each kernel's slowest unit);
  materialize  LEV materialize() of o200k at D = 2048 (fp32, as gpu-check times it): the
               forward kernel over every id, plus every other op's HBM bytes (counted by the
               dispatch mode, `model.traffic`, on FakeTensors for one 8,192-id chunk: steps
               1-3 and the out-projection) and the fp32 GEMMs at the fp32 cores' rate;
  step ratio   leviathan / tied optimizer-step time at 400m, eager: the roofline's tied step
               (`model.roofline`) plus LEV's extra, which is the kernels, LEV's other ops'
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

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from leviathan.device import forced_policy
from leviathan.model import lev_triton, model_config
from leviathan.model.lev import LEV
from leviathan.model.roofline import BANDWIDTH_EFFICIENCY, GENERATED_TOKEN_BYTES, roofline
from leviathan.model.traffic import TrafficCounter

IDS = 8192  # distinct ids of a 400m micro-batch of 16 x 512 (at most)


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


def predict(gpu: str) -> dict[str, float]:
    rates = lev_triton.GPU_RATES[gpu]
    hbm = rates.hbm * BANDWIDTH_EFFICIENCY
    fp32 = 2 * rates.simt * lev_triton.COMPUTE_EFFICIENCY  # a multiply-add is 2 FLOPs
    cfg = model_config("400m", "o200k_base", "leviathan")
    big = model_config("1.2b", "o200k_base", "leviathan")
    cost = lev_triton.cost_per_id(cfg.lev)
    forward = lev_triton.kernel_seconds(cost.forward, IDS, gpu)
    backward = lev_triton.kernel_seconds(cost.backward, IDS, gpu)
    with FakeTensorMode(), forced_policy("gpu"):
        train = LEV(cfg.vocab_size, cfg.d_model, cfg.lev_base, cfg.lev)
        table = LEV(big.vocab_size, 2048, big.lev_base, big.lev)
        train_bytes = other_bytes_per_id(train, _train)
        table_bytes = other_bytes_per_id(table, _materialize_chunk)
    V, lev = big.vocab_size, big.lev
    gemm = 2 * (lev.d_seed * lev.n_heads * lev.d_seed + lev.n_heads * lev.rank * 2048)
    materialize = (
        lev_triton.kernel_seconds(lev_triton.cost_per_id(lev).forward, V, gpu)
        + V * table_bytes / hbm
        + V * gemm / fp32
    )
    tied = roofline(model_config("400m", "o200k_base", "tied"), 16, 16)
    leviathan = roofline(cfg, 16, 16)
    optimizer = leviathan.parts[-1].seconds(gpu) - tied.parts[-1].seconds(gpu)
    extra = forward + backward + IDS * train_bytes / hbm + optimizer
    tokens = tied.tokens * cfg.d_model * GENERATED_TOKEN_BYTES / hbm
    net = tied.seconds(gpu) - tied.part("input").seconds(gpu) + extra + tokens
    return {
        "forward_ms": 1e3 * forward,
        "backward_ms": 1e3 * backward,
        "materialize_ms": 1e3 * materialize,
        "tied_step_ms": 1e3 * tied.seconds(gpu),
        "lev_extra_ms": 1e3 * extra,
        "step_ratio": (tied.seconds(gpu) + extra) / tied.seconds(gpu),
        "tied_input_ms": 1e3 * tied.part("input").seconds(gpu),
        "step_ratio_net": net / tied.seconds(gpu),
        "kernel_bytes_per_id": cost.bytes_per_id,
        "other_train_bytes_per_id": train_bytes,
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--gpu", default="H200", choices=sorted(lev_triton.GPU_RATES))
    figures = predict(ap.parse_args(argv).gpu)
    for key, value in figures.items():
        print(f"{key:<26} {value:,.5g}")
    return figures


if __name__ == "__main__":
    main()
