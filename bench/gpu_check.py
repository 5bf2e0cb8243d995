"""One command for the GPU (`make gpu-check`): the figures issue 16 asks of a GPU run.

    python bench/gpu_check.py [--json gpu_check.json]     # one GPU (H200 budget: <= 8 min)
    python bench/gpu_check.py --smoke                     # same code, micro shapes, CPU

Prints one table and writes a JSON file:
  step_ratio[_compiled]  leviathan / tied optimizer-step time at the 400m shape, bf16
                         autocast, eager and torch.compile (target <= 1.02)
  tokens_s / mfu         leviathan training tokens/s and MFU at 400m and 1.2b (target MFU
                         >= 45% at 1.2b), one micro-batch that fits the GPU
  materialize_ms         LEV materialize() of o200k at D = 2048 (target <= 20 ms)
  bf16_vs_fp32           |loss_bf16 - loss_fp32| on one fixed batch (nats)
  deterministic_overhead step time under torch.use_deterministic_algorithms(True) / default
  deterministic_repeat   per variant, deterministic mode: a rerun of 4 optimizer steps, and a
                         run resumed after 2 from a snapshot of model + optimizer, end in
                         parameters bitwise equal to the first run's (what bitwise resume needs)
  eval_tokens_s          evaluation tokens/s (model.token_losses, inference mode)
--smoke runs every measurement at the micro preset (gpt2) on CPU in fp32 with two timed
steps, so `make test` keeps this script working; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch

from leviathan.model import VARIANTS, LanguageModel, build_model, model_config
from leviathan.model.accounting import account_model
from leviathan.train.telemetry import device_name, mfu, peak_flops
from leviathan.train.trainer import set_deterministic


class Setup:
    def __init__(self, smoke: bool) -> None:
        self.smoke = smoke
        self.device = torch.device("cpu" if smoke or not torch.cuda.is_available() else "cuda")
        self.vocab = "gpt2" if smoke else "o200k_base"
        self.scales = ["micro"] if smoke else ["400m", "1.2b"]
        self.micro_batch = {"micro": 4, "400m": 16, "1.2b": 8}
        self.steps = 2 if smoke else 10

    def autocast(self, bf16: bool) -> AbstractContextManager[Any]:
        if bf16 and self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return nullcontext()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()


def _model(setup: Setup, scale: str, variant: str) -> LanguageModel:
    torch.manual_seed(0)
    return build_model(model_config(scale, setup.vocab, variant)).to(setup.device)


def _batch(setup: Setup, model: LanguageModel, batch: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    T = model.cfg.max_seq_len
    return torch.randint(0, model.cfg.vocab_size, (batch, T + 1), generator=gen).to(setup.device)


def _step_fn(
    setup: Setup,
    model: torch.nn.Module,
    ids: torch.Tensor,
    bf16: bool,
    opt: torch.optim.Optimizer | None = None,
) -> Callable[[], None]:
    opt = opt or torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        with setup.autocast(bf16):
            loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _time(setup: Setup, fn: Callable[[], object], steps: int) -> float:
    fn()  # warm-up (compilation)
    setup.sync()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        setup.sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def step_ratio(setup: Setup, scale: str, compile: bool) -> dict[str, float]:
    out = {}
    for variant in ("tied", "leviathan"):
        model = _model(setup, scale, variant)
        ids = _batch(setup, model, setup.micro_batch[scale])
        fwd = torch.compile(model) if compile else model
        out[variant] = _time(setup, _step_fn(setup, fwd, ids, bf16=True), setup.steps)
        del model, fwd
    return {
        "tied_s": out["tied"],
        "leviathan_s": out["leviathan"],
        "ratio": out["leviathan"] / out["tied"],
    }


def throughput(setup: Setup, scale: str) -> dict[str, Any]:
    model = _model(setup, scale, "leviathan")
    ids = _batch(setup, model, setup.micro_batch[scale])
    seconds = _time(setup, _step_fn(setup, torch.compile(model), ids, bf16=True), setup.steps)
    tokens = ids.shape[0] * (ids.shape[1] - 1)
    tok_s = tokens / seconds
    flops = account_model(model, model.cfg.max_seq_len).train_flops
    peak = peak_flops(device_name(setup.device))
    return {"micro_batch": ids.shape[0], "tokens_s": tok_s, "mfu": mfu(tok_s, flops, peak, 1)}


def materialize_ms(setup: Setup) -> float:
    scale, d_model = ("micro", None) if setup.smoke else ("1.2b", 2048)
    cfg = model_config(scale, setup.vocab, "leviathan")
    from leviathan.model.lev import LEV

    lev = LEV(cfg.vocab_size, d_model or cfg.d_model, cfg.lev_base, cfg.lev).to(setup.device)
    return 1e3 * _time(setup, lev.materialize, setup.steps)


def bf16_vs_fp32(setup: Setup, scale: str) -> float:
    model = _model(setup, scale, "leviathan")
    ids = _batch(setup, model, setup.micro_batch[scale])
    with torch.no_grad():
        fp32 = float(model(ids[:, :-1], ids[:, 1:]))
        with setup.autocast(True):
            bf16 = float(model(ids[:, :-1], ids[:, 1:]))
    return abs(bf16 - fp32)


def deterministic_overhead(setup: Setup, scale: str) -> float:
    model = _model(setup, scale, "leviathan")
    ids = _batch(setup, model, setup.micro_batch[scale])
    step = _step_fn(setup, model, ids, bf16=True)
    fast = _time(setup, step, setup.steps)
    set_deterministic()
    try:
        det = _time(setup, step, setup.steps)
    finally:
        torch.use_deterministic_algorithms(False)
    return det / fast


def _trained(
    setup: Setup, variant: str, ids: torch.Tensor, steps: int, snapshot: dict[str, Any] | None
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Parameters after `steps` optimizer steps (bf16 autocast on GPU) from the seeded init,
    or from `snapshot` (model + optimizer state); and the snapshot after the first half."""
    model = _model(setup, "micro", variant)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if snapshot is not None:
        model.load_state_dict(snapshot["model"])
        opt.load_state_dict(snapshot["opt"])
    step = _step_fn(setup, model, ids, bf16=True, opt=opt)
    half: dict[str, Any] = {}
    for i in range(steps):
        if i == steps // 2:
            half = copy.deepcopy({"model": model.state_dict(), "opt": opt.state_dict()})
        step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, half


