"""An FSDP checkpoint's optimizer shards read whole by a run that does not shard (one process,
DDP), and a whole optimizer state keyed by parameter name for an FSDP run (the runs across
rank counts: tests/train/test_fsdp.py)."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)

from leviathan.checkpoint.files import SHARDED_FORMAT, STATE, shards_dir
from leviathan.checkpoint.sharded import KEY, by_name, load_whole_optimizer
from leviathan.checkpoint.store import OPTIM_FORMAT, is_sharded_checkpoint
from leviathan.io import write_json


def _stepped(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(2):
        model(torch.randn(3, 4)).sum().backward()
        optimizer.step()
    return model, optimizer


def test_a_dcp_optimizer_state_is_read_whole_into_a_plain_optimizer(tmp_path: Path) -> None:
    model, optimizer = _stepped(0)
    saved = get_optimizer_state_dict(model, optimizer)
    dcp.save({KEY: saved}, checkpoint_id=str(shards_dir(tmp_path)), no_dist=True)
    fresh, other = _stepped(1)  # another state, to be replaced
    fresh.load_state_dict(model.state_dict())
    load_whole_optimizer(fresh, other, tmp_path)
    want, got = optimizer.state_dict(), other.state_dict()
    assert want["param_groups"] == got["param_groups"]
    assert want["state"].keys() == got["state"].keys()
    for key, state in want["state"].items():
        for name, value in state.items():
            torch.testing.assert_close(got["state"][key][name], value, rtol=0, atol=0)


def test_a_whole_optimizer_state_is_keyed_by_parameter_name_for_fsdp() -> None:
    """`by_name`: optim.pt's positions become the names FSDP's loading keys the state by."""
    model, optimizer = _stepped(0)
    fresh, other = _stepped(1)
    named = by_name(optimizer.state_dict(), get_optimizer_state_dict(fresh, other))
    assert set(named["state"]) == {name for name, _ in model.named_parameters()}
    set_optimizer_state_dict(fresh, other, named)
    want, got = optimizer.state_dict(), other.state_dict()
    for key, state in want["state"].items():
        for name, value in state.items():
            torch.testing.assert_close(got["state"][key][name], value, rtol=0, atol=0)


def test_the_format_of_a_checkpoint_is_read_from_its_state(tmp_path: Path) -> None:
    whole, sharded = tmp_path / "whole", tmp_path / "sharded"
    write_json(whole / STATE, {"step": 3})
    write_json(sharded / STATE, {"step": 3, OPTIM_FORMAT: SHARDED_FORMAT})
    assert is_sharded_checkpoint(sharded) and not is_sharded_checkpoint(whole)
    assert not is_sharded_checkpoint(tmp_path / "missing")
