"""One command for the GPU (`make gpu-check`): the figures a first GPU run must bring back.

    python bench/gpu_check.py --out DIR           # one CUDA GPU (H200 estimate: <= 5 min)
    python bench/gpu_check.py --out DIR --smoke   # same code, micro shapes, CPU (make test)

Measurements, in this order (eager first, compiled last, so a time limit costs the slow end):
  step_ratio             leviathan / tied optimizer-step time at the 400m shape, bf16 autocast,
                         eager (target <= 1.02), and each variant's step
  materialize_ms         LEV materialize() of o200k at D = 2048 (target <= 20 ms)
  lev_kernels_ms         LEV's Triton spline kernels against their predictions, the plain path once
  eval_tokens_s          evaluation tokens/s through the evaluation path at 400m: EvalModel
                         (the input table materialised once) and its token_losses, bf16 autocast
  eval_tokens_s_1.2b     the same at 1.2b (the study's evaluation GPU-hours rest on these two)
  bf16_vs_fp32           |loss_bf16 - loss_fp32| on one fixed batch (nats)
  deterministic_overhead step time under torch.use_deterministic_algorithms(True) / default
                         (its `slowdown`)
  deterministic_repeat   per variant, deterministic mode: a rerun of 4 optimizer steps, and a
                         run resumed after 2 from a snapshot of model + optimizer, end in
                         parameters bitwise equal to the first run's
  step_ratio_compiled    as step_ratio with each transformer block compiled, as training
                         compiles it (`leviathan.train.regions`); its leviathan step also gives
                         tokens/s and MFU at 400m
  throughput_1.2b        leviathan training tokens/s and MFU at 1.2b, compiled (target MFU >= 45%)

The training figures (step_ratio, step_ratio_compiled, throughput_1.2b) use the study's
micro-batches (config/paper.yaml, `train.<scale>.micro_batch`), cycle N_BATCHES batches of
Zipf-distributed ids (distinct-id counts that vary per step, as training's do), and step as
the trainer does (`leviathan.train.optimizer`: fused AdamW on CUDA, gradients clipped). Each
gives step ms, tokens/s, MFU, peak memory (`torch.cuda.max_memory_allocated`), compile
seconds (Dynamo's timers: every compile and recompile the figure's steps caused) and kernel
launches per step (torch.profiler).

Every figure is predicted before it is measured, at the shapes it measures (micro-batch, the
batches' mean distinct ids) and for the GPU it runs on (H200 where the models have no rates
for it), and written beside its measurement (`predicted`, `gpu_check_predict.py`): the step
ratio (LEV's work added to the tied step, `lev_predict.py`); each variant's step ms, tokens/s
and MFU (tied's from the roofline; leviathan's the tied step plus LEV's work at the distinct
ids measured, with the plan's roofline, `plan_step_ms` and `plan_mfu`, beside it); peak
memory (the memory plan's traced tensors); materialize and LEV's kernels; evaluation
tokens/s (the plan's rule). A value with no model names why (`none`). A prediction that fails is recorded
as its error and the figure still measured. Each figure prints its rows as it is measured;
the last block (`summary` in the JSON) is every row: figure, predicted, measured, ratio.

Every measurement runs under its own time limit (`LIMITS_S`, and never past the whole
check's `--budget`); a failure or a timeout is recorded as that figure's error and the rest
still run. Each figure is printed as soon as it is measured and DIR/gpu_check.json is rewritten
after each, so a run stopped from outside keeps what it measured. Without CUDA the script
refuses to run unless --smoke (micro shapes on CPU, two timed steps, the bf16 branches under
CPU autocast, limits `SMOKE_SLACK` times longer: its figures mean nothing; it keeps this
script working; on CPU "launches" are the aten ops of one step).

It imports only what it measures and predicts: torch, PyYAML, the model, the evaluation model,
the trainer's optimizer, the device helpers, the roofline, the memory plan, the plan's
evaluation rule and the MFU arithmetic (no data layer, no Snakemake), so it runs in a stock
GPU PyTorch environment (tests/test_gpu_env.py).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple

import torch

from leviathan.device import device_name, mfu, peak_flops, set_deterministic
from leviathan.eval.checkpoint import EvalModel
from leviathan.gpus import GIB
from leviathan.model import VARIANTS
from leviathan.model.accounting import account_model
from leviathan.model.lev import LEV
from leviathan.train.optimizer import build_optimizer
from leviathan.train.regions import compile_seconds

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:  # its sibling modules, however it is loaded
    sys.path.insert(0, str(BENCH))
import gpu_check_predict as predict  # noqa: E402
from gpu_check_steps import (  # noqa: E402
    Setup,
    compiled,
    device_batches,
    distinct_ids,
    first_batch,
    launches,
    new_model,
    step_fn,
    timed,
)

JSON_NAME = "gpu_check.json"
# seconds per figure, its prediction and measurement, on one H200 (docs/gpu.md, "The GPU check's time on one H200", gives
# the estimate each limit covers; the compiled two from the regional compile's measured time)
LIMITS_S = {
    "step_ratio": 40,
    "materialize_ms": 15,
    "lev_kernels_ms": 25,
    "eval_tokens_s": 15,
    "eval_tokens_s_1.2b": 25,
    "bf16_vs_fp32": 10,
    "deterministic_overhead": 15,
    "deterministic_repeat": 20,
    "step_ratio_compiled": 60,
    "throughput_1.2b": 55,
}
BUDGET_S = 285  # the whole check, its figures only (start-up: ~15 s more)
SMOKE_SLACK = 30  # --smoke on a shared CPU: limits and budget this many times longer


class MeasurementTimeout(BaseException):  # noqa: N818
    """A BaseException, as KeyboardInterrupt is: torch.compile's internals catch Exception
    (fallbacks), which must not swallow the time limit."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise MeasurementTimeout in this (main) thread after `seconds` (SIGALRM)."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise MeasurementTimeout(f"over its time limit of {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _training(
    setup: Setup, scale: str, compile: bool, variant: str = "leviathan"
) -> dict[str, Any]:
    """`variant`'s step time at `scale` over N_BATCHES cycled batches, its tokens/s, MFU,
    peak memory, compile seconds (Dynamo's timers: every compile the figure's steps caused,
    recompiles included) and kernel launches per step."""
    cuda = setup.device.type == "cuda"
    model = new_model(setup, scale, variant)
    batches = device_batches(setup, model.cfg, setup.micro_batch[scale])
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    compiled_before = compile_seconds()
    step = step_fn(setup, compiled(model, compile), batches, setup.recipe(scale, variant))
    seconds = timed(setup, step, setup.steps)
    compile_s = compile_seconds() - compiled_before
    peak = torch.cuda.max_memory_allocated() / GIB if cuda else "not measured on CPU"
    ids = batches[0]
    tok_s = ids.shape[0] * (ids.shape[1] - 1) / seconds
    flops = account_model(model, model.cfg.max_seq_len).train_flops
    return {
        "micro_batch": ids.shape[0],
        "distinct_ids": distinct_ids(setup, scale),
        "step_ms": 1e3 * seconds,
        "tokens_s": tok_s,
        "mfu": mfu(tok_s, flops, peak_flops(device_name(setup.device)), 1),
        "peak_allocated_gb": peak,
        "compile_s": compile_s,
        "launches_per_step": launches(setup, step),
    }


