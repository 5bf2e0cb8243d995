"""One process per folder: while a live process holds a run directory (or an evaluation output),
a second `leviathan train` (or `leviathan eval`) on it is refused in one line naming the holder;
a lock left by a process killed with SIGKILL is stale and taken over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_trainer import cli

from leviathan.layout import lock_file
from leviathan.lock import hold_lock

HOLD = (
    "import sys, time\n"
    "from leviathan.lock import hold_lock\n"
    "with hold_lock(sys.argv[1], 'test', folder=sys.argv[2] == 'dir'):\n"
    "    print('held', flush=True)\n"
    "    time.sleep(120)\n"
)


def holder(target: Path, folder: bool) -> subprocess.Popen[str]:
    """Another process holding the lock of `target` (once it has printed "held")."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(target), "dir" if folder else "file"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def held_run(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    run_dir = tmp_path / "run"
    proc = holder(run_dir, folder=True)
    yield run_dir, proc
    proc.kill()
    proc.wait()


def test_a_second_train_on_a_held_run_directory_is_refused(
    held_run: tuple[Path, subprocess.Popen[str]], random_shards: tuple[Path, Path]
) -> None:
    run_dir, proc = held_run
    shards = random_shards[0].parent
    done = subprocess.run(cli(shards, run_dir), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"{run_dir}: this run directory is in use by process {proc.pid} on" in lines[0]
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock"]  # nothing of it touched


def test_a_second_eval_on_a_held_output_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "word_counts.json"
    proc = holder(out, folder=False)
    try:
        argv = ["eval", "word-counts", "--train", "a.bin", "--val", "b.bin", "--out", str(out)]
        done = subprocess.run(
            [sys.executable, "-m", "leviathan.cli", *argv], capture_output=True, text=True
        )
    finally:
        proc.kill()
        proc.wait()
    assert done.returncode == 2
    assert f"this evaluation output is in use by process {proc.pid}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = holder(run_dir, folder=True)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert f"process {proc.pid}" in lock_file(run_dir, True).read_text()  # left behind
    with hold_lock(run_dir, "run directory", folder=True):
        assert f"process {os.getpid()}" in lock_file(run_dir, True).read_text()
        other = subprocess.run(
            [sys.executable, "-c", HOLD, str(run_dir), "dir"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert other.returncode != 0
        assert f"FolderBusy: {run_dir}: this test is in use by process {os.getpid()}" in (
            other.stderr
        )
    assert not lock_file(run_dir, True).exists()  # released and removed at the end


def test_the_lock_is_released_when_the_block_fails(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), hold_lock(tmp_path, "run directory", folder=True):
        raise RuntimeError("a failed run")
    with hold_lock(tmp_path, "run directory", folder=True):
        pass


def test_a_file_where_the_folder_goes_is_one_line(tmp_path: Path) -> None:
    in_the_way = tmp_path / "run"
    in_the_way.write_text("not a folder")
    for target in (in_the_way, in_the_way / "sub"):
        with pytest.raises(ValueError, match="is a file, where this run directory needs a folder"):
            with hold_lock(target, "run directory", folder=True):
                pass
    assert in_the_way.read_text() == "not a folder"  # left as it was
    with pytest.raises(ValueError, match=rf"^{in_the_way / 'out.json'}: {in_the_way} is a file"):
        with hold_lock(in_the_way / "out.json", "evaluation output", folder=False):
            pass


def test_a_directory_where_the_lock_file_goes_is_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    lock_file(run_dir, True).mkdir(parents=True)
    with pytest.raises(ValueError, match=r"\.lock: is a directory where this run directory's"):
        with hold_lock(run_dir, "run directory", folder=True):
            pass
    out = tmp_path / "val.json"
    lock_file(out, False).mkdir()
    with pytest.raises(ValueError, match=r"is a directory where this evaluation output's lock"):
        with hold_lock(out, "evaluation output", folder=False):
            pass


@pytest.mark.parametrize("table", ["kernel", "none"])
def test_a_probe_tells_a_held_lock_from_a_dead_holders_file_without_taking_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str
) -> None:
    """From this host's lock table (Linux), or without one (macOS) from whether the named
    process lives; the probe leaves the holder's lock and file as they are."""
    from leviathan import lock_probe

    if table == "none":
        monkeypatch.setattr(lock_probe, "KERNEL_LOCKS", tmp_path / "no-such-table")
    run_dir = tmp_path / "run"
    assert lock_probe.probe_lock(run_dir, folder=True).state == "free"  # no lock file
    proc = holder(run_dir, folder=True)
    try:
        probe = lock_probe.probe_lock(run_dir, folder=True)
        assert (probe.state, probe.pid) == ("held", proc.pid)
        with pytest.raises(ValueError, match=f"in use by process {proc.pid}"):
            with hold_lock(run_dir, "run directory", folder=True):  # still the holder's
                pass
    finally:
        proc.kill()
        proc.wait()
    probe = lock_probe.probe_lock(run_dir, folder=True)  # its file left behind, no lock
    assert (probe.state, probe.pid) == ("free", proc.pid)
