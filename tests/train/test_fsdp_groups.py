"""FSDP's groups and precision on two CPU gloo ranks, under the bf16 compute policy a GPU run
gets (forced here, with the CPU's bf16 autocast in place of the GPU's), with activation
checkpointing and regional compile both on, as `shard_model` builds them for the trainer:

* LEV is a group of its own that gathers fp32 weights: in the step its parameters are fp32,
  its spline kernel receives the fp32 table (its inputs of the dtypes the unsharded model's
  receives), and its embeddings equal, bit for bit, those of the unsharded model under the
  same autocast (what DDP computes), while the compiled blocks and the root's head receive
  bf16 weights;
* the blocks compile (Dynamo: one graph for every block, no graph break) with the checkpoint
  inside the compiled graph (its `tag_activation_checkpoint` op), and backward runs through
  it: every parameter gets a finite gradient, LEV's in fp32."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils._python_dispatch import TorchDispatchMode

from leviathan.model import LanguageModel, build_model, model_config
from leviathan.train.distributed import DistInfo
from leviathan.train.fsdp import generated_input, local_value, shard_model

CPU = torch.device("cpu")


def _net() -> LanguageModel:
    torch.manual_seed(0)
    return build_model(model_config("micro", "gpt2", "leviathan"))


def _data(rank: int) -> torch.Tensor:
    return torch.randint(0, 50257, (2, 17), generator=torch.Generator().manual_seed(rank))


def _autocast() -> Any:
    return torch.autocast("cpu", dtype=torch.bfloat16)


class KernelInputs(TorchDispatchMode):
    """The dtypes of the tensors each `leviathan::` op (LEV's spline product) receives."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, list[torch.dtype]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.namespace == "leviathan":
            self.seen.append((func.name(), [a.dtype for a in args if isinstance(a, torch.Tensor)]))
        return func(*args, **(kwargs or {}))


def _lev_embeddings(lev: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, list[Any]]:
    with KernelInputs() as mode, _autocast(), torch.no_grad():
        out = lev(ids)
    return out, mode.seen


def _recording(graphs: list[dict[str, Any]]) -> Any:
    """A Dynamo backend (aot_eager) that records each graph's ops and its parameters' dtypes."""

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        params = {n: t.dtype for n, t in zip(names, example_inputs, strict=True) if "param" in n}
        ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        graphs.append({"ops": ops, "params": params})
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)

    return backend


def _rank(rank: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        model, graphs, seen = _net(), [], {}  # type: ignore[var-annotated]
        info = DistInfo(rank, 2, rank, CPU)
        kw = {"compile": True, "activation_checkpointing": True, "backend": _recording(graphs)}
        shard_model(model, info, param_dtype=torch.bfloat16, **kw)
        lev = generated_input(model)
        assert lev is not None and lev is model.io.input

        def record(name: str, called: torch.nn.Module, owner: torch.nn.Module) -> None:
            """`owner`'s parameters' dtypes as `called`'s forward starts, gathered: the hook
            runs after FSDP's own (FSDP prepends it)."""

            def hook(m: torch.nn.Module, args: Any) -> None:
                seen[name] = {n: p.dtype for n, p in owner.named_parameters()}

            called.register_forward_pre_hook(hook)

        record("lev", lev, lev)
        record("head", model, model.io.head)  # the loss reads the head's weight in the root
        ids = _data(rank)
        with _autocast():
            loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        counters = torch._dynamo.utils.counters
        grads = {n: local_value(p.grad) for n, p in model.named_parameters()}
        embeddings, kernel = _lev_embeddings(lev, ids)
        ref = _net()
        ref_embeddings, ref_kernel = _lev_embeddings(ref.io.input, ids)
        torch.save(
            {
                "seen": seen,
                "graphs": graphs,
                "frames": dict(counters["frames"]),
                "breaks": sum(counters["graph_break"].values()),
                "grads": {n: (g.dtype, bool(g.isfinite().all())) for n, g in grads.items()},
                "kernel": kernel,
                "ref_kernel": ref_kernel,
                "equal": torch.equal(embeddings, ref_embeddings),
            },
            f"{out}/rank{rank}.pt",
        )
    finally:
        dist.destroy_process_group()


def test_fsdp_keeps_lev_fp32_and_compiles_checkpointed_blocks(tmp_path: Path) -> None:
    mp.spawn(_rank, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    names = [n for n, _ in _net().named_parameters()]
    for rank in (0, 1):
        r = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        # LEV: fp32 weights in the step, fp32 kernel inputs, DDP's embeddings exactly
        assert r["seen"]["lev"] and set(r["seen"]["lev"].values()) == {torch.float32}
        assert r["kernel"] and r["kernel"] == r["ref_kernel"]  # the unsharded model's inputs
        assert all(name == "leviathan::spline_product" for name, _ in r["kernel"])
        assert all(dtypes[1] == torch.float32 for _, dtypes in r["kernel"])  # the spline table
        assert r["equal"]
        # the rest: bf16 compute copies
        assert set(r["seen"]["head"].values()) == {torch.bfloat16}
        assert len(r["graphs"]) == 1  # one block graph serves both layers
        graph = r["graphs"][0]
        assert graph["params"] and set(graph["params"].values()) == {torch.bfloat16}
        # compiled, with the checkpoint inside the graph, and backward through it
        assert r["frames"].get("ok", 0) >= 1 and r["breaks"] == 0
        assert "tag_activation_checkpoint" in graph["ops"]
        assert list(r["grads"]) == names
        lev_grads = {n: g for n, g in r["grads"].items() if n.startswith("io.input.")}
        assert lev_grads and all(g == (torch.float32, True) for g in lev_grads.values())
        assert all(finite for _, finite in r["grads"].values())