def step_ratio(setup: Setup, compile: bool) -> dict[str, Any]:
    """leviathan / tied step time at the 400m shape, and each variant's figures; compiled,
    the tied model's compile comes first (leviathan's blocks then reuse its compiled code)."""
    if compile:
        torch._dynamo.reset()  # a fresh process's compile, as a training job's
    tied = _training(setup, setup.scale, compile, "tied")
    lev = _training(setup, setup.scale, compile)
    return {"ratio": lev["step_ms"] / tied["step_ms"], "tied": tied, "leviathan": lev}


def _throughput(setup: Setup) -> dict[str, Any]:
    """leviathan at 1.2b, compiled (a fresh compile: its block's widths are 1.2b's)."""
    torch._dynamo.reset()
    return _training(setup, setup.big, compile=True)


def _materialize_width(setup: Setup) -> int:
    return setup.cfg(setup.big).d_model if setup.smoke else 2048


def materialize_ms(setup: Setup) -> dict[str, Any]:
    cfg, d_model = setup.cfg(setup.big), _materialize_width(setup)
    with setup.device:
        lev = LEV(cfg.vocab_size, d_model, cfg.lev_base, cfg.lev)
    seconds = timed(setup, lev.materialize, setup.steps)
    return {"vocab_size": cfg.vocab_size, "d_model": d_model, "ms": 1e3 * seconds}


