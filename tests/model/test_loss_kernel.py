"""The GPU path's loss (Triton kernels, `leviathan.model.loss_kernel`) against the float64
cross-entropy, run in Triton's interpreter on CPU tensors; its bytes and graph on FakeTensors.

The interpreter must be switched on before triton is first imported (triton's own library
functions are jit functions), and in a pytest process torch's inductor may have imported it
already: the kernels run in one fresh interpreter (`TRITON_INTERPRET=1`) that loads the
inputs this test made and saves what the kernels computed; the comparison is made here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from leviathan.cost.loss_bytes import counted_loss_bytes, fused_loss_bytes
from leviathan.device import forced_policy
from leviathan.model.loss import (
    fused_linear_cross_entropy,
    linear_cross_entropy,
    uses_fused_kernels,
)
from leviathan.model.loss_head import HEAD_ROWS_MULTIPLE

pytest.importorskip("triton", reason="the GPU path's kernels are Triton's")

# Runs in the fresh interpreter: for each case, the fused loss and its gradients (the policy
# given: "gpu" pads the head 300 -> 384; "cpu" with a small chunk budget forms G in groups
# of rows), and the per-token losses from the forward kernel alone; then the first case
# compiled (Dynamo's graph and break counts, the compiled loss and gradients).
_CHILD = """
import sys, torch
from leviathan.device import forced_policy
from leviathan.model import loss
cases, out = torch.load(sys.argv[1]), []
for h, w, t, policy, chunk_elems in cases:
    loss.DEFAULT_CHUNK_ELEMS = chunk_elems
    h, w = h.requires_grad_(), w.requires_grad_()
    with forced_policy(policy):
        value = loss.fused_linear_cross_entropy(h, w, t)
        grads = torch.autograd.grad(value, (h, w))
        lse, picked = loss._fused_lse_and_pick(h.detach(), w.detach(), t)
    out.append((value.detach(), *grads, torch.where(t != -100, lse - picked, 0.0)))
if sys.argv[3] == "compile":  # the first case under Dynamo and AOTAutograd (no inductor)
    h, w, t, policy, _ = cases[0]
    with forced_policy(policy):
        explained = torch._dynamo.explain(loss.fused_linear_cross_entropy)(h, w, t)
        compiled = torch.compile(loss.fused_linear_cross_entropy, backend="aot_eager")(h, w, t)
        grads = torch.autograd.grad(compiled, (h, w))
    counts = torch.tensor([explained.graph_count, explained.graph_break_count])
    out = (out[0], (compiled.detach(), *grads), counts)
torch.save(out, sys.argv[2])
"""


def _interpreted(cases: list[tuple[Any, ...]], tmp_path: Path, mode: str = "eager") -> Any:
    torch.save(cases, tmp_path / "cases.pt")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(Path("src").resolve())}
    files = [str(tmp_path / "cases.pt"), str(tmp_path / "out.pt")]
    args = [sys.executable, "-c", _CHILD, *files, mode]
    subprocess.run(args, env=env, check=True, timeout=300)
    return torch.load(tmp_path / "out.pt")


def _case(n: int, v: int, d: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=gen, dtype=torch.float64)
    w = torch.randn(v, d, generator=gen, dtype=torch.float64) * 0.3
    t = torch.randint(0, v, (n,), generator=gen)
    t[::6] = -100
    return h.to(dtype), w.to(dtype), t


def test_kernels_match_float64_cross_entropy_in_the_interpreter(tmp_path: Path) -> None:
    """Loss, d hidden, d weight and per-token losses against F.cross_entropy in float64 on the
    same numbers (ignore_index=-100): fp32 with the head padded 300 -> 384 rows (rtol 1e-5),
    fp32 with G in groups of 7 rows (a chunk budget of 3,000 logits), and bf16 (G and the
    products rounded to bf16: atol 2e-3 of gradients ~0.04, 1e-2 of a loss of ~7). Three
    cases of 37-50 tokens, D 24: 8-10 s, 4-5 of them the fresh interpreter's imports."""
    cases = [
        (*_case(50, 300, 24, torch.float32, 0), "gpu", 1 << 25),
        (*_case(45, 300, 24, torch.float32, 1), "cpu", 3000),
        (*_case(37, 300, 24, torch.bfloat16, 2), "gpu", 1 << 25),
    ]
    tolerances = [(1e-5, 1e-6), (1e-5, 1e-6), (2e-2, 2e-3)]
    for (h, w, t, _, _), ours, (rtol, atol) in zip(
        cases, _interpreted(cases, tmp_path), tolerances, strict=True
    ):
        h64, w64 = h.double().requires_grad_(), w.double().requires_grad_()
        logits = h64 @ w64.t()
        ref = F.cross_entropy(logits, t, ignore_index=-100)
        refs = (ref, *torch.autograd.grad(ref, (h64, w64)))
        per_token = F.cross_entropy(logits.detach(), t, ignore_index=-100, reduction="none")
        for a, b in zip(ours, (*refs, per_token), strict=True):
            assert a.shape == b.shape
            torch.testing.assert_close(a.double(), b.detach(), rtol=rtol, atol=max(atol, 5 * rtol))


