"""A fetch or a tokenize killed (SIGKILL, or SIGTERM, which Python does not catch) leaves no
worker process behind: the workers of its pool die with it. Real processes, real signals: the
child runs the production pool and blocks in its consumer, so the workers are alive when it is
killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leviathan.layout import corpus_file

# `data fetch embedded --workers 2`, its writer blocked at the first document
FETCH = """
import sys, time
import leviathan.data.corpus as corpus
from leviathan.data.fetch import fetch_embedded

corpus._SplitWriter.add = lambda self, doc: time.sleep(3600)
fetch_embedded(sys.argv[1], workers=2)
"""

# `data tokenize --processes 2`, its sink blocked at the first batch
TOKENIZE = """
import sys, time
from pathlib import Path
from leviathan.data.encode import encode_file
from leviathan.data.tokenizers import load_tokenizer

encode_file(Path(sys.argv[1]), load_tokenizer("gpt2"), lambda batch: time.sleep(3600),
            processes=2, batch_bytes=1 << 16)
"""


def _children(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited while listed
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for a reaper)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="workers die with their parent on Linux")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
@pytest.mark.parametrize("step", ["fetch", "tokenize"])
def test_a_killed_step_leaves_no_worker_behind(
    tmp_path: Path, embedded_corpus: Path, step: str, sig: signal.Signals
) -> None:
    script, arg = (
        (FETCH, tmp_path / "out")
        if step == "fetch"
        else (TOKENIZE, corpus_file(embedded_corpus, "train"))
    )
    child = subprocess.Popen([sys.executable, "-c", script, str(arg)])
    deadline = time.monotonic() + 120
    while len(workers := _children(child.pid)) < 2 and time.monotonic() < deadline:
        assert child.poll() is None, f"the {step} ended before it could be killed"
        time.sleep(0.05)
    assert len(workers) == 2, workers
    os.kill(child.pid, sig)
    assert child.wait() == -sig
    deadline = time.monotonic() + 60
    while any(map(_alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in workers if _alive(pid)]
    for pid in left:  # not to leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"worker processes {left} outlived their {step}"
