"""One command for the GPU (`make gpu-check`): the figures a first GPU run must bring back.

    python bench/gpu_check.py --out DIR           # one CUDA GPU (H200 estimate: <= 5 min)
    python bench/gpu_check.py --out DIR --smoke   # same code, micro shapes, CPU (make test)

Measurements, in this order (eager first, compiled last, so a time limit costs the slow end):
  step_ratio             leviathan / tied optimizer-step time at the 400m shape, bf16 autocast,
                         eager (target <= 1.02)
  materialize_ms         LEV materialize() of o200k at D = 2048 (target <= 20 ms)
  lev_kernels_ms         LEV's Triton spline kernels against their predictions, the plain path once
  eval_tokens_s          evaluation tokens/s through the evaluation path at 400m: EvalModel
                         (the input table materialised once) and its token_losses, bf16 autocast
  eval_tokens_s_1.2b     the same at 1.2b (the study's evaluation GPU-hours rest on these two)
  bf16_vs_fp32           |loss_bf16 - loss_fp32| on one fixed batch (nats)
  deterministic_overhead step time under torch.use_deterministic_algorithms(True) / default
  deterministic_repeat   per variant, deterministic mode: a rerun of 4 optimizer steps, and a
                         run resumed after 2 from a snapshot of model + optimizer, end in
                         parameters bitwise equal to the first run's
  step_ratio_compiled    as step_ratio with each transformer block compiled, as training
                         compiles it (`leviathan.train.regions`); its leviathan step also gives
                         tokens/s and MFU at 400m
  throughput_1.2b        leviathan training tokens/s and MFU at 1.2b, compiled (target MFU >= 45%)

The training figures (step_ratio, step_ratio_compiled, throughput_1.2b) use the study's
micro-batches (config/paper.yaml, `train.<scale>.micro_batch`), cycle N_BATCHES batches of
Zipf-distributed ids (distinct-id counts that vary per step, as training's do), and print each
figure beside the plan's prediction for an H200 (`predicted`): step ms in all and per part
and MFU (`leviathan.model.roofline`, compiled or eager), peak memory
(`torch.cuda.max_memory_allocated` against `leviathan.model.memory`'s traced tensors, and
the job's total with its allowances), compile seconds (Dynamo's timers: every compile and
recompile the figure's steps caused) and kernel launches per step (torch.profiler).

Every measurement runs under its own time limit (`LIMITS_S`, and never past the whole
check's `--budget`); a failure or a timeout is recorded as that figure's error and the rest
still run. Each figure is printed as soon as it is measured and DIR/gpu_check.json is rewritten
after each, so a run stopped from outside keeps what it measured. Without CUDA the script
refuses to run unless --smoke (micro shapes on CPU, two timed steps, the bf16 branches under
CPU autocast, limits `SMOKE_SLACK` times longer: its figures mean nothing; it keeps this
script working; on CPU "launches" are the aten ops of one step).

It imports only what it measures and predicts: torch, PyYAML, the model, the evaluation model,
the device helpers, the roofline, the memory plan and the MFU arithmetic (no data layer, no
Snakemake), so it runs in a stock GPU PyTorch environment (tests/test_gpu_env.py).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import signal
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import yaml

from leviathan.device import device_name, mfu, peak_flops, set_deterministic
from leviathan.eval.checkpoint import EvalModel
from leviathan.gpus import GIB
from leviathan.model import VARIANTS, LanguageModel, build_model, model_config
from leviathan.model.accounting import account_model
from leviathan.model.lev import LEV
from leviathan.model.memory import train_memory
from leviathan.model.roofline import roofline
from leviathan.train.regions import compile_regions, compile_seconds

JSON_NAME = "gpu_check.json"
# the study whose micro-batches are measured (`train.<scale>.micro_batch`: what the plan and
# its memory and roofline predictions use), read with PyYAML (the plan's config loader needs
# Snakemake, absent from a GPU image)
STUDY = Path(__file__).resolve().parents[1] / "config" / "paper.yaml"
PREDICTED_GPU = "H200"  # the GPU the predictions are for (the check's machine)
N_BATCHES = 4  # distinct batches, cycled: the distinct-id count changes from step to step
ZIPF_S = 1.0  # token ids drawn with P(rank r) ~ 1 / r^s, as natural text's frequencies fall
# seconds per measurement on one H200 (docs/gpu.md, "The GPU check's time on one H200", gives
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
BUDGET_S = 285  # the whole check, measurements only (start-up: ~15 s more)
SMOKE_MICRO_BATCH = 2  # --smoke's micro-batch (its figures mean nothing; its time does)
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


class Setup:
    def __init__(self, smoke: bool) -> None:
        self.smoke = smoke
        self.device = torch.device("cpu" if smoke else "cuda")
        self.vocab = "gpt2" if smoke else "o200k_base"
        self.scale, self.big = ("micro", "micro") if smoke else ("400m", "1.2b")
        # the study's micro-batches; --smoke: SMOKE_MICRO_BATCH sequences of micro
        self.micro_batch = {"micro": SMOKE_MICRO_BATCH, **study_micro_batches()}
        self.steps = 2 if smoke else 10

    def autocast(self, bf16: bool) -> AbstractContextManager[Any]:
        """bf16 autocast on this device (--smoke: CPU autocast, so its branches run in tests)."""
        if bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return nullcontext()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()


def study_micro_batches(path: Path = STUDY) -> dict[str, int]:
    """The study's micro-batch per scale (`train.<scale>.micro_batch` of its config)."""
    train = yaml.safe_load(path.read_text())["train"]
    return {scale: int(fields["micro_batch"]) for scale, fields in train.items()}