@pytest.mark.slow  # Dynamo and AOTAutograd in a fresh interpreter: ~15 s on a 2-core machine
def test_compiled_loss_is_one_graph_with_the_eager_numbers(tmp_path: Path) -> None:
    """torch.compile (Dynamo, AOTAutograd's traced backward; aot_eager, no inductor) of the
    GPU path: one graph, no break, the loss and gradients of the eager kernels."""
    eager, compiled, counts = _interpreted(
        [(*_case(50, 300, 24, torch.float32, 0), "gpu", 1 << 25)], tmp_path, "compile"
    )
    assert counts.tolist() == [1, 0]
    for a, b in zip(compiled, eager, strict=False):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_the_gpu_path_is_the_gpu_rule_on_cuda_only() -> None:
    with forced_policy("gpu"):
        assert uses_fused_kernels(torch.device("cuda", 0))
        assert not uses_fused_kernels(torch.device("cpu"))  # forced on a CPU: chunked loss
    with forced_policy("cpu"):
        assert not uses_fused_kernels(torch.device("cuda", 0))


def test_a_400m_micro_batch_moves_under_16_bytes_per_logit() -> None:
    """Counted on FakeTensors at the 400m micro-batch (32 x 512 tokens, o200k's 200,019 rows
    padded to 200,064, D 1,024; ~3 s): the GPU path within 5% of `fused_loss_bytes` and under
    16 bytes per logit, the chunked loss (today's CPU code under the GPU rule) over three times
    that (55 counted: the counter sees torch.logsumexp as one op, a GPU runs four kernels)."""
    n, vocab, d = 32 * 512, 200_019, 1024
    logits = n * (vocab + -vocab % HEAD_ROWS_MULTIPLE)
    fused = counted_loss_bytes(n, vocab, d)
    assert fused / logits < 16
    assert abs(fused / fused_loss_bytes(n, vocab, d) - 1) < 0.05
    assert counted_loss_bytes(n, vocab, d, linear_cross_entropy) / logits > 3 * 16


def _graph_ops(n: int) -> list[str]:
    """The ops of the loss's forward and backward traced by make_fx (what AOTAutograd sees)."""

    def step(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        value = fused_linear_cross_entropy(h, w, t)
        return (value, *torch.autograd.grad(value, (h, w)))

    with forced_policy("gpu"):
        h, w = torch.empty(n, 64, requires_grad=True), torch.empty(1000, 64, requires_grad=True)
        graph = make_fx(step, tracing_mode="fake")(h, w, torch.zeros(n, dtype=torch.long))
    return [str(node.target) for node in graph.graph.nodes if node.op == "call_function"]


def test_the_traced_loss_is_one_kernel_node_each_way_whatever_the_batch() -> None:
    """No chunk loop to unroll: the same graph for 64 and 65,536 tokens, with one forward and
    one softmax-gradient kernel (the device query never enters it)."""
    small, large = _graph_ops(64), _graph_ops(65_536)
    assert small == large
    assert small.count("leviathan.lse_and_pick.default") == 1
    assert small.count("leviathan.softmax_grad_logits.default") == 1
