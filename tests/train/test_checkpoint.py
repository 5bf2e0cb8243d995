"""CheckpointManager's saves: a background save writes the bytes an in-line save writes, from a
snapshot that later training does not reach; it returns before the write ends and the next save
waits for it; `drop_steps_at_final` leaves only `final`."""

from __future__ import annotations

import copy
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from leviathan.checkpoint import read, store
from leviathan.train import checkpoint as ckpt
from leviathan.train.config import CheckpointConfig, train_config
from leviathan.train.distributed import DistInfo
from leviathan.train.trainer import build_cell_model

CPU = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
FILES = ("model.safetensors", "optim.pt", "rng.pt", "state.json")


class Position:
    """The loader's side of the contract (`checkpoint.Stateful`): a step and nothing else."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = state["step"]


def manager(root: Path, **kw: Any) -> ckpt.CheckpointManager:
    cfg = train_config("micro", "gpt2", "leviathan", total_tokens=8 * 64 * 4)
    model = build_cell_model(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 1000, (2, 16))
    model(x, x).backward()
    optimizer.step()  # AdamW state exists
    return ckpt.CheckpointManager(
        root,
        model=model,
        optimizer=optimizer,
        loader=Position(),
        cfg=cfg,
        info=CPU,
        # in line and no interval unless a test says otherwise (runtime.checkpoint's keys)
        config=CheckpointConfig(**{"keep_last": 2, "every": 0, "background": False, **kw}),
    )


def perturb(m: ckpt.CheckpointManager) -> None:
    with torch.no_grad():
        for p in m.model.parameters():
            p.add_(1.0)
        for state in m.optimizer.state.values():
            state["exp_avg"].add_(1.0)


def test_background_save_writes_the_in_line_bytes_of_its_step(tmp_path: Path) -> None:
    m = manager(tmp_path / "bg", background=True)
    model_at_save = copy.deepcopy(m.model.state_dict())
    optim_at_save = copy.deepcopy(m.optimizer.state_dict())
    torch.manual_seed(3)
    m.save_step(1, 0.5)
    perturb(m)  # training goes on while the writer works
    m.close()
    m.model.load_state_dict(model_at_save)
    m.optimizer.load_state_dict(optim_at_save)
    m.root, m.config = tmp_path / "inline", replace(m.config, background=False)
    torch.manual_seed(3)  # the same RNG states recorded
    m.save_step(1, 0.5)
    a, b = tmp_path / "bg" / "step_00000001", tmp_path / "inline" / "step_00000001"
    for name in FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    loaded = read.load_checkpoint(a)
    for k, v in model_at_save.items():
        assert torch.equal(loaded["model"][k], v), k


def test_background_save_returns_before_the_write_and_the_next_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release, writing = threading.Event(), threading.Event()
    real = store.save_checkpoint

    def slow_save(*args: Any, **kw: Any) -> Path:
        writing.set()
        assert release.wait(30)
        return real(*args, **kw)

    monkeypatch.setattr(ckpt, "save_checkpoint", slow_save)
    m = manager(tmp_path, background=True)
    m.save_step(1, None)  # returns while the write is blocked
    assert writing.wait(30)
    assert not (tmp_path / "step_00000001").exists()
    assert m.last_good.endswith("step_00000001")
    second = threading.Thread(target=m.save_step, args=(2, None))
    second.start()
    second.join(0.5)
    assert second.is_alive()  # waits for the first write
    release.set()
    second.join(30)
    m.close()
    assert [r.step for r in store.list_checkpoints(tmp_path)] == [1, 2]


def test_a_failed_background_write_is_raised_by_the_next_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(*args: Any, **kw: Any) -> Path:
        raise OSError(28, "No space left on device")

    m = manager(tmp_path, background=True)
    monkeypatch.setattr(ckpt, "save_checkpoint", full_disk)
    m.save_step(1, None)
    with pytest.raises(OSError, match="No space left"):
        m.save_step(2, None)


@pytest.mark.parametrize("drop", [False, True])
def test_step_checkpoints_removed_at_final_when_asked(tmp_path: Path, drop: bool) -> None:
    m = manager(tmp_path, background=True, drop_steps_at_final=drop)
    for step in (1, 2, 3):
        m.save_step(step, None)
    m.save_final(4, None, None)
    m.close()
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == (["final"] if drop else ["final", "step_00000002", "step_00000003"])
    assert store.latest_checkpoint(tmp_path) == store.CheckpointRef(tmp_path / "final", 4)


def test_the_manager_saves_where_its_interval_falls(tmp_path: Path) -> None:
    m = manager(tmp_path, every=3)
    saved = {step: m.save_if_due(step, None) for step in range(1, 8)}
    m.close()
    assert [s for s, path in saved.items() if path is not None] == [3, 6]
    assert [r.step for r in store.list_checkpoints(tmp_path)] == [3, 6]


def test_a_manager_without_an_interval_saves_only_when_told(tmp_path: Path) -> None:
    m = manager(tmp_path)  # every=0
    assert [m.save_if_due(step, None) for step in range(1, 5)] == [None] * 4
    assert store.list_checkpoints(tmp_path) == []


def test_two_processes_building_a_cell_record_the_same_rng_state() -> None:
    """A cell's seed fixes every generator its checkpoints record (torch, NumPy, Python): two
    fresh interpreters (each starting NumPy and Python from OS entropy) save the same rng.pt
    state, so two runs of a cell give byte-identical checkpoints."""
    import subprocess
    import sys

    script = (
        "import hashlib, pickle\n"
        "from leviathan.checkpoint import rng\n"
        "from leviathan.train.config import train_config\n"
        "from leviathan.train.trainer import build_cell_model\n"
        "build_cell_model(train_config('micro', 'gpt2', 'tied', total_tokens=8 * 64 * 4))\n"
        "s = rng.rng_state()\n"
        "s['torch'] = s['torch'].tolist()\n"
        "print(hashlib.sha256(pickle.dumps(s)).hexdigest())\n"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    ]
    assert len(runs[0].strip()) == 64
    assert runs[0] == runs[1]
