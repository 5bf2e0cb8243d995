"""LEV's spline product as one custom op (`leviathan::spline_product`): torch.compile keeps it
one node with no graph break, and what the compiled forward saves for backward per id is t
and M only (the plain torch path, partitioned by inductor's min-cut, saves phi-sized
buffers); the op equals eager under inductor; the device's chunk budget is worked out once;
the roofline's LEV bytes against a dispatch-mode count of the op's inputs and outputs."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch
from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
from test_lev import random_inputs
from torch._dynamo.backends.common import aot_autograd
from torch._subclasses.fake_tensor import FakeTensorMode

from leviathan.cost import lev_kernels
from leviathan.cost.roofline import roofline
from leviathan.cost.traffic import TrafficCounter
from leviathan.device import forced_policy
from leviathan.model import model_config
from leviathan.model import spline_product as product_module
from leviathan.model.config import LEVConfig, ModelConfig, digit_base
from leviathan.model.lev import LEV
from leviathan.model.spline_product import spline_product

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


def _op_traffic(n_ids: int) -> tuple[int, dict[str, int]]:
    """Bytes the spline product's custom ops read and write in one LEV forward + backward of
    `n_ids` distinct ids at the 400m shape, counted by the dispatch mode on FakeTensors (GPU
    chunk rule): the op and its backward each one record."""
    cfg = model_config("400m", "o200k_base", "leviathan")
    with FakeTensorMode(), forced_policy("gpu"):
        model = LEV(cfg.vocab_size, cfg.d_model, cfg.lev_base, cfg.lev)
        ids = torch.arange(n_ids)
        with TrafficCounter() as counter:
            model.generate(ids).sum().backward()
    ops = {op: r.total for (_, op), r in counter.records.items() if op.startswith("leviathan.")}
    return sum(ops.values()), ops


def test_the_roofline_lev_bytes_are_the_counted_traffic_of_the_op(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Per distinct id and per step (the coefficient table, L2-resident: read by both ops,
    its gradient written), the kernel's cost model against the op's counted inputs and
    outputs at 8,192 and 4,096 ids; and the roofline's input part carries them."""
    big, ops = _op_traffic(8192)
    small, _ = _op_traffic(4096)
    assert set(ops) == {"leviathan.spline_product", "leviathan.spline_product_backward"}
    counted_per_id = (big - small) / 4096
    counted_table = big - 8192 * counted_per_id
    cfg = model_config("400m", "o200k_base", "leviathan")
    cost = lev_kernels.cost_per_id(cfg.lev)
    assert 1 / 1.5 <= cost.bytes_per_id / counted_per_id <= 1.5
    assert cost.bytes_per_id <= 20 * 1024
    assert 1 / 1.5 <= cost.table_bytes_per_step / counted_table <= 1.5
    # the roofline carries exactly the kernels' bytes: doubling them adds them once more
    before = _input_bytes(cfg)
    doubled = dataclasses.replace(
        cost,
        forward=dataclasses.replace(cost.forward, hbm_bytes=2 * cost.forward.hbm_bytes),
        backward=dataclasses.replace(cost.backward, hbm_bytes=2 * cost.backward.hbm_bytes),
        table_bytes_per_step=2 * cost.table_bytes_per_step,
    )
    monkeypatch.setattr(lev_kernels, "cost_per_id", lambda lev_cfg: doubled)
    added = _input_bytes(cfg) - before
    assert added == 8192 * cost.bytes_per_id + cost.table_bytes_per_step


def _input_bytes(cfg: ModelConfig) -> float:
    return {p.name: p for p in roofline(cfg, 16, 16).parts}["input"].bytes


def test_eager_code_skips_the_op_with_its_sums_and_no_dynamo_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Eager, plain tensors, no mode: the op's bodies run directly, giving the op's product
    and gradients bit for bit; a dispatch mode still sees the op; and a LEV training step in
    a fresh process never imports torch._dynamo (what the op's dispatch costs: ~2 s)."""
    torch.manual_seed(2)
    t, S = random_inputs(N=30, h=2, P=6, kappa=5, r=3, dtype=torch.float32)
    assert product_module._skips_the_op(t, S)

    def product_and_grads() -> tuple[torch.Tensor, ...]:
        M = spline_product(t, S, 1e-30, 1 << 20)
        return (M, *torch.autograd.grad((M * M).sum(), (t, S)))

    direct = product_and_grads()
    monkeypatch.setattr(product_module, "_skips_the_op", lambda *tensors: False)
    for a, b in zip(direct, product_and_grads(), strict=True):
        assert torch.equal(a, b)
    monkeypatch.undo()
    with TrafficCounter() as counter:
        spline_product(t, S, 1e-30, 1 << 20).sum().backward()
    assert any(op == "leviathan.spline_product" for _, op in counter.records)
    code = (
        "import sys, torch\n"
        "from leviathan.model import build_model, model_config\n"
        "m = build_model(model_config('micro', 'gpt2', 'leviathan'))\n"
        "ids = torch.randint(0, m.cfg.vocab_size, (2, 17))\n"
        "m(ids[:, :-1], ids[:, 1:]).backward()\n"
        "from leviathan.model.lev import LEV\n"
        "assert [x.kernel for x in m.modules() if isinstance(x, LEV)] == ['auto']\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
