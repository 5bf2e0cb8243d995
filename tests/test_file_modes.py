"""Files the project writes get the mode a plain open() gives under the umask, weights
included (safetensors writes through a private 0600 temporary file): a group project
directory shares checkpoints and exports when the umask lets it, and not when it does not."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from leviathan.checkpoint.files import WEIGHTS
from leviathan.checkpoint.store import save_checkpoint
from leviathan.io import atomic_path, current_umask, publish_dir, write_json


@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _plain_mode(where: Path) -> int:
    """The mode a plain open() gives a new file here under the current umask (the reference)."""
    probe = where / "plain"
    with open(probe, "w"):
        pass
    mode = _mode(probe)
    probe.unlink()
    return mode


def test_the_umask_is_read_without_changing_it(umask: int) -> None:
    assert current_umask() == umask
    assert current_umask() == umask


def test_checkpoint_weights_and_files_follow_the_umask(tmp_path: Path, umask: int) -> None:
    state = {"step": 1}
    model = {"w": torch.ones(3)}
    path = save_checkpoint(
        tmp_path, "step_00000001", model_state=model, optim_state={}, state=state
    )
    expected = _plain_mode(tmp_path)
    assert expected == 0o666 & ~umask
    modes = {p.name: _mode(p) for p in path.iterdir()}
    assert WEIGHTS in modes
    assert modes == dict.fromkeys(modes, expected)


def test_published_directories_and_atomic_files_follow_the_umask(
    tmp_path: Path, umask: int
) -> None:
    tmp = tmp_path / ".out.tmp"
    tmp.mkdir()
    save_file({"w": torch.ones(2)}, tmp / WEIGHTS)  # 0600 whatever the umask
    publish_dir(tmp, tmp_path / "out")
    with atomic_path(tmp_path / "single.safetensors") as single:
        save_file({"w": torch.ones(2)}, single)
    write_json(tmp_path / "record.json", {"a": 1})
    expected = _plain_mode(tmp_path)
    assert _mode(tmp_path / "out" / WEIGHTS) == expected
    assert _mode(tmp_path / "single.safetensors") == expected
    assert _mode(tmp_path / "record.json") == expected
    assert _mode(tmp_path / "out") == 0o777 & ~umask