def deterministic_repeat(setup: Setup) -> dict[str, bool]:
    """Per variant, under deterministic mode (micro shape: what is checked is the kernels'
    reduction order, not the scale): a rerun is bitwise the first run, and so is a run resumed
    from the mid-run snapshot."""
    # one batch for all: it depends only on the vocabulary and the context, which they share
    ids = _batch(setup, _model(setup, "micro", "tied"), setup.micro_batch["micro"])
    set_deterministic()
    out = {}
    try:
        for variant in VARIANTS:
            first, half = _trained(setup, variant, ids, 4, None)
            again, _ = _trained(setup, variant, ids, 4, None)
            resumed, _ = _trained(setup, variant, ids, 2, half)
            out[variant] = all(
                torch.equal(first[k], again[k]) and torch.equal(first[k], resumed[k]) for k in first
            )
    finally:
        torch.use_deterministic_algorithms(False)
    return out


def eval_tokens_s(setup: Setup, scale: str) -> float:
    model = _model(setup, scale, "leviathan").eval()
    ids = _batch(setup, model, setup.micro_batch[scale])

    def run() -> None:
        with torch.inference_mode(), setup.autocast(True):
            model.token_losses(ids[:, :-1], ids[:, 1:])

    return ids.shape[0] * (ids.shape[1] - 1) / _time(setup, run, setup.steps)


