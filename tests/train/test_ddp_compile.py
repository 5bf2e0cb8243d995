"""DDP + torch.compile in PyTorch's recommended order: DDP wraps the model, torch.compile
compiles the DDP-wrapped module (so all-reduce can overlap backward), checked on CPU with two
gloo ranks: the compiled step's gradients are all-reduced (equal on both ranks, the mean of
the two ranks' own gradients)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from leviathan.train.distributed import DistInfo, wrap_model


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))


def _data(rank: int) -> torch.Tensor:
    return torch.randn(5, 6, generator=torch.Generator().manual_seed(rank))


def _rank(rank: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        model = _net()
        ddp, step_model = wrap_model(model, DistInfo(rank, 2, rank, torch.device("cpu")), True)
        assert isinstance(ddp, DistributedDataParallel)
        assert ddp.module is model
        assert step_model._orig_mod is ddp  # compiled around DDP, not inside it
        step_model(_data(rank)).square().mean().backward()
        torch.save([p.grad for p in model.parameters()], f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_wrap_model_without_ddp_or_compile_is_the_model() -> None:
    model = _net()
    one = DistInfo(0, 1, 0, torch.device("cpu"))
    assert wrap_model(model, one, compile=False) == (None, model)
    ddp, compiled = wrap_model(model, one, compile=True)
    assert ddp is None
    assert compiled._orig_mod is model
    assert wrap_model(model, one, compile=True, stepping=False) == (None, model)


@pytest.mark.slow
def test_ddp_then_compile_all_reduces_the_compiled_steps_gradients(tmp_path: Path) -> None:
    mp.spawn(_rank, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    grads = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    own = []
    for r in (0, 1):
        model = _net()
        model(_data(r)).square().mean().backward()
        own.append([p.grad for p in model.parameters()])
    for g0, g1, a, b in zip(*grads, *own, strict=True):
        assert torch.equal(g0, g1)
        torch.testing.assert_close(g0, (a + b) / 2, rtol=1e-5, atol=1e-7)