def _kernel_ids(setup: Setup) -> tuple[int, int]:
    """LEV's kernels' ids: the 400m micro-batch's (at most), and every id of materialize's."""
    return (32, 32) if setup.smoke else (8192, setup.cfg(setup.big).vocab_size)


def lev_kernels_ms(setup: Setup) -> dict[str, Any]:
    """LEV's Triton spline kernels (`model/lev_triton.py`) at 8,192 distinct ids (--smoke:
    micro, 32 ids, under Triton's interpreter where it runs): forward, backward, and the
    forward over every id of o200k (materialize's share); and the plain torch path's
    forward + backward once."""
    from leviathan.model import lev_triton
    from leviathan.model.spline_product import knot_interval_coefficients, spline_product

    lev = setup.cfg(setup.scale).lev
    (n, n_every), gen = _kernel_ids(setup), torch.Generator().manual_seed(0)
    shape = (lev.n_heads, lev.d_seed)
    t = torch.rand(n, *shape, generator=gen).to(setup.device)
    S = 1 + lev.spline_init_std * torch.randn(*shape, lev.n_knots, lev.rank, generator=gen)
    S = S.to(setup.device)

    def plain() -> None:
        leaves = t.clone().requires_grad_(), S.clone().requires_grad_()
        spline_product(*leaves, lev.log_eps, lev.chunk_elems, "plain").sum().backward()

    out: dict[str, Any] = {"ids": n, "plain_forward_backward_ms": 1e3 * timed(setup, plain, 1)}
    if not lev_triton.usable(setup.device):
        out["triton"] = "not run: Triton is absent, or on CPU not under its interpreter"
        return out
    coef, K, eps = knot_interval_coefficients(S).contiguous(), lev.n_knots, lev.log_eps
    M = lev_triton.spline_forward(t, coef, K, eps)
    grad_M = torch.randn_like(M)
    every = torch.rand(n_every, *shape, generator=gen).to(setup.device)
    runs = {
        "forward": lambda: lev_triton.spline_forward(t, coef, K, eps),
        "backward": lambda: lev_triton.spline_backward(t, coef, M, grad_M, K, eps),
        "materialize_forward": lambda: lev_triton.spline_forward(every, coef, K, eps),
    }
    for name, fn in runs.items():
        out[f"{name}_ms"] = 1e3 * timed(setup, fn, setup.steps)
    return out


def eval_tokens_s(setup: Setup, scale: str) -> dict[str, Any]:
    """Tokens/s of the evaluation path at `scale`: EvalModel materialises the input table
    once, then token_losses runs the backbone and the chunked loss (bf16 autocast on CUDA)."""
    model = EvalModel(new_model(setup, scale, "leviathan"), precision="auto")
    ids = first_batch(setup, setup.cfg(scale), setup.micro_batch[scale])
    seconds = timed(setup, lambda: model.token_losses(ids[:, :-1], ids[:, 1:]), setup.steps)
    return {"micro_batch": ids.shape[0], "tokens_s": ids.shape[0] * (ids.shape[1] - 1) / seconds}


