"""Compile time of the training step's model on this CPU, whole model vs regional.

`--backend aot_eager` (default): Dynamo + AOTAutograd only (the forward and backward graphs
traced and partitioned, no inductor codegen); `--backend inductor`: the whole compile as
training runs it (on this CPU inductor generates C++; on a GPU Triton), at a scale's real
widths and layer count, on one short
sequence (`--tokens`, 64: the graph's nodes do not depend on it, and the compute to subtract
stays small; the loss runs in one chunk under the CPU rule, where a GPU's micro-batch runs
several, each unrolled into the whole-model graph):
  whole     torch.compile(model): one graph of every block and the unrolled loss chunks;
  regional  each transformer block compiled (`leviathan.train.regions.compile_regions`, as
            training does: one compiled code object, reused by every layer) and the rest eager.
Two figures each: Dynamo's own compile timers (seconds inside its frame compiles and the
lazy backward compile: `torch._dynamo.utils.compilation_time_metrics`, wall), and the first
compiled forward (with targets) + backward minus the second (the same work through the
compiled code), after an eager warm-up step, in wall and this process's CPU seconds (inductor
compiles its C++ or Triton in worker processes, which the CPU figure leaves out). Inductor's
caches start empty (a fresh TORCHINDUCTOR_CACHE_DIR per run, unless --warm-cache): a cold
compile, as a new machine's first job sees it.

  PYTHONPATH=src python bench/bench_compile.py [--scale 400m] [--variant tied] [--backend inductor]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

from leviathan.model import model_config
from leviathan.model.language_model import LanguageModel, build_model
from leviathan.train.regions import compile_regions, compile_seconds


def _step_seconds(model: torch.nn.Module, ids: torch.Tensor) -> tuple[float, float]:
    """(wall, this process's CPU) seconds of one forward with targets and backward."""
    t0, c0 = time.perf_counter(), time.process_time()
    model(ids, ids).backward()
    return time.perf_counter() - t0, time.process_time() - c0


def measure(
    scale: str, variant: str, tokens: int, how: str, backend: str
) -> tuple[float, float, float]:
    """(Dynamo's compile seconds, wall and CPU seconds the first compiled step takes beyond the
    second) (`how`: whole, regional)."""
    torch._dynamo.reset()
    cfg = model_config(scale, "o200k_base", variant)
    model: LanguageModel = build_model(cfg)
    ids = torch.randint(0, cfg.vocab_size, (1, tokens))
    _step_seconds(model, ids)  # warm-up: first-call costs outside the figure
    model.zero_grad(set_to_none=True)
    if how == "whole":
        stepped: torch.nn.Module = torch.compile(model, backend=backend)  # type: ignore[assignment]
    else:
        compile_regions(model, backend=backend)
        stepped = model
    compiled = _step_seconds(stepped, ids)
    model.zero_grad(set_to_none=True)
    eager = _step_seconds(stepped, ids)  # the compiled code again: the same work, no compile
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    print(f"  {how}: {graphs} graph(s) compiled", flush=True)
    return compile_seconds(), compiled[0] - eager[0], compiled[1] - eager[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", default="400m")
    p.add_argument("--variant", default="tied")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--how", choices=("regional", "whole"), action="append")
    p.add_argument("--backend", choices=("aot_eager", "inductor"), default="aot_eager")
    p.add_argument("--warm-cache", action="store_true", help="keep inductor's on-disk caches")
    args = p.parse_args()
    if not args.warm_cache:  # read by inductor when it first compiles, after this
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_compile_")
    cfg = model_config(args.scale, "o200k_base", args.variant)
    for how in args.how or ("regional", "whole"):
        timers, wall, cpu = measure(args.scale, args.variant, args.tokens, how, args.backend)
        print(
            f"{args.scale} {args.variant} ({cfg.n_layers} layers, {args.tokens} tokens) {how} "
            f"{args.backend}: Dynamo's timers {timers:.1f} s; first step beyond the second "
            f"{wall:.1f} s wall, {cpu:.1f} s CPU",
            flush=True,
        )


if __name__ == "__main__":
    main()
