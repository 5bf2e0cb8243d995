"""An export cut short: a full disk is one line (`DiskFull`) with nothing of the attempt left,
and the full-size temporary copy an export killed by SIGKILL left is removed by the next export
to the same OUT. The full disk is real (a tmpfs: `small_fs`, root only); the kill is a real
SIGKILL of a process exporting."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from leviathan.checkpoint.files import WEIGHTS


def _export(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "leviathan.cli", "export", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def test_an_export_on_a_full_disk_is_one_line(
    small_fs: Callable[[str], Path], micro_run: Path
) -> None:
    root = small_fs("2m")  # the micro model's weights alone are more
    out = root / "hf"
    done = _export(str(micro_run), str(out))
    assert done.returncode == 2, done.stderr
    # beside transformers' own progress bar, one line
    lines = [ln for ln in done.stderr.strip().splitlines() if "Writing model shards" not in ln]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        f"leviathan export: error: no space left on the filesystem of {out}: writing it needs about "
    )
    assert lines[0].endswith("free space there (or export to another OUT), then rerun the export")
    assert list(root.iterdir()) == []  # neither OUT nor its temporary copy


# The child exports and stops before the copy is renamed into place, where the parent kills it:
# what a SIGKILL in the middle of an export leaves.
CHILD = """
import sys, time
import leviathan.export.write as write

write.publish_dir = lambda tmp, final: time.sleep(3600)
write.export_run(sys.argv[1], sys.argv[2])
"""


def test_the_copy_a_killed_export_left_is_removed_by_the_next(
    micro_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "hf"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(micro_run), str(out)])
    leftover = tmp_path / f".hf.{child.pid}.tmp"
    deadline = time.monotonic() + 300
    while not (leftover / f"{WEIGHTS}.json").is_file() and time.monotonic() < deadline:
        assert child.poll() is None, "the export ended before it could be killed"
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    assert (leftover / WEIGHTS).stat().st_size > 1 << 20  # a full-size copy
    done = _export(str(micro_run), str(out))
    assert done.returncode == 0, done.stderr
    assert f"{leftover}: removed the temporary copy a killed export left" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]
