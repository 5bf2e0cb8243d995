"""The kernel self-check (`kernel_check`) on CPU: every fused kernel against the plain torch
path (the Triton ones under Triton's interpreter, tests/conftest.py; the native one), each
kernel broken on purpose (its launcher returns a wrong value, or raises) failing its check and
switched off, and then the paths that would launch it taking the plain torch ops instead:
LEV's choice for each direction (on a CUDA tensor: a FakeTensor, no GPU needed) and the loss's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from leviathan.model import build_model, kernel_use, lev_native, lev_triton, loss, spline_product
from leviathan.model.config import LEVConfig, model_config
from leviathan.model.kernel_check import (
    CheckShapes,
    KernelCheckFailed,
    check_kernels,
    model_shapes,
    run_kernels,
    self_check,
)
from leviathan.provenance import environment

CPU = torch.device("cpu")
LEV_SHAPE = LEVConfig(d_seed=10, n_heads=2, n_knots=5, rank=3)  # P > RESCALE: it rescales
SHAPES = CheckShapes(LEV_SHAPE, (300, 24))  # head: 300 classes padded to 384, D 24
NATIVE = (kernel_use.LEV_NATIVE_FORWARD, kernel_use.LEV_NATIVE_BACKWARD)
TRITON = tuple(k for k in kernel_use.KERNELS if k not in NATIVE)
interpreted = pytest.mark.skipif(
    not lev_triton.usable(CPU),
    reason="Triton is not importable here, or was imported without TRITON_INTERPRET=1",
)
native = pytest.mark.skipif(not lev_native.available(), reason="no C compiler here")


@pytest.fixture(autouse=True)
def fresh_process() -> Iterator[None]:
    """Every kernel usable and no record, before and after (the switches are per process)."""
    kernel_use.forget()
    yield
    kernel_use.forget()


def _launcher(kernel: str) -> tuple[Any, str, int | None]:
    """(module, name) of the function that launches `kernel`, and which of its outputs to
    falsify (None: its only one)."""
    if kernel.startswith("loss_"):  # the loss's kernels' module imports Triton
        name = "lse_and_pick" if kernel == kernel_use.LOSS_TRITON_FORWARD else "softmax_grad_logits"
        return loss._kernels(), name, 0 if name == "lse_and_pick" else None
    module = lev_triton if kernel.startswith("lev_triton") else lev_native
    return (
        module,
        *(("spline_forward", None) if kernel.endswith("forward") else ("spline_backward", 1)),
    )


def break_kernel(monkeypatch: pytest.MonkeyPatch, kernel: str) -> list[int]:
    """Make `kernel` return one wrong element (the launcher's true output, one entry moved by
    a tenth of the output's largest magnitude plus 0.1); the list counts its calls."""
    module, name, which = _launcher(kernel)
    true, calls = getattr(module, name), []

    def wrong(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        out = true(*args, **kwargs)
        flat = (out if which is None else out[which]).view(-1)
        flat[len(flat) // 2] += 0.1 * (1 + float(flat.abs().max()))
        return out

    monkeypatch.setattr(module, name, wrong)
    return calls


@interpreted
@pytest.mark.parametrize(
    ("dtype", "kernels"), [(torch.float32, kernel_use.KERNELS), (torch.bfloat16, TRITON[2:])]
)
def test_every_kernel_passes_against_the_plain_path(dtype: torch.dtype, kernels: Any) -> None:
    """fp32 (all six; the native pair where a C compiler is) and bf16 loss operands."""
    shapes = CheckShapes(LEV_SHAPE, (300, 24), dtype)
    record = check_kernels(CPU, shapes, kernels)
    ran = [k for k in kernels if k not in NATIVE or lev_native.available()]
    assert record["kernels"] == {k: "ok" if k in ran else "not used" for k in kernel_use.KERNELS}, (
        record
    )
    assert record["device"] == "cpu" and record["seconds"] > 0


@pytest.mark.parametrize("kernel", kernel_use.KERNELS)
def test_a_broken_kernel_fails_its_check_and_is_switched_off(
    monkeypatch: pytest.MonkeyPatch, kernel: str
) -> None:
    if kernel in NATIVE and not lev_native.available():
        pytest.skip("no C compiler here")
    if kernel in TRITON and not lev_triton.usable(CPU):
        pytest.skip("Triton's interpreter is not on here")
    calls = break_kernel(monkeypatch, kernel)
    record = check_kernels(CPU, SHAPES, [kernel])
    status = record["kernels"][kernel]
    assert status.startswith("failed: ") and "differs from the plain path" in status, status
    assert calls == [1]
    kernel_use.adopt(record)
    assert not kernel_use.usable(kernel)
    assert all(kernel_use.usable(k) for k in kernel_use.KERNELS if k != kernel)


@native
def test_a_kernel_that_raises_fails_with_its_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_: Any) -> None:
        raise RuntimeError("launch failed:\n  no such device")

    monkeypatch.setattr(lev_native, "spline_backward", boom)
    record = check_kernels(CPU, SHAPES, NATIVE)
    assert record["kernels"][kernel_use.LEV_NATIVE_FORWARD] == "ok"
    assert record["kernels"][kernel_use.LEV_NATIVE_BACKWARD] == (
        "failed: RuntimeError: launch failed: no such device"  # one line
    )


def _fake_cuda(*shape: int) -> torch.Tensor:
    with FakeTensorMode(allow_non_fake_inputs=True):
        return torch.empty(*shape, device="cuda")


def _off(*kernels: str) -> None:
    statuses = dict.fromkeys(kernel_use.KERNELS, "ok")
    kernel_use.adopt(
        {"kernels": {**statuses, **dict.fromkeys(kernels, "failed: wrong on purpose")}}
    )


@interpreted
def test_lev_takes_the_plain_path_in_the_direction_whose_kernel_failed() -> None:
    """On a GPU tensor "auto" is Triton each way until one direction's kernel fails; on a CPU
    the native kernel likewise. Each direction is chosen alone: the other keeps its kernel."""
    gpu, cpu = _fake_cuda(4, 2, 10), torch.rand(4, 2, 10)
    cpu_path = "native" if lev_native.available() else "plain"
    assert [spline_product._resolve("auto", gpu, d) for d in ("forward", "backward")] == [
        "triton"
    ] * 2
    _off(kernel_use.LEV_TRITON_FORWARD, kernel_use.LEV_NATIVE_BACKWARD)
    assert spline_product._resolve("auto", gpu, "forward") == "plain"
    assert spline_product._resolve("auto", gpu, "backward") == "triton"
    assert spline_product._resolve("auto", cpu, "forward") == cpu_path
    assert spline_product._resolve("auto", cpu, "backward") == "plain"


@native
def test_lev_with_a_switched_off_kernel_computes_the_plain_paths_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The broken native forward, found by the check, is never called again: LEV's product
    and its gradients through "auto" are then those of kernel "plain" (the native backward
    still runs: float32 rounding apart from the plain backward)."""
    calls = break_kernel(monkeypatch, kernel_use.LEV_NATIVE_FORWARD)
    kernel_use.adopt(check_kernels(CPU, SHAPES, NATIVE))
    torch.manual_seed(0)
    t = torch.rand(9, 2, 10, requires_grad=True)
    S = (1 + 0.1 * torch.randn(2, 10, 5, 3)).requires_grad_()
    results = []
    for kernel in ("auto", "plain"):
        M = spline_product.spline_product(t, S, 1e-30, 1 << 20, kernel)
        results.append((M, *torch.autograd.grad(M.square().sum(), (t, S))))
    assert calls == [1]
    assert torch.equal(results[0][0], results[1][0])
    for got, want in zip(results[0][1:], results[1][1:], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_the_loss_takes_its_chunked_path_where_a_kernel_failed() -> None:
    """The forward kernel failed: no kernel at all (the backward needs its logsumexp); the
    backward one failed: the forward kernel where no gradient is wanted (evaluation)."""
    gpu = torch.device("cuda")
    assert loss.uses_fused_kernels(gpu) and loss._takes_kernels(gpu, grads=True)
    _off(kernel_use.LOSS_TRITON_BACKWARD)
    assert loss._takes_kernels(gpu, grads=False) and not loss._takes_kernels(gpu, grads=True)
    _off(kernel_use.LOSS_TRITON_FORWARD)
    assert not loss.uses_fused_kernels(gpu) and not loss._takes_kernels(gpu, grads=False)


@pytest.mark.skipif(not lev_triton.available(), reason="Triton is not importable here")
def test_a_gpu_run_checks_the_triton_kernels_its_model_launches() -> None:
    """Which kernels a run checks, for a device this machine need not have: on a GPU the
    Triton ones, LEV's only where the model has a LEV with the fixed knot spacing; on a CPU
    the native pair."""
    gpu = torch.device("cuda")
    leviathan = model_shapes(build_model(model_config("micro", "gpt2", "leviathan")), bf16=True)
    tied = model_shapes(build_model(model_config("micro", "gpt2", "tied")), bf16=True)
    assert leviathan.lev == model_config("micro", "gpt2", "leviathan").lev
    assert leviathan.head == (50257, 64) and leviathan.loss_dtype == torch.bfloat16
    assert run_kernels(leviathan, gpu) == list(TRITON)
    assert run_kernels(tied, gpu) == list(TRITON[2:])
    assert run_kernels(tied, CPU) == []
    assert run_kernels(leviathan, CPU) == (list(NATIVE) if lev_native.available() else [])


@native
def test_self_check_warns_records_or_stops(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """warn: a WARNING naming the kernel and its error, the kernel off, the record in every
    provenance record of the process; error: one line naming them, nothing adopted."""
    model = build_model(model_config("micro", "gpt2", "leviathan"))
    break_kernel(monkeypatch, kernel_use.LEV_NATIVE_BACKWARD)
    with pytest.raises(KernelCheckFailed, match=r"the lev_native_backward kernel failed .*grad_"):
        self_check(model, CPU, bf16=True, mode="error")
    assert kernel_use.checked() is None and "kernel_check" not in environment("cpu")
    with caplog.at_level(logging.WARNING):
        record = self_check(model, CPU, bf16=True)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("the lev_native_backward kernel failed its self-check on cpu")
    assert "differs from the plain path" in warning and "plain torch path instead" in warning
    assert record["kernels"][kernel_use.LEV_NATIVE_FORWARD] == "ok"
    assert not kernel_use.usable(kernel_use.LEV_NATIVE_BACKWARD)
    assert environment("cpu")["kernel_check"] == record == kernel_use.checked()
    with pytest.raises(ValueError, match="kernel_check='sometimes': use warn or error"):
        self_check(model, CPU, bf16=False, mode="sometimes")


def test_runtime_kernel_check_is_warn_or_error_and_reaches_the_training_job() -> None:
    import shlex

    from leviathan.cells import Cell
    from leviathan.study.launch import train_command
    from leviathan.train.config import RuntimeConfig

    assert RuntimeConfig().kernel_check == "warn"
    assert RuntimeConfig.from_dict({"kernel_check": "error"}).kernel_check == "error"
    with pytest.raises(ValueError, match="kernel_check='fatal': use warn or error"):
        RuntimeConfig.from_dict({"kernel_check": "fatal"})
    cell = Cell("micro", "gpt2", "leviathan", 0, "embedded")
    args = shlex.split(train_command(cell, {"runtime": {"kernel_check": "error"}}, "t", "r"))
    assert "kernel_check=error" in args
