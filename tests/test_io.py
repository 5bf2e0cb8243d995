"""Leftovers of writers killed mid-write: `remove_dead_temps(_in)` removes those of processes no
longer running (files and directories, being written or being replaced), never a live writer's
nor anything else."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from leviathan.io import remove_dead_temps, remove_dead_temps_in


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(done.stdout)


def _leftovers(root: Path, dead: int, live: int) -> dict[str, Path]:
    made = {
        "dead file": root / f".val.json.{dead}.tmp",
        "dead dir": root / f".step_00000004.{dead}.tmp",
        "dead old": root / f".step_00000002.{dead}.old",
        "live dir": root / f".step_00000008.{live}.tmp",
        "own dir": root / f".step_00000016.{os.getpid()}.tmp",
        "not a temp": root / ".step_00000004.notapid.tmp",
        "hidden file": root / ".gitignore",
    }
    for name, path in made.items():
        if "dir" in name or "old" in name:
            path.mkdir()
            (path / "model.safetensors").write_bytes(b"\0" * 1000)
        else:
            path.write_text("x")
    return made


def test_the_leftovers_of_dead_writers_are_removed_and_nothing_else(tmp_path: Path) -> None:
    live = os.getppid()  # this test's parent: running
    made = _leftovers(tmp_path, _dead_pid(), live)
    removed = remove_dead_temps_in(tmp_path)
    gone = {"dead file", "dead dir", "dead old"}
    assert sorted(removed) == sorted(made[n] for n in gone)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        made[n].name for n in made if n not in gone
    )


def test_the_leftovers_of_one_name_only(tmp_path: Path) -> None:
    dead = _dead_pid()
    made = _leftovers(tmp_path, dead, os.getppid())
    other = tmp_path / f".step_00000004.x.{dead}.tmp"  # a temp of another name, "step_00000004.x"
    other.write_text("x")
    assert remove_dead_temps(tmp_path / "step_00000004") == [made["dead dir"]]
    assert other.exists() and made["dead old"].exists() and made["dead file"].exists()