def _model(setup: Setup, scale: str, variant: str) -> LanguageModel:
    torch.manual_seed(0)
    return build_model(model_config(scale, setup.vocab, variant), setup.device)


def _batches(setup: Setup, model: LanguageModel, batch: int) -> list[torch.Tensor]:
    """N_BATCHES batches of `batch` windows of max_seq_len + 1 ids, each id drawn with a
    Zipf-like frequency (ranks shuffled over the vocabulary, fixed seed): their distinct-id
    counts differ from batch to batch as training's do, so a recompile on LEV's dynamic
    shapes would show in the timed steps."""
    gen = torch.Generator().manual_seed(0)
    V, T = model.cfg.vocab_size, model.cfg.max_seq_len
    weights = torch.arange(1, V + 1, dtype=torch.float64).pow(-ZIPF_S)
    ids_of_rank = torch.randperm(V, generator=gen)
    draws = (
        torch.multinomial(weights, batch * (T + 1), True, generator=gen) for _ in range(N_BATCHES)
    )
    return [ids_of_rank[d].view(batch, T + 1).to(setup.device) for d in draws]


def _batch(setup: Setup, model: LanguageModel, batch: int) -> torch.Tensor:
    return _batches(setup, model, batch)[0]


def _step_fn(
    setup: Setup,
    model: torch.nn.Module,
    batches: list[torch.Tensor],
    bf16: bool,
    opt: torch.optim.Optimizer | None = None,
) -> Callable[[], None]:
    """One optimizer step per call, on the next of `batches` (cycled)."""
    opt = opt or torch.optim.AdamW(model.parameters(), lr=1e-4)
    cycle = itertools.cycle(batches)

    def step() -> None:
        ids = next(cycle)
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


def _launches(setup: Setup, fn: Callable[[], object]) -> int | str:
    """Kernels one call of `fn` launches (torch.profiler: CUDA kernel records); on CPU the
    aten ops it runs (nested ones included), what a CPU can count."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = setup.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    try:
        with profile(activities=activities) as prof:
            fn()
            setup.sync()
    except Exception as e:  # a profiler that cannot start costs this field only
        return f"not counted: {type(e).__name__}: {e}"
    if cuda:
        return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)
    return sum(1 for e in prof.events() if e.name.startswith("aten::"))


def _compiled(model: LanguageModel, compile: bool) -> LanguageModel:
    """The model as training steps it: its blocks compiled in place where `compile`."""
    if compile:
        compile_regions(model)
    return model


def _predicted(model: LanguageModel, micro_batch: int, compile: bool) -> dict[str, Any]:
    """The plan's predictions for this step on PREDICTED_GPU: the roofline's ms per part and
    MFU (`leviathan.model.roofline`; one micro-batch per optimizer step), and the job's peak
    GPU memory (`leviathan.model.memory`: traced tensors, and with its allowances)."""
    line = roofline(model.cfg, micro_batch, micro_batch, fused=compile)
    memory = train_memory(model.cfg, micro_batch, 1, PREDICTED_GPU)
    return {
        "gpu": PREDICTED_GPU,
        "step_ms": 1e3 * line.seconds(PREDICTED_GPU),
        "part_ms": {p.name: 1e3 * p.seconds(PREDICTED_GPU) for p in line.parts},
        "mfu": line.mfu(PREDICTED_GPU),
        "peak_allocated_gb": (memory.traced + memory.logsumexp) / GIB,
        "peak_job_gb": memory.total / GIB,
    }


def _training(
    setup: Setup, scale: str, compile: bool, variant: str = "leviathan"
) -> dict[str, Any]:
    """`variant`'s step time at `scale` over N_BATCHES cycled batches, its tokens/s, MFU,
    peak memory, compile seconds (Dynamo's timers: every compile the figure's steps caused,
    recompiles included) and kernel launches per step, each beside the plan's prediction."""
    cuda = setup.device.type == "cuda"
    model = _model(setup, scale, variant)
    batches = _batches(setup, model, setup.micro_batch[scale])
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    compiled_before = compile_seconds()
    step = _step_fn(setup, _compiled(model, compile), batches, bf16=True)
    seconds = _time(setup, step, setup.steps)
    compile_s = compile_seconds() - compiled_before
    peak = torch.cuda.max_memory_allocated() / GIB if cuda else "not measured on CPU"
    ids = batches[0]
    tok_s = ids.shape[0] * (ids.shape[1] - 1) / seconds
    flops = account_model(model, model.cfg.max_seq_len).train_flops
    measured = {
        "step_s": seconds,
        "step_ms": 1e3 * seconds,
        "micro_batch": ids.shape[0],
        "distinct_ids": [len(torch.unique(b)) for b in batches],
        "tokens_s": tok_s,
        "mfu": mfu(tok_s, flops, peak_flops(device_name(setup.device)), 1),
        "peak_allocated_gb": peak,
        "compile_s": compile_s,
        "launches_per_step": _launches(setup, step),
    }
    return {**measured, "predicted": _predicted(model, ids.shape[0], compile)}


