"""DDP + regional compile: each transformer block compiled in place, then DDP wraps the model
(the compiled regions inside DDP, whose gradient hooks all-reduce each bucket as backward
reaches it), checked on CPU with two gloo ranks: the compiled step's gradients are
all-reduced (equal on both ranks, the mean of the two ranks' own eager gradients)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from leviathan.model import LanguageModel, build_model, model_config
from leviathan.model.transformer import Block
from leviathan.train.distributed import DistInfo, wrap_model
from leviathan.train.regions import is_checkpointed


def _net() -> LanguageModel:
    torch.manual_seed(0)
    return build_model(model_config("micro", "gpt2", "leviathan"))


def _data(rank: int) -> torch.Tensor:
    return torch.randint(0, 50257, (2, 17), generator=torch.Generator().manual_seed(rank))


def _loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(ids[:, :-1], ids[:, 1:])


def _compiled_blocks(model: torch.nn.Module) -> list[bool]:
    return [m._compiled_call_impl is not None for m in model.modules() if isinstance(m, Block)]


def _rank(rank: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        model = _net()
        ddp, step_model = wrap_model(model, DistInfo(rank, 2, rank, torch.device("cpu")), True)
        assert isinstance(ddp, DistributedDataParallel)
        assert ddp.module is model
        assert step_model is ddp
        assert _compiled_blocks(model) == [True, True]  # the regions, inside DDP
        _loss(step_model, _data(rank)).backward()
        torch.save([p.grad for p in model.parameters()], f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_wrap_model_without_ddp_or_compile_is_the_model() -> None:
    model = _net()
    one = DistInfo(0, 1, 0, torch.device("cpu"))
    assert wrap_model(model, one, compile=False) == (None, model)
    assert wrap_model(model, one, True, stepping=False, checkpointing=True) == (None, model)
    blocks = [m for m in model.modules() if isinstance(m, Block)]
    assert _compiled_blocks(model) == [False, False]
    assert not any(is_checkpointed(b) for b in blocks)
    ddp, compiled = wrap_model(model, one, compile=True, checkpointing=True)
    assert ddp is None
    assert compiled is model  # its blocks compiled in place, checkpointed
    assert _compiled_blocks(model) == [True, True]
    assert all(is_checkpointed(b) for b in blocks)


@pytest.mark.slow
def test_ddp_around_compiled_blocks_all_reduces_the_compiled_steps_gradients(
    tmp_path: Path,
) -> None:
    mp.spawn(_rank, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    grads = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    own = []
    for r in (0, 1):
        model = _net()
        _loss(model, _data(r)).backward()
        own.append([p.grad for p in model.parameters()])
    for g0, g1, a, b in zip(*grads, *own, strict=True):
        assert torch.equal(g0, g1)
        torch.testing.assert_close(g0, (a + b) / 2, rtol=1e-4, atol=1e-6)
