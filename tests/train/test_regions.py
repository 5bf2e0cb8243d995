"""Regional compile (`leviathan.train.regions`, through `wrap_model`): each transformer block
compiled in place, one compiled code for every layer, no graph break, the same losses as
eager; with activation checkpointing too, the checkpoint inside the compiled graph (fewer
bytes kept for backward, the same losses); and the device-memory query asked before, never
inside, traced code."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from leviathan import device as device_mod
from leviathan.device import chunk_elems, forced_policy
from leviathan.model import build_model, model_config
from leviathan.model.language_model import LanguageModel
from leviathan.model.transformer import Block
from leviathan.train.distributed import DistInfo, wrap_model
from leviathan.train.regions import is_checkpointed, prepare_blocks

ONE = DistInfo(0, 1, 0, torch.device("cpu"))
STEPS = 3
# nats, compiled vs eager after the same steps: inductor reorders fp32 sums in the blocks
# (the losses are ~10.8 nats; fp32 eps times a few thousand reassociated terms)
LOSS_ATOL = 1e-4


def _model(n_layers: int, variant: str = "leviathan") -> LanguageModel:
    torch.manual_seed(0)
    cfg = dataclasses.replace(model_config("micro", "gpt2", variant), n_layers=n_layers)
    return build_model(cfg)


def _losses(model: LanguageModel, step_model: torch.nn.Module, steps: int) -> list[float]:
    """Losses of `steps` AdamW steps of `step_model` (sharing `model`'s parameters), each on
    its own random batch (so LEV's distinct-id count changes from step to step)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    gen = torch.Generator().manual_seed(1)
    out = []
    for _ in range(steps):
        ids = torch.randint(0, model.cfg.vocab_size, (4, model.cfg.max_seq_len + 1), generator=gen)
        loss = step_model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.append(float(loss.detach()))
    return out


def _compiled_graphs(n_layers: int) -> tuple[int, int, list[float]]:
    """(graphs compiled, graph breaks, losses) of a regionally compiled micro model (Dynamo +
    AOTAutograd: the graphs, without inductor's codegen)."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = _model(n_layers)
    blocks = _compile(model)
    assert len(blocks) == n_layers
    losses = _losses(model, model, STEPS)
    counters = torch._dynamo.utils.counters
    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values()), losses


def _compile(model: LanguageModel) -> list[torch.nn.Module]:
    from leviathan.train.regions import compile_regions

    return compile_regions(model, backend="aot_eager")


def test_one_compiled_block_serves_every_layer_without_graph_breaks() -> None:
    graphs2, breaks2, compiled = _compiled_graphs(2)
    graphs4, breaks4, _ = _compiled_graphs(4)
    assert breaks2 == breaks4 == 0
    assert graphs2 == graphs4 == 1  # one block graph, whatever the depth
    ref_model = _model(2)
    ref = _losses(ref_model, ref_model, STEPS)
    assert compiled == pytest.approx(ref, abs=LOSS_ATOL)


def _saved_bytes(model: LanguageModel) -> int:
    """Bytes of the distinct storages one forward of `model`'s backbone keeps for backward."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    ids = torch.randint(0, model.cfg.vocab_size, (4, model.cfg.max_seq_len))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model.backbone(model.io.embed(ids).float())
    out.sum().backward()
    return sum(seen.values())


def _checkpointed_and_compiled(checkpointing: bool, steps: int) -> dict[str, object]:
    """A 4-layer micro model's blocks checkpointed and compiled (aot_eager) as the trainer
    prepares them: what Dynamo compiled (frames, graph breaks, each graph's ops), the losses
    of `steps` training steps and the bytes a forward keeps for backward."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graphs: list[list[str]] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[object]) -> object:
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)

    model = _model(4)
    prepare_blocks(model, compile=True, checkpointing=checkpointing, backend=backend)
    blocks = [m for m in model.modules() if isinstance(m, Block)]
    assert all(is_checkpointed(b) == checkpointing for b in blocks)
    losses = _losses(model, model, steps)
    counters = torch._dynamo.utils.counters
    return {
        "frames": counters["frames"]["ok"],
        "breaks": sum(counters["graph_break"].values()),
        "graphs": graphs,
        "losses": losses,
        "saved": _saved_bytes(model),
    }


def test_checkpointed_blocks_compile_with_the_checkpoint_inside() -> None:
    """runtime.activation_checkpointing with runtime.compile: frames compile (one graph for
    all 4 layers, no graph break), the checkpoint is an op of the block's graph (Dynamo's
    `tag_activation_checkpoint`, its body recomputed in backward), a forward keeps under
    half the bytes for backward that the compiled blocks keep unchecked, and the losses are
    eager's."""
    run = _checkpointed_and_compiled(True, STEPS)
    assert run["frames"] >= 1 and run["breaks"] == 0  # type: ignore[operator]
    assert len(run["graphs"]) == 1  # type: ignore[arg-type]
    assert "tag_activation_checkpoint" in run["graphs"][0]  # type: ignore[index]
    plain = _checkpointed_and_compiled(False, 0)
    assert "tag_activation_checkpoint" not in plain["graphs"][0]  # type: ignore[index]
    assert 2 * run["saved"] < plain["saved"]  # type: ignore[operator]
    ref_model = _model(4)
    assert run["losses"] == pytest.approx(_losses(ref_model, ref_model, STEPS), abs=LOSS_ATOL)


@pytest.mark.slow
def test_wrap_model_compiles_the_blocks_with_inductor_and_matches_eager() -> None:
    """The training path itself: wrap_model(compile=True) compiles each block in place
    (inductor, CPU), keeps the module and its state_dict keys, and trains as eager does."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = _model(2)
    keys = list(model.state_dict())
    ddp, step_model = wrap_model(model, ONE, compile=True)
    assert ddp is None
    assert step_model is model  # compiled in place, no wrapper
    assert list(model.state_dict()) == keys
    blocks = [m for m in model.modules() if isinstance(m, Block)]
    assert all(b._compiled_call_impl is not None for b in blocks)
    assert model.io._compiled_call_impl is None  # LEV stays eager (its custom op)
    compiled = _losses(model, step_model, STEPS)
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == 0
    ref_model = _model(2)
    assert compiled == pytest.approx(_losses(ref_model, ref_model, STEPS), abs=LOSS_ATOL)


def test_the_device_memory_is_asked_before_tracing_and_read_inside(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CUDA device's memory is asked of the driver once (here: before compiling); code traced
    by Dynamo afterwards reads the cached figure (no call, no graph break)."""
    cuda = torch.device("cuda:0")
    calls: list[torch.device] = []

    class Props:
        total_memory = 64 * 2**30

    def props(device: torch.device) -> Props:
        calls.append(device)
        return Props()

    monkeypatch.setattr(device_mod, "_memory", {})
    monkeypatch.setattr(torch.cuda, "get_device_properties", props)
    assert device_mod.device_memory(cuda) == Props.total_memory  # the one query
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()

    def budget(x: torch.Tensor) -> torch.Tensor:
        return x * chunk_elems(cuda, 1)

    with forced_policy("gpu"):
        out = torch.compile(budget, backend="eager", fullgraph=True)(torch.ones(1))
    assert float(out) == Props.total_memory // 64 // 4
    assert calls == [cuda]  # asked once, before tracing; traced code only read it