def step_ratio(setup: Setup, compile: bool) -> dict[str, Any]:
    """leviathan / tied step time at the 400m shape, with leviathan's figures; compiled, the
    tied model's compile seconds too (leviathan's blocks then reuse its compiled code)."""
    if compile:
        torch._dynamo.reset()  # a fresh process's compile, as a training job's
    tied = _training(setup, setup.scale, compile, "tied")
    lev = _training(setup, setup.scale, compile)
    out = {"tied_s": tied["step_s"], "leviathan_s": lev["step_s"], **lev}
    out["ratio"] = lev["step_s"] / tied["step_s"]
    if compile:
        out["tied_compile_s"] = tied["compile_s"]
    return out


def _throughput(setup: Setup) -> dict[str, Any]:
    """leviathan at 1.2b, compiled (a fresh compile: its block's widths are 1.2b's)."""
    torch._dynamo.reset()
    return _training(setup, setup.big, compile=True)


def materialize_ms(setup: Setup) -> float:
    d_model = None if setup.smoke else 2048
    cfg = model_config(setup.big, setup.vocab, "leviathan")
    with setup.device:
        lev = LEV(cfg.vocab_size, d_model or cfg.d_model, cfg.lev_base, cfg.lev)
    return 1e3 * _time(setup, lev.materialize, setup.steps)


def lev_kernels_ms(setup: Setup) -> dict[str, Any]:
    """LEV's Triton spline kernels (`model/lev_triton.py`) at the 400m micro-batch's 8,192
    distinct ids (--smoke: micro, 32 ids, under Triton's interpreter where it runs): forward,
    backward, and the forward over every id of o200k (materialize's share), each beside
    `lev_triton`'s prediction; and the plain torch path's forward + backward once."""
    from leviathan.model import lev_triton
    from leviathan.model.lev import knot_interval_coefficients, spline_product

    lev = model_config(setup.scale, setup.vocab, "leviathan").lev
    n, gen = (32 if setup.smoke else 8192), torch.Generator().manual_seed(0)
    shape = (lev.n_heads, lev.d_seed)
    t = torch.rand(n, *shape, generator=gen).to(setup.device)
    S = 1 + lev.spline_init_std * torch.randn(*shape, lev.n_knots, lev.rank, generator=gen)
    S = S.to(setup.device)

    def plain() -> None:
        leaves = t.clone().requires_grad_(), S.clone().requires_grad_()
        spline_product(*leaves, lev.log_eps, lev.chunk_elems, "plain").sum().backward()

    out: dict[str, Any] = {"ids": n, "plain_forward_backward_ms": 1e3 * _time(setup, plain, 1)}
    if not lev_triton.usable(setup.device):
        out["triton"] = "not run: Triton is absent, or on CPU not under its interpreter"
        return out
    coef, K, eps = knot_interval_coefficients(S).contiguous(), lev.n_knots, lev.log_eps
    M = lev_triton.spline_forward(t, coef, K, eps)
    grad_M = torch.randn_like(M)
    vocab = model_config(setup.big, setup.vocab, "leviathan").vocab_size
    every = torch.rand(n if setup.smoke else vocab, *shape, generator=gen).to(setup.device)
    cost = lev_triton.cost_per_id(lev)
    runs = {
        "forward": (lambda: lev_triton.spline_forward(t, coef, K, eps), cost.forward, n),
        "backward": (
            lambda: lev_triton.spline_backward(t, coef, M, grad_M, K, eps),
            cost.backward,
            n,
        ),
        "materialize_forward": (
            lambda: lev_triton.spline_forward(every, coef, K, eps),
            cost.forward,
            len(every),
        ),
    }
    for name, (fn, kernel_cost, ids) in runs.items():
        out[f"{name}_ms"] = 1e3 * _time(setup, fn, setup.steps)
        out[f"{name}_predicted_ms"] = 1e3 * lev_triton.kernel_seconds(kernel_cost, ids)
    return out


