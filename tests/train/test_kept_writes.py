"""Kept checkpoints cut short: a full disk is one line (`DiskFull`) with nothing of the attempt
left, and the full-size temporary copy of a write killed by SIGKILL is removed by the next one.
The full disk is real (a tmpfs: `small_fs`, root only); the kill is a real SIGKILL of a process
writing one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from leviathan.checkpoint.files import kept_dir
from leviathan.checkpoint.kept import write_kept
from leviathan.io import DiskFull

WEIGHTS = {"w": torch.zeros(256 * 1024)}  # 1 MiB of fp32


def test_a_kept_checkpoint_on_a_full_disk_is_one_line(small_fs: Callable[[str], Path]) -> None:
    checkpoints = small_fs("512k") / "checkpoints"
    with pytest.raises(DiskFull) as caught:
        write_kept(checkpoints, 4, WEIGHTS, {"step": 4}, None)
    text = str(caught.value)
    final = kept_dir(checkpoints) / "step_00000004"
    assert "\n" not in text
    assert text.startswith(
        f"no space left on the filesystem of {final}: writing it needs about 1,048,576 bytes and "
    )
    assert text.endswith("it resumes from its newest checkpoint and writes this kept one again")
    assert list(kept_dir(checkpoints).iterdir()) == []  # nothing of the attempt


# The child writes a kept checkpoint and stops before it is renamed into place, where the parent
# kills it: what a SIGKILL in the middle of the write leaves.
CHILD = """
import sys, time, torch
import leviathan.checkpoint.kept as kept

kept.publish_dir = lambda tmp, final: time.sleep(3600)
kept.write_kept(__import__("pathlib").Path(sys.argv[1]), 2, {"w": torch.zeros(256 * 1024)}, {"step": 2}, None)
"""


def test_the_copy_a_killed_kept_write_left_is_removed_by_the_next(tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(checkpoints)])
    leftover = kept_dir(checkpoints) / f".step_00000002.{child.pid}.tmp"
    deadline = time.monotonic() + 120
    while not (leftover / "state.json").is_file() and time.monotonic() < deadline:
        assert child.poll() is None, "the writer ended before it could be killed"
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    assert (leftover / "model.safetensors").stat().st_size > 1 << 20  # a full-size copy
    write_kept(checkpoints, 4, WEIGHTS, {"step": 4}, None)
    assert sorted(p.name for p in kept_dir(checkpoints).iterdir()) == ["step_00000004"]
