"""`python -m leviathan.torchrun`: torchrun whose exit status is a preempted run's 128 + signal
(torchrun's own is 1), whether its workers answered a signal themselves or the launcher was
signalled; any other failure keeps torchrun's status. Real launchers, real workers, real
signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

WORKER = """
import os, pathlib, signal, sys, time
mode = sys.argv[1]
if mode == "answer":  # as leviathan train answers a preemption: its own exit status
    sys.exit(128 + signal.SIGTERM)
if mode == "fail":
    sys.exit(1)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(128 + signal.SIGTERM))
# one file per worker: the workers share one stdout, where two "ready" lines can interleave
pathlib.Path(sys.argv[2], "ready-" + os.environ["LOCAL_RANK"]).touch()
time.sleep(60)
"""


def launcher(tmp_path: Path, mode: str) -> list[str]:
    """torchrun with two workers of WORKER in `mode`; they mark themselves ready in tmp_path."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    # --standalone: a rendezvous on a port the system picks, free of other launches' ports
    torchrun = [sys.executable, "-m", "leviathan.torchrun", "--standalone", "--nproc-per-node", "2"]
    return [*torchrun, str(script), mode, str(tmp_path)]


@pytest.mark.parametrize(("mode", "status"), [("answer", 143), ("fail", 1)])
def test_the_workers_status_of_a_preemption_is_the_launchers(
    tmp_path: Path, mode: str, status: int
) -> None:
    done = subprocess.run(launcher(tmp_path, mode), capture_output=True, text=True, timeout=120)
    assert done.returncode == status, done.stderr


def test_a_signalled_launcher_exits_128_plus_the_signal(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        launcher(tmp_path, "wait"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120  # a bound on a hung launcher, not a timing assert
    while len(list(tmp_path.glob("ready-*"))) < 2:  # both workers handle SIGTERM
        assert proc.poll() is None and time.monotonic() < deadline, "the workers never got ready"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