def eval_tokens_s(setup: Setup, scale: str) -> float:
    """Tokens/s of the evaluation path at `scale`: EvalModel materialises the input table
    once, then token_losses runs the backbone and the chunked loss (bf16 autocast on CUDA)."""
    model = EvalModel(_model(setup, scale, "leviathan"), precision="auto")
    ids = _batch(setup, model, setup.micro_batch[scale])  # type: ignore[arg-type]
    seconds = _time(setup, lambda: model.token_losses(ids[:, :-1], ids[:, 1:]), setup.steps)
    return ids.shape[0] * (ids.shape[1] - 1) / seconds


def bf16_vs_fp32(setup: Setup) -> float:
    model = _model(setup, setup.scale, "leviathan")
    ids = _batch(setup, model, setup.micro_batch[setup.scale])
    with torch.no_grad():
        fp32 = float(model(ids[:, :-1], ids[:, 1:]))
        with setup.autocast(True):
            bf16 = float(model(ids[:, :-1], ids[:, 1:]))
    return abs(bf16 - fp32)


def deterministic_overhead(setup: Setup) -> float:
    model = _model(setup, setup.scale, "leviathan")
    batches = _batches(setup, model, setup.micro_batch[setup.scale])
    step = _step_fn(setup, model, batches, bf16=True)
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
    step = _step_fn(setup, model, [ids], bf16=True, opt=opt)
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


def measurements(setup: Setup) -> dict[str, Callable[[], Any]]:
    """Name -> measurement, in the order they run (eager first, compiled last)."""
    return {
        "step_ratio": lambda: step_ratio(setup, compile=False),
        "materialize_ms": lambda: materialize_ms(setup),
        "lev_kernels_ms": lambda: lev_kernels_ms(setup),
        "eval_tokens_s": lambda: eval_tokens_s(setup, setup.scale),
        "eval_tokens_s_1.2b": lambda: eval_tokens_s(setup, setup.big),
        "bf16_vs_fp32": lambda: bf16_vs_fp32(setup),
        "deterministic_overhead": lambda: deterministic_overhead(setup),
        "deterministic_repeat": lambda: deterministic_repeat(setup),
        "step_ratio_compiled": lambda: step_ratio(setup, compile=True),
        "throughput_1.2b": lambda: _throughput(setup),
    }


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_show(v)}" for k, v in value.items())
    return str(value)


def gpu_check(smoke: bool, out_dir: Path, budget_s: float = BUDGET_S) -> dict[str, Any]:
    """Every measurement in turn, each under its time limit; JSON rewritten after each."""
    setup = Setup(smoke)
    slack = SMOKE_SLACK if smoke else 1
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / JSON_NAME
    result: dict[str, Any] = {
        "device": device_name(setup.device),
        "smoke": smoke,
        "torch": torch.__version__,
        "scale": setup.scale,
        "vocab": setup.vocab,
        "seconds": {},
    }
    json_path.write_text(json.dumps(result, indent=2))
    start = time.perf_counter()
    for key, measure in measurements(setup).items():
        left = budget_s * slack - (time.perf_counter() - start)
        t0 = time.perf_counter()
        try:
            if left <= 0:
                raise MeasurementTimeout(
                    f"not run: the check's budget of {budget_s:.0f} s is spent"
                )
            with time_limit(min(LIMITS_S[key] * slack, left)):
                result[key] = measure()
        except (Exception, MeasurementTimeout) as e:  # recorded; the other figures still run
            if not isinstance(e, MeasurementTimeout):
                traceback.print_exc()
            result[key] = {"error": f"{type(e).__name__}: {e}"}
        result["seconds"][key] = round(time.perf_counter() - t0, 1)
        if setup.device.type == "cuda":
            torch.cuda.empty_cache()
        json_path.write_text(json.dumps(result, indent=2))
        print(f"{key}: {_show(result[key])}  ({result['seconds'][key]} s)", flush=True)
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
