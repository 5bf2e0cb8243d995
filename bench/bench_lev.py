"""LEV kernel benchmark: materialize() and training forward+backward against their floors.

Everything is timed in one process, in rounds that time each part once in turn (medians over
rounds), so machine noise hits all of it alike; the figures that matter are ratios.

materialize (V ids, D): the floor is the two parts no implementation can skip:
  matmul   the out-projection [V, h r] x [h r, D] (one F.linear over all V rows);
  pass     one elementwise pass over the V x h x d_seed x r spline factors: an in-place
           multiply of a [n, h, d_seed, r] fp32 block, repeated V / n times (each factor
           read and written once; n = --pass-ids, so a block is well beyond cache).
  plain    the torch path (torch ops, log space: `spline_product(kernel="plain")`);
  auto     the default path (`kernel="auto"`: the fused native kernel on CPU).
train (the distinct ids of a batch, U): LEV forward + backward (`lev(ids).backward(g)`)
  with the plain and the auto spline product; its floor is the out-projection's three
  matmuls (forward, d input, d weight) on [U, h r] plus two elementwise passes over the
  U x h x d_seed x r factors (one forward, one backward).

    python bench/bench_lev.py [--vocab-size 50257] [--d-model 1024] [--ids 4096] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from leviathan.model import model_config
from leviathan.model.generated import MATERIALIZE_CHUNK
from leviathan.model.lev import LEV


def _time_rounds(
    parts: dict[str, Callable[[], object]], repeats: int, cold: tuple[str, ...] = ()
) -> dict[str, float]:
    """Median seconds of each part over `repeats` rounds; every round times each part once, in
    turn, so a burst of machine noise lands on all of them alike. Parts not in `cold` get one
    untimed warm-up call first (the native kernel's one-off compile)."""
    for name, fn in parts.items():
        if name not in cold:
            fn()
    times: dict[str, list[float]] = {name: [] for name in parts}
    for _ in range(repeats):
        for name, fn in parts.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def factor_pass(n_ids: int, h: int, P: int, r: int, block_ids: int) -> Callable[[], None]:
    block = torch.rand(min(block_ids, n_ids), h, P, r) + 0.5
    reps = -(-n_ids // block.shape[0])

    def run() -> None:
        for _ in range(reps):
            block.mul_(1.0)

    return run


def build_lev(vocab_size: int, d_model: int) -> LEV:
    cfg = model_config("400m", "gpt2", "leviathan", vocab_size=vocab_size).with_(d_model=d_model)
    torch.manual_seed(0)
    return LEV(cfg.vocab_size, d_model, cfg.lev_base, cfg.lev)


def materialize_bench(lev: LEV, repeats: int, block_ids: int) -> dict[str, float]:
    c = lev.cfg
    V, hr = lev.vocab_size, c.n_heads * c.rank
    M = torch.randn(V, hr)
    parts: dict[str, Callable[[], object]] = {
        "floor_matmul": lambda: F.linear(M, lev.out_proj.weight),
        "floor_pass": factor_pass(V, c.n_heads, c.d_seed, c.rank, block_ids),
    }
    for kernel in ("plain", "auto"):
        parts[kernel] = lambda k=kernel: _materialize_with(lev, k)
    parts["steps_1_3"] = lambda: _coordinates(lev)  # a part of "auto", not of the floor
    return _ratios(_time_rounds(parts, repeats, cold=("plain",)), "floor_matmul", "floor_pass")


@torch.no_grad()
def _coordinates(lev: LEV, chunk: int = MATERIALIZE_CHUNK) -> None:
    """LEV steps 1-3 (codebooks, head projection, LayerNorm, sigmoid) for every id, chunked as
    materialize() chunks them: work materialize() does that the floor leaves out."""
    for start in range(0, lev.vocab_size, chunk):
        lev.coordinates(lev.codebooks(torch.arange(start, min(lev.vocab_size, start + chunk))))


def _materialize_with(lev: LEV, kernel: str) -> torch.Tensor:
    lev.kernel = kernel
    try:
        return lev.materialize()
    finally:
        lev.kernel = "auto"


def train_bench(lev: LEV, n_ids: int, repeats: int, block_ids: int) -> dict[str, float]:
    c = lev.cfg
    hr = c.n_heads * c.rank
    ids = torch.randperm(lev.vocab_size, generator=torch.Generator().manual_seed(0))[:n_ids]
    g = torch.randn(n_ids, lev.d_model)
    M = torch.randn(n_ids, hr, requires_grad=True)
    W = lev.out_proj.weight.detach().clone().requires_grad_()
    one_pass = factor_pass(n_ids, c.n_heads, c.d_seed, c.rank, block_ids)

    def matmuls() -> None:
        F.linear(M, W).backward(g)

    def step(kernel: str) -> None:
        lev.kernel = kernel
        lev.zero_grad(set_to_none=True)
        lev(ids).backward(g)
        lev.kernel = "auto"

    parts: dict[str, Callable[[], object]] = {
        "floor_matmul": matmuls,
        "floor_pass": lambda: (one_pass(), one_pass()),
        "plain": lambda: step("plain"),
        "auto": lambda: step("auto"),
    }
    return _ratios(_time_rounds(parts, repeats), "floor_matmul", "floor_pass")


def _ratios(t: dict[str, float], *floor_parts: str) -> dict[str, float]:
    floor = sum(t[p] for p in floor_parts)
    return {
        **{f"{k}_s": v for k, v in t.items()},
        "floor_s": floor,
        "plain_over_floor": t["plain"] / floor,
        "auto_over_floor": t["auto"] / floor,
        "speedup": t["plain"] / t["auto"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--vocab-size", type=int, default=50257)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--ids", type=int, default=4096, help="distinct ids of the training batch")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--pass-ids", type=int, default=256, help="ids per block of the elementwise pass"
    )
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lev = build_lev(args.vocab_size, args.d_model)
    result = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.node(),
        "V": args.vocab_size,
        "D": args.d_model,
        "ids": args.ids,
        "materialize": materialize_bench(lev, args.repeats, args.pass_ids),
        "train": train_bench(lev, args.ids, args.repeats, args.pass_ids),
    }
    for what in ("materialize", "train"):
        r = result[what]
        print(
            f"{what:11s} floor {r['floor_s']:.3f} s (matmul {r['floor_matmul_s']:.3f} + pass "
            f"{r['floor_pass_s']:.3f})  plain {r['plain_s']:.3f} s ({r['plain_over_floor']:.2f}x floor)"
            f"  auto {r['auto_s']:.3f} s ({r['auto_over_floor']:.2f}x floor)  speedup {r['speedup']:.1f}x"
            + (f"  (of which steps 1-3: {r['steps_1_3_s']:.3f} s)" if "steps_1_3_s" in r else "")
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