def gpu_check(smoke: bool, json_path: str | None = None) -> dict[str, Any]:
    """Every measurement in turn. A GPU session's time is scarce, so one measurement's failure
    (an OOM, an op without a deterministic kernel) is recorded as its error and the rest still
    run; the JSON is rewritten after each one, so a run stopped by a time limit keeps what it
    measured; `seconds` says where the time went."""
    setup = Setup(smoke)
    first = setup.scales[0]
    measurements: dict[str, Callable[[], Any]] = {
        "step_ratio": lambda: step_ratio(setup, first, compile=False),
        "step_ratio_compiled": lambda: step_ratio(setup, first, compile=True),
        "throughput": lambda: {s: throughput(setup, s) for s in setup.scales},
        "materialize_ms": lambda: materialize_ms(setup),
        "bf16_vs_fp32": lambda: bf16_vs_fp32(setup, first),
        "deterministic_overhead": lambda: deterministic_overhead(setup, first),
        "deterministic_repeat": lambda: deterministic_repeat(setup),
        "eval_tokens_s": lambda: eval_tokens_s(setup, first),
    }
    result: dict[str, Any] = {
        "device": device_name(setup.device),
        "smoke": smoke,
        "torch": torch.__version__,
        "scale": first,
        "vocab": setup.vocab,
        "seconds": {},
    }
    for key, measure in measurements.items():
        print(f"[gpu-check] {key} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            result[key] = measure()
        except Exception as e:  # recorded; the other figures still run
            traceback.print_exc()
            result[key] = {"error": f"{type(e).__name__}: {e}"}
        result["seconds"][key] = round(time.perf_counter() - t0, 1)
        if setup.device.type == "cuda":
            torch.cuda.empty_cache()
        if json_path:
            Path(json_path).write_text(json.dumps(result, indent=2))
    return result


def _failed(value: Any) -> str | None:
    return value["error"] if isinstance(value, dict) and "error" in value else None


def table(r: dict[str, Any]) -> str:
    def fmt(key: str, show: Callable[[Any], str]) -> str:
        error = _failed(r[key])
        return f"ERROR {error[:60]}" if error else show(r[key])

    throughput = r["throughput"]
    rows = [
        ("leviathan/tied step, eager", fmt("step_ratio", lambda v: f"{v['ratio']:.3f}"), "<= 1.02"),
        (
            "leviathan/tied step, compiled",
            fmt("step_ratio_compiled", lambda v: f"{v['ratio']:.3f}"),
            "<= 1.02",
        ),
        *(
            [("tokens/s, MFU", fmt("throughput", str), "")]
            if _failed(throughput)
            else [
                (f"tokens/s, MFU @ {s}", f"{t['tokens_s']:,.0f}, {t['mfu']}", "MFU >= 0.45 @ 1.2b")
                for s, t in throughput.items()
            ]
        ),
        ("materialize() ms", fmt("materialize_ms", lambda v: f"{v:.1f}"), "<= 20 (o200k, D 2048)"),
        ("|loss bf16 - fp32| nats", fmt("bf16_vs_fp32", lambda v: f"{v:.2e}"), ""),
        (
            "deterministic / default step",
            fmt("deterministic_overhead", lambda v: f"{v:.3f}"),
            "",
        ),
        (
            "deterministic rerun + resume",
            fmt(
                "deterministic_repeat",
                lambda v: ", ".join(f"{k} {'ok' if ok else 'DIFFERS'}" for k, ok in v.items()),
            ),
            "bitwise, every variant",
        ),
        ("eval tokens/s", fmt("eval_tokens_s", lambda v: f"{v:,.0f}"), ""),
    ]
    head = (
        f"gpu-check on {r['device']} ({r['scale']}, {r['vocab']}{', SMOKE' if r['smoke'] else ''})"
    )
    width = max(len(a) for a, _, _ in rows)
    took = ", ".join(f"{k} {v:.0f}s" for k, v in r["seconds"].items())
    return "\n".join([head, *(f"{a:<{width}}  {b:>22}  {c}" for a, b, c in rows), f"time: {took}"])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--smoke", action="store_true", help="micro shapes on CPU (the test)")
    ap.add_argument("--json", default="gpu_check.json")
    args = ap.parse_args(argv)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before cuBLAS's first use
    result = gpu_check(args.smoke, args.json)
    print(table(result))
    return result


if __name__ == "__main__":
    main()
