"""What only a CUDA GPU can check (`make gpu-test`; skipped elsewhere, saying why): the Triton
kernels compiled for the GPU against float64 references, deterministic mode bitwise on CUDA,
and the regionally compiled step (inductor, Triton) against eager. This module imports no
data layer: the GPU image has only torch, NumPy, safetensors, tiktoken, PyYAML, tqdm and
pytest (tests/test_gpu_env.py holds it to that)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from leviathan.device import set_deterministic
from leviathan.model import build_model, model_config
from leviathan.model.language_model import LanguageModel
from leviathan.model.loss import linear_cross_entropy, uses_fused_kernels
from leviathan.model.spline_product import reference_product, spline_product
from leviathan.train.regions import compile_regions

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


def _model(variant: str = "leviathan") -> LanguageModel:
    torch.manual_seed(0)
    return build_model(model_config("micro", "gpt2", variant), CUDA)


def _steps(model: LanguageModel, step_model: torch.nn.Module, n: int) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    gen = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        ids = torch.randint(0, model.cfg.vocab_size, (4, model.cfg.max_seq_len + 1), generator=gen)
        ids = ids.to(CUDA)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.append(float(loss.detach()))
    return out


def test_the_fused_loss_on_the_gpu_equals_float64_cross_entropy() -> None:
    """The Triton loss kernels, compiled for this GPU: loss and both gradients against the
    float64 cross-entropy (padded head, ignored targets)."""
    assert uses_fused_kernels(CUDA)
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(300, 64, generator=gen).to(CUDA).requires_grad_()
    w = (0.1 * torch.randn(1001, 64, generator=gen)).to(CUDA).requires_grad_()
    t = torch.randint(0, 1001, (300,), generator=gen).to(CUDA)
    t[::7] = -100
    loss = linear_cross_entropy(h, w, t)
    loss.backward()
    h64, w64 = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ref = F.cross_entropy(h64 @ w64.t(), t, ignore_index=-100)
    ref.backward()
    assert float(loss) == pytest.approx(float(ref), abs=1e-4)
    torch.testing.assert_close(h.grad.double(), h64.grad, rtol=1e-3, atol=1e-5)
    torch.testing.assert_close(w.grad.double(), w64.grad, rtol=1e-3, atol=1e-5)


def test_lev_triton_kernels_on_the_gpu_equal_the_float64_reference() -> None:
    lev = model_config("micro", "gpt2", "leviathan").lev
    gen = torch.Generator().manual_seed(0)
    t = torch.rand(257, lev.n_heads, lev.d_seed, generator=gen, dtype=torch.float64)
    S = 1 + lev.spline_init_std * torch.randn(
        lev.n_heads, lev.d_seed, lev.n_knots, lev.rank, generator=gen, dtype=torch.float64
    )
    tg, Sg = t.float().to(CUDA).requires_grad_(), S.float().to(CUDA).requires_grad_()
    M = spline_product(tg, Sg, lev.log_eps, lev.chunk_elems, "triton")
    t64, S64 = t.clone().requires_grad_(), S.clone().requires_grad_()
    ref = reference_product(t64, S64)
    grad = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    (M * grad.to(CUDA).float()).sum().backward()
    (ref * grad).sum().backward()
    torch.testing.assert_close(M.double().cpu(), ref, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(tg.grad.double().cpu(), t64.grad, rtol=1e-3, atol=1e-5)
    torch.testing.assert_close(Sg.grad.double().cpu(), S64.grad, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("variant", ["tied", "leviathan"])
def test_deterministic_mode_reruns_bitwise_on_cuda(variant: str) -> None:
    set_deterministic()
    try:
        runs = []
        for _ in range(2):
            model = _model(variant)
            _steps(model, model, 3)
            runs.append({k: v.clone() for k, v in model.state_dict().items()})
    finally:
        torch.use_deterministic_algorithms(False)
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])


def test_regionally_compiled_step_matches_eager_on_cuda() -> None:
    """Each block compiled by inductor (Triton on this GPU), LEV and the fused loss eager:
    bf16 losses within 2e-2 nats of eager over 3 steps (inductor's bf16 fusions round
    differently from eager's kernels), no graph break."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = _model()
    compile_regions(compiled)
    got = _steps(compiled, compiled, 3)
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == 0
    eager = _model()
    assert got == pytest.approx(_steps(eager, eager, 3), abs=2e-2)


@pytest.mark.parametrize("variant", ["leviathan", "tied"])
def test_the_kernel_self_check_passes_at_a_study_shape(variant: str) -> None:
    """The check a 400m run makes before its first step (o200k head, bf16 loss operands):
    every Triton kernel it launches ok against float64 on this GPU; its seconds printed
    (docs/gpu.md states them)."""
    from leviathan.model import kernel_use
    from leviathan.model.kernel_check import check_kernels, model_shapes

    model = build_model(model_config("400m", "o200k_base", variant), "meta")  # shapes only
    shapes = model_shapes(model, bf16=True)
    record = check_kernels(CUDA, shapes)
    print(f"kernel self-check, 400m {variant}: {record['seconds']} s")
    launched = ["loss_triton_forward", "loss_triton_backward"]
    launched += ["lev_triton_forward", "lev_triton_backward"] if variant == "leviathan" else []
    want = {k: "ok" if k in launched else "not used" for k in kernel_use.KERNELS}
    assert record["kernels"] == want, record
