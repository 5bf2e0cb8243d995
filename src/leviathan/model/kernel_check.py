"""The fused kernels checked on the run's own device before the first step.

Why: the tests run the Triton kernels under Triton's interpreter, which is exact about the
arithmetic but blind to what only the compiled code does (address arithmetic, a compiler's
rewrites, a driver's). So each run checks, before it trains or evaluates, every fused kernel
it would launch against the plain torch ops on the same device, on a small deterministic
batch at the model's own shapes. A kernel that fails is not used: a WARNING names it and the
error, the run takes the plain torch path for it (`kernel_use`), and the run's manifests
record what ran (`env.kernel_check`). `runtime.kernel_check: error` stops the run instead.

What a run checks (`run_kernels`): on a GPU, LEV's Triton forward and backward (where the
model has a LEV with the fixed knot spacing) and the loss's two Triton kernels; on a CPU,
LEV's native kernel both ways. The other kernels are "not used". `check_kernels(kernels=...)`
checks any of them on any device it runs on: the Triton ones on a CPU under the interpreter
(the tests do).

The reference is the plain torch code in float64 on the same device: LEV's `_plain_forward`
and `_plain_backward`; for the loss, the logits h @ w.T, their logsumexp, the target's logit
and G = a softmax + b onehot. The kernels are launched through the code the run launches them
with (`spline_product._fused_forward` and `_fused_backward`, `loss_kernel`'s ops). `TOLERANCES` states
the bounds: those the GPU tests hold the kernels to against float64 (tests/gpu/test_cuda.py),
and for bf16 operands those of the interpreter tests (tests/model/test_loss_kernel.py).

Cost (docs/gpu.md): on a CPU 0.02 s at micro, about a second at 400m (the float64 reference
is most of it); on a GPU the checks are milliseconds of work and the time mostly Triton
compiling the kernels (not measured yet). Each record states its own `seconds`.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from leviathan.device import uses_gpu_policy
from leviathan.model import kernel_use, lev_native, lev_triton, loss
from leviathan.model.config import LEVConfig
from leviathan.model.lev import LEV
from leviathan.model.loss_head import HEAD_ROWS_MULTIPLE, IGNORE_INDEX
from leviathan.model.spline_product import (
    _fused_backward,
    _fused_forward,
    _plain_backward,
    _plain_forward,
    knot_interval_coefficients,
)

log = logging.getLogger(__name__)

LEV_IDS = {"cuda": 257, "cpu": 37}  # ids per LEV check: no multiple of any kernel's block
# tokens per loss check: a partial block of rows (64 on a GPU, 32 in the interpreter)
LOSS_TOKENS = {"cuda": 100, "cpu": 45}
LOSS_REFERENCE_ROWS = 1 << 14  # rows of the head per float64 product of the loss's reference


@dataclass(frozen=True)
class Tolerance:
    """|kernel - reference| <= atol * max |reference| + rtol * |reference| elementwise, and
    the relative L1 error (sum |kernel - reference| / sum |reference|) at most rtol."""

    rtol: float
    atol: float


TOLERANCES = {
    "lev_forward": Tolerance(1e-4, 1e-6),  # M
    "lev_backward": Tolerance(1e-3, 1e-5),  # grad_t, grad_coef
    "loss_fp32": Tolerance(1e-4, 1e-5),  # lse, picked, G: fp32 operands
    "loss_bf16": Tolerance(2e-2, 2e-3),  # the same with bf16 operands (G rounded to bf16)
}


class KernelCheckFailed(RuntimeError):
    """A kernel failed its self-check under runtime.kernel_check: error."""


@dataclass(frozen=True)
class CheckShapes:
    """The shapes a check runs at: LEV's (None: the model has no fused LEV product) and the
    loss head's (classes, width) with its operands' dtype (None: no loss check)."""

    lev: LEVConfig | None = None
    head: tuple[int, int] | None = None
    loss_dtype: torch.dtype = torch.float32


def _mismatch(name: str, got: torch.Tensor, want: torch.Tensor, tol: Tolerance) -> str | None:
    """Why `got` is not `want` within `tol` (None: it is)."""
    if got.shape != want.shape:
        return f"{name} has shape {tuple(got.shape)}, the plain path's {tuple(want.shape)}"
    got, want = got.double(), want.double()
    if not bool(torch.isfinite(got).all()):
        return f"{name} holds {int((~torch.isfinite(got)).sum())} non-finite values"
    scale = float(want.abs().max()) if want.numel() else 0.0
    err = (got - want).abs()
    over = err - (tol.atol * scale + tol.rtol * want.abs())
    l1 = float(err.sum()) / max(float(want.abs().sum()), 1e-300)
    if want.numel() == 0 or (float(over.max()) <= 0 and l1 <= tol.rtol):
        return None
    where = [int(i) for i in torch.unravel_index(over.argmax(), over.shape)]
    return (
        f"{name} differs from the plain path: |difference| {float(err.max()):.3g}, at {where} "
        f"{float(got[tuple(where)]):.6g} against {float(want[tuple(where)]):.6g} (rtol "
        f"{tol.rtol:g}, atol {tol.atol:g} x max {scale:.3g}); relative L1 error {l1:.2g}"
    )


class _Batch:
    """The check's deterministic inputs on `device` and the plain path's float64 results,
    each made once (where a kernel's check first asks for it) and shared by both
    directions' checks."""

    def __init__(self, shapes: CheckShapes, device: torch.device) -> None:
        self.shapes, self.device = shapes, device

    @functools.cached_property
    def lev(self) -> tuple[torch.Tensor, ...]:
        """float64 t [n, h, P] (random, rows on the ends 0 and 1 and on knots), the
        coefficients [h P kappa, 3, r] of S = 1 + spline_init_std N(0, 1), grad_M [n, h, r]
        and the plain path's M."""

        lev, n = _lev(self.shapes), LEV_IDS[self.device.type]
        h, P, K, r = lev.n_heads, lev.d_seed, lev.n_knots, lev.rank
        gen = torch.Generator().manual_seed(0)
        t = torch.rand(n, h, P, generator=gen, dtype=torch.float64)
        t[0], t[1] = 0.0, 1.0
        t[2] = torch.randint(0, K, (h, P), generator=gen, dtype=torch.float64) / (K - 1)
        S = 1 + lev.spline_init_std * torch.randn(h, P, K, r, generator=gen, dtype=torch.float64)
        grad_M = torch.randn(n, h, r, generator=gen, dtype=torch.float64)
        t, grad_M = t.to(self.device), grad_M.to(self.device)
        coef = knot_interval_coefficients(S.to(self.device))
        M = _plain_forward(t, coef, K, lev.log_eps, lev.chunk_elems)
        return t, coef, grad_M, M

    @functools.cached_property
    def lev_grads(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The plain path's float64 (grad_t, grad_coef)."""

        lev = _lev(self.shapes)
        t, coef, grad_M, M = self.lev
        return _plain_backward(t, coef, grad_M * M, lev.n_knots, lev.log_eps, lev.chunk_elems)

    @functools.cached_property
    def loss(self) -> tuple[torch.Tensor, ...]:
        """h [n, D] ~ N(0, 1) and w [V padded, D] ~ N(0, 4 / D) (logits ~ N(0, 4); zero rows
        pad V to the GPU rule's multiple) in the loss's dtype, drawn on the device (a head of
        200k rows in a few milliseconds), targets with every 7th ignored, and the float64
        logits of h and w as the kernels read them (padding columns -inf)."""

        assert self.shapes.head is not None
        (V, D), dtype, device = self.shapes.head, self.shapes.loss_dtype, self.device
        gen = torch.Generator(device).manual_seed(0)
        n = LOSS_TOKENS[device.type]
        h = torch.randn(n, D, generator=gen, device=device).to(dtype)
        w = torch.zeros(V + -V % HEAD_ROWS_MULTIPLE, D, device=device, dtype=dtype)
        w[:V] = torch.randn(V, D, generator=gen, device=device).mul_(2 / math.sqrt(D))
        t = torch.randint(0, V, (n,), generator=gen, device=device)
        t[::7] = IGNORE_INDEX
        z = torch.empty(n, w.shape[0], dtype=torch.float64, device=device)
        h64 = h.double()
        for rows in range(0, w.shape[0], LOSS_REFERENCE_ROWS):  # w in float64 a slice at a time
            block = slice(rows, rows + LOSS_REFERENCE_ROWS)
            z[:, block] = h64 @ w[block].double().t()
        z[:, V:] = float("-inf")
        return h, w, t, z


def _lev_forward(batch: _Batch, path: str) -> str | None:

    lev = _lev(batch.shapes)
    t, coef, _, M = batch.lev
    got = _fused_forward(t.float(), coef.float(), lev.n_knots, lev.log_eps, lev.chunk_elems, path)
    return _mismatch("M", got, M, TOLERANCES["lev_forward"])


def _lev_backward(batch: _Batch, path: str) -> str | None:
    """The kernel's gradients given the plain path's M (its forward plays no part)."""

    lev = _lev(batch.shapes)
    t, coef, grad_M, M = (x.float() for x in batch.lev)
    got = _fused_backward(t, coef, M, grad_M, lev.n_knots, lev.log_eps, lev.chunk_elems, path)
    want, tol = batch.lev_grads, TOLERANCES["lev_backward"]
    return _mismatch("grad_t", got[0], want[0], tol) or _mismatch("grad_coef", got[1], want[1], tol)


def _loss_tolerance(dtype: torch.dtype) -> Tolerance:
    return TOLERANCES["loss_fp32" if dtype == torch.float32 else "loss_bf16"]


def _loss_forward(batch: _Batch) -> str | None:
    """Each token's logsumexp and target logit (0 where ignored) from the kernel."""

    h, w, t, z = batch.loss
    lse, picked = loss._kernels().lse_and_pick(h, w, t, _classes(batch.shapes))
    valid = t != loss.IGNORE_INDEX
    want_picked = torch.where(valid, z.gather(1, t.clamp(0).unsqueeze(1)).squeeze(1), 0.0)
    tol = _loss_tolerance(batch.shapes.loss_dtype)
    return _mismatch("logsumexp", lse, torch.logsumexp(z, 1), tol) or _mismatch(
        "target logit", picked, want_picked, tol
    )


def _loss_backward(batch: _Batch) -> str | None:
    """G = a softmax + b onehot from the kernel, given the float64 logsumexp."""

    h, w, t, z = batch.loss
    lse = torch.logsumexp(z, 1)
    gen = torch.Generator().manual_seed(1)
    a = (0.5 + torch.rand(len(t), generator=gen, dtype=torch.float64)).to(batch.device)
    valid = t != loss.IGNORE_INDEX
    b = torch.where(valid, -a, 0.0)
    want = a[:, None] * (z - lse[:, None]).exp()
    want[valid, t[valid]] += b[valid]
    V = _classes(batch.shapes)
    got = loss._kernels().softmax_grad_logits(h, w, t, lse.float(), a.float(), b.float(), V)
    return _mismatch("G", got, want, _loss_tolerance(batch.shapes.loss_dtype))


# Each kernel's check: the batch -> why the kernel failed (None: it passed)
_CHECKS: dict[str, Callable[[_Batch], str | None]] = {
    kernel_use.LEV_TRITON_FORWARD: lambda b: _lev_forward(b, "triton"),
    kernel_use.LEV_TRITON_BACKWARD: lambda b: _lev_backward(b, "triton"),
    kernel_use.LOSS_TRITON_FORWARD: _loss_forward,
    kernel_use.LOSS_TRITON_BACKWARD: _loss_backward,
    kernel_use.LEV_NATIVE_FORWARD: lambda b: _lev_forward(b, "native"),
    kernel_use.LEV_NATIVE_BACKWARD: lambda b: _lev_backward(b, "native"),
}


def _lev(shapes: CheckShapes) -> LEVConfig:
    assert shapes.lev is not None
    return shapes.lev


def _classes(shapes: CheckShapes) -> int:
    assert shapes.head is not None
    return shapes.head[0]


def runnable(kernel: str, shapes: CheckShapes, device: torch.device) -> bool:
    """Whether `kernel` can run on `device` at all (a GPU for compiled Triton, the CPU for
    the native kernel or the interpreter), for a model with these shapes."""

    if kernel.startswith("lev_") and shapes.lev is None:
        return False
    if kernel.startswith("loss_") and shapes.head is None:
        return False
    if kernel.startswith("lev_native"):
        return device.type == "cpu" and lev_native.available()
    return lev_triton.usable(device)  # the loss's kernels run where LEV's do


def run_kernels(shapes: CheckShapes, device: torch.device) -> list[str]:
    """The fused kernels a run on `device` launches: on a GPU the Triton ones (the loss's
    under the GPU rule), on a CPU the native one; those of a part the model lacks, none."""
    if device.type == "cuda":
        kernels = [kernel_use.LEV_TRITON_FORWARD, kernel_use.LEV_TRITON_BACKWARD]
        if uses_gpu_policy(device):
            kernels += [kernel_use.LOSS_TRITON_FORWARD, kernel_use.LOSS_TRITON_BACKWARD]
    elif device.type == "cpu":
        kernels = [kernel_use.LEV_NATIVE_FORWARD, kernel_use.LEV_NATIVE_BACKWARD]
    else:
        kernels = []
    return [k for k in kernels if runnable(k, shapes, device)]


def _one(kernel: str, batch: _Batch) -> str:
    """The status of one kernel's check: ok, or failed with its error (one line)."""
    try:
        why = _CHECKS[kernel](batch)
        if batch.device.type == "cuda":
            torch.cuda.synchronize(batch.device)  # a fault of the kernel shows here, named
    except Exception as exc:  # noqa: BLE001 (any error of a kernel is its failure)
        why = f"{type(exc).__name__}: {exc}"
    if why is None:
        return kernel_use.OK
    return f"{kernel_use.FAILED}: {' '.join(why.split())[:500]}"


def _device_answers(device: torch.device, status: dict[str, str]) -> None:
    """Refuse to go on where a kernel's fault has left the GPU unusable (an illegal address
    ends the process's CUDA context: no plain path could run in it either)."""
    try:
        torch.cuda.synchronize(device)
        float(torch.ones(1, device=device).add_(1))
    except Exception as exc:  # noqa: BLE001 (whatever the driver raises, the device is lost)
        failed = [k for k, s in status.items() if kernel_use.failed(s)] or ["no kernel named"]
        raise KernelCheckFailed(
            f"{device} faulted in the kernel self-check ({', '.join(failed)}: "
            f"{' '.join(str(exc).split())[:300]}), and a fault ends this process's use of the "
            "GPU: fix the kernel named before rerunning"
        ) from exc


def check_kernels(
    device: torch.device, shapes: CheckShapes, kernels: Collection[str] | None = None
) -> dict[str, Any]:
    """Check `kernels` (default: those a run on `device` launches, `run_kernels`) against
    the plain torch path on `device`: the record {"device", "seconds", "kernels": {name:
    "ok" | "failed: <error>" | "not used"}} over every kernel `kernel_use` knows."""
    wanted = run_kernels(shapes, device) if kernels is None else list(kernels)
    unknown = set(wanted) - set(kernel_use.KERNELS)
    if unknown:
        raise ValueError(f"unknown kernels {sorted(unknown)}: use {list(kernel_use.KERNELS)}")
    start = time.perf_counter()
    status = dict.fromkeys(kernel_use.KERNELS, kernel_use.NOT_USED)
    batch = _Batch(shapes, device)
    with torch.no_grad():
        for kernel in wanted:
            if runnable(kernel, shapes, device):
                status[kernel] = _one(kernel, batch)
    if device.type == "cuda":
        _device_answers(device, status)
    seconds = round(time.perf_counter() - start, 3)
    return {"device": str(device), "seconds": seconds, "kernels": status}


def model_shapes(model: nn.Module, bf16: bool) -> CheckShapes:
    """The shapes of `model` (a LanguageModel): its LEV's, where it runs the fused product
    (the fixed knot spacing), and its head's; `bf16`: the loss runs under bf16 autocast."""

    levs = [m.cfg for m in model.modules() if isinstance(m, LEV) and m.knot_scale is None]
    cfg = model.cfg  # type: ignore[attr-defined]
    dtype = torch.bfloat16 if bf16 else torch.float32
    return CheckShapes(levs[0] if levs else None, (cfg.vocab_size, cfg.d_model), dtype)


def self_check(
    model: nn.Module, device: torch.device, *, bf16: bool, mode: str = "warn"
) -> dict[str, Any]:
    """Check the kernels a run of `model` on `device` launches, before its first step: a
    kernel that fails is switched off with a WARNING (mode "warn"), or stops the run
    (`KernelCheckFailed`, mode "error"). The record is this process's (`kernel_use.adopt`)."""
    if mode not in kernel_use.CHECK_MODES:
        raise ValueError(
            f"runtime kernel_check={mode!r}: use {' or '.join(kernel_use.CHECK_MODES)}"
        )
    record = check_kernels(device, model_shapes(model, bf16 and device.type == "cuda"))
    failures = {k: s for k, s in record["kernels"].items() if kernel_use.failed(s)}
    if failures and mode == "error":
        kernel, status = next(iter(failures.items()))
        raise KernelCheckFailed(
            f"the {kernel} kernel failed its self-check on {device} ({status}); fix it, or "
            "set runtime.kernel_check: warn to run its plain torch path instead"
        )
    for kernel, status in failures.items():
        log.warning(
            "the %s kernel failed its self-check on %s (%s): this run takes the plain torch "
            "path instead (runtime.kernel_check: error stops the run)",
            kernel,
            device,
            status,
        )
    kernel_use.adopt(record)
    return record