def bf16_vs_fp32(setup: Setup) -> dict[str, Any]:
    model = new_model(setup, setup.scale, "leviathan")
    ids = first_batch(setup, model.cfg, setup.micro_batch[setup.scale])
    with torch.no_grad():
        fp32 = float(model(ids[:, :-1], ids[:, 1:]))
        with setup.autocast(True):
            bf16 = float(model(ids[:, :-1], ids[:, 1:]))
    return {"nats": abs(bf16 - fp32)}


def deterministic_overhead(setup: Setup) -> dict[str, Any]:
    model = new_model(setup, setup.scale, "leviathan")
    batches = device_batches(setup, model.cfg, setup.micro_batch[setup.scale])
    step = step_fn(setup, model, batches, setup.recipe(setup.scale, "leviathan"))
    fast = timed(setup, step, setup.steps)
    set_deterministic()
    try:
        det = timed(setup, step, setup.steps)
    finally:
        torch.use_deterministic_algorithms(False)
    return {"slowdown": det / fast}


def _trained(
    setup: Setup, variant: str, ids: torch.Tensor, steps: int, snapshot: dict[str, Any] | None
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Parameters after `steps` trainer steps (bf16 autocast, clipping, the trainer's AdamW)
    from the seeded init, or from `snapshot` (model + optimizer state); and the snapshot
    after the first half."""
    model, recipe = new_model(setup, "micro", variant), setup.recipe("micro", variant)
    opt = build_optimizer(model.parameters(), recipe, setup.device)
    if snapshot is not None:
        model.load_state_dict(snapshot["model"])
        opt.load_state_dict(snapshot["opt"])
    step = step_fn(setup, model, [ids], recipe, opt=opt)
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
    ids = first_batch(setup, setup.cfg("micro"), setup.micro_batch["micro"])
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


class Figure(NamedTuple):
    """One figure of the check: its prediction (computed first), then its measurement."""

    predict: Callable[[], dict[str, Any]]
    measure: Callable[[], dict[str, Any]]


def _ratio_prediction(setup: Setup, compile: bool) -> dict[str, Any]:
    ids = statistics.mean(distinct_ids(setup, setup.scale))
    mb = setup.micro_batch[setup.scale]
    return predict.step_ratio(setup.cfg(setup.scale), mb, ids, compile, setup.gpu)


def _throughput_prediction(setup: Setup) -> dict[str, Any]:
    ids = statistics.mean(distinct_ids(setup, setup.big))
    mb = setup.micro_batch[setup.big]
    return {"gpu": setup.gpu, **predict.training(setup.cfg(setup.big), mb, ids, True, setup.gpu)}


def measurements(setup: Setup) -> dict[str, Figure]:
    """Name -> figure, in the order they run (eager first, compiled last)."""
    gpu, scale, big = setup.gpu, setup.scale, setup.big
    kernel_ids = _kernel_ids(setup)
    return {
        "step_ratio": Figure(
            lambda: _ratio_prediction(setup, False), lambda: step_ratio(setup, compile=False)
        ),
        "materialize_ms": Figure(
            lambda: predict.materialize(setup.cfg(big), _materialize_width(setup), gpu),
            lambda: materialize_ms(setup),
        ),
        "lev_kernels_ms": Figure(
            lambda: predict.lev_kernels(setup.cfg(scale), *kernel_ids, gpu),
            lambda: lev_kernels_ms(setup),
        ),
        "eval_tokens_s": Figure(
            lambda: predict.eval_tokens(setup.cfg(scale), setup.micro_batch[scale], gpu),
            lambda: eval_tokens_s(setup, scale),
        ),
        "eval_tokens_s_1.2b": Figure(
            lambda: predict.eval_tokens(setup.cfg(big), setup.micro_batch[big], gpu),
            lambda: eval_tokens_s(setup, big),
        ),
        "bf16_vs_fp32": Figure(lambda: predict.none("nats"), lambda: bf16_vs_fp32(setup)),
        "deterministic_overhead": Figure(
            lambda: predict.none("slowdown"), lambda: deterministic_overhead(setup)
        ),
        "deterministic_repeat": Figure(
            lambda: predict.bitwise(VARIANTS),
            lambda: deterministic_repeat(setup),
        ),
        "step_ratio_compiled": Figure(
            lambda: _ratio_prediction(setup, True), lambda: step_ratio(setup, compile=True)
        ),
        "throughput_1.2b": Figure(
            lambda: _throughput_prediction(setup), lambda: _throughput(setup)
        ),
    }


def _run(figure: Figure, seconds: float) -> dict[str, Any]:
    """The figure's prediction, then its measurement, within `seconds`: a failed prediction
    is its error and the figure is still measured; a failed measurement keeps the prediction."""
    predicted: dict[str, Any] = {"error": "not computed: the figure's time ran out first"}
    try:
        if seconds <= 0:
            raise MeasurementTimeout("not run: the check's --budget is spent")
        with time_limit(seconds):
            predicted = predict.guarded(figure.predict)
            return {**figure.measure(), "predicted": predicted}
    except (Exception, MeasurementTimeout) as e:  # recorded; the other figures still run
        if not isinstance(e, MeasurementTimeout):
            traceback.print_exc()
        return {"error": f"{type(e).__name__}: {e}", "predicted": predicted}


def gpu_check(smoke: bool, out_dir: Path, budget_s: float = BUDGET_S) -> dict[str, Any]:
    """Every figure in turn, each under its time limit; JSON rewritten after each, then the
    summary: each figure predicted, measured and their ratio."""
    setup = Setup(smoke)
    slack = SMOKE_SLACK if smoke else 1
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / JSON_NAME
    result: dict[str, Any] = {
        "device": device_name(setup.device),
        "predicted_gpu": setup.gpu,
        "smoke": smoke,
        "torch": torch.__version__,
        "scale": setup.scale,
        "vocab": setup.vocab,
        "seconds": {},
    }
    json_path.write_text(json.dumps(result, indent=2))
    start = time.perf_counter()
    for key, figure in measurements(setup).items():
        left = budget_s * slack - (time.perf_counter() - start)
        t0 = time.perf_counter()
        result[key] = _run(figure, min(LIMITS_S[key] * slack, left))
        result["seconds"][key] = round(time.perf_counter() - t0, 1)
        if setup.device.type == "cuda":
            torch.cuda.empty_cache()
        json_path.write_text(json.dumps(result, indent=2))
        error = f"  error {result[key]['error']}" if "error" in result[key] else ""
        print(f"{key} ({result['seconds'][key]} s){error}", flush=True)
        print(predict.shown(predict.figure_rows, key, result[key])[1], flush=True)
    result["summary"], table = predict.shown(predict.summary, result, list(LIMITS_S))
    json_path.write_text(json.dumps(result, indent=2))
    print(
        f"\nsummary (predicted for {setup.gpu}; ratio: measured / predicted)\n{table}", flush=True
    )
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", required=True, type=Path, help=f"folder for {JSON_NAME}")
    ap.add_argument("--smoke", action="store_true", help="micro shapes on CPU (the test)")
    ap.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for the whole check")
    args = ap.parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        sys.exit(
            f"gpu-check: no CUDA device (torch {torch.__version__}); run it on a GPU with a "
            "CUDA build of torch (make gpu-check GPU_PYTHON=...), or pass --smoke for the CPU run"
        )
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before cuBLAS's first use
    print(
        f"gpu-check on {'cpu (SMOKE)' if args.smoke else torch.cuda.get_device_name()}", flush=True
    )
    return gpu_check(args.smoke, args.out, args.budget)


if __name__ == "__main__":
    main()
