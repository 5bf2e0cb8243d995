"""An FSDP checkpoint's optimizer shards read whole by a run that does not shard (one process,
DDP), and the one refusal left: a whole optimizer state under FSDP, named as such."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

from leviathan.io import write_json
from leviathan.layout import STATE
from leviathan.train.checkpoint import SHARDED_FORMAT, is_sharded_checkpoint, refuse_other_format
from leviathan.train.dcp_checkpoint import OPTIM_DIR, load_whole_optimizer


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
    dcp.save({"optim": saved}, checkpoint_id=str(tmp_path / OPTIM_DIR), no_dist=True)
    fresh, other = _stepped(1)  # another state, to be replaced
    fresh.load_state_dict(model.state_dict())
    load_whole_optimizer(fresh, other, tmp_path)
    want, got = optimizer.state_dict(), other.state_dict()
    assert want["param_groups"] == got["param_groups"]
    assert want["state"].keys() == got["state"].keys()
    for key, state in want["state"].items():
        for name, value in state.items():
            torch.testing.assert_close(got["state"][key][name], value, rtol=0, atol=0)


def test_only_a_whole_optimizer_state_under_fsdp_is_refused_and_the_refusal_says_so(
    tmp_path: Path,
) -> None:
    whole, sharded = tmp_path / "whole", tmp_path / "sharded"
    write_json(whole / STATE, {"step": 3})
    write_json(sharded / STATE, {"step": 3, "optim_format": SHARDED_FORMAT})
    assert is_sharded_checkpoint(sharded) and not is_sharded_checkpoint(whole)
    refuse_other_format(sharded, sharded=True, world_size=4)
    refuse_other_format(sharded, sharded=False)  # read whole: no refusal
    refuse_other_format(whole, sharded=False)
    with pytest.raises(ValueError) as refused:
        refuse_other_format(whole, sharded=True, world_size=4)
    message = str(refused.value)
    assert "\n" not in message
    assert "whole optimizer state (optim.pt)" in message
    assert "shards it over 4 ranks (runtime.parallel=fsdp)" in message
    assert "this one is ddp" not in message
