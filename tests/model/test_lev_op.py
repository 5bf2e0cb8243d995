"""LEV's spline product as one custom op (`leviathan::spline_product`): torch.compile keeps it
one node with no graph break, and what the compiled forward saves for backward per id is t
and M only (the plain torch path, partitioned by inductor's min-cut, saves phi-sized
buffers); the op equals eager under inductor; the device's chunk budget is worked out once."""

from __future__ import annotations

import pytest
import torch
from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
from test_lev import random_inputs
from torch._dynamo.backends.common import aot_autograd

from leviathan.model import lev
from leviathan.model.config import LEVConfig, digit_base
from leviathan.model.lev import LEV, spline_product

CFG = LEVConfig(d_seed=16, n_heads=2, n_knots=5, rank=8)


def _compiled_graphs(kernel: str, n_ids: int) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """The forward and backward graphs AOT autograd gives LEV.generate, partitioned as
    inductor partitions them (min-cut rematerialisation), fullgraph: no graph break."""
    graphs: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> object:
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    torch.manual_seed(0)
    model = LEV(200, 8, digit_base(200, CFG.n_digits), CFG)
    model.kernel = kernel
    backend = aot_autograd(
        fw_compiler=keep, bw_compiler=keep, partition_fn=min_cut_rematerialization_partition
    )
    torch._dynamo.reset()
    traced = torch.compile(model.generate, backend=backend, fullgraph=True, dynamic=False)
    traced(torch.randperm(200)[:n_ids]).sum().backward()
    forward, backward = graphs
    return forward, backward


def _saved_per_id(forward: torch.fx.GraphModule, n_ids: int) -> list[int]:
    """Elements per id of each per-id tensor the forward saves for backward."""
    (outputs,) = [node.args[0] for node in forward.graph.nodes if node.op == "output"]
    shapes = [node.meta["val"].shape for node in outputs[1:]]  # after the one real output
    return [s.numel() // n_ids for s in shapes if len(s) and s[0] == n_ids]


def _calls(graph: torch.fx.GraphModule, op: object) -> int:
    return sum(node.target is op for node in graph.graph.nodes)


def test_compiled_lev_keeps_the_product_one_node_saving_only_t_and_M() -> None:
    n_ids = 24
    forward, backward = _compiled_graphs("auto", n_ids)
    assert _calls(forward, torch.ops.leviathan.spline_product.default) == 1
    assert _calls(backward, torch.ops.leviathan.spline_product_backward.default) == 1
    t_elems, M_elems = CFG.n_heads * CFG.d_seed, CFG.n_heads * CFG.rank
    assert max(_saved_per_id(forward, n_ids)) <= t_elems  # step 3's activations, t, M
    phi_elems = CFG.n_heads * CFG.d_seed * CFG.rank
    plain, _ = _compiled_graphs("plain", n_ids)
    assert max(_saved_per_id(plain, n_ids)) >= phi_elems  # the fault the op removes
    assert M_elems in _saved_per_id(forward, n_ids)


@pytest.mark.slow  # ~10 s: inductor compiles the forward and backward
def test_the_op_under_inductor_equals_eager() -> None:
    torch.manual_seed(1)
    t, S = random_inputs(N=30, h=2, P=6, kappa=5, r=3, dtype=torch.float32)

    def fn(t: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
        return spline_product(t, S, 1e-30, 1 << 20)

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True)
    M = compiled(t, S)
    grads = torch.autograd.grad(M.sum(), (t, S))
    M_eager = fn(t, S)
    torch.testing.assert_close(M, M_eager)
    for a, b in zip(grads, torch.autograd.grad(M_eager.sum(), (t, S)), strict=True):
        torch.testing.assert_close(a, b)


def test_the_chunk_budget_is_worked_out_once_per_device(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[torch.device] = []

    def counted(device: torch.device, cpu_elems: int) -> int:
        calls.append(device)
        return cpu_elems

    monkeypatch.setattr(lev, "device_chunk_elems", counted)
    monkeypatch.setattr(lev, "_CHUNK_BUDGETS", {})
    t, S = random_inputs(N=5)
    for kernel in ("plain", "plain", "auto"):
        spline_product(t, S, 1e-30, 40, kernel).sum().backward()
    assert calls == [torch.device("cpu")]
