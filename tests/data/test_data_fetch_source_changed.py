"""A resumed fetch is the fetch of one source: killed mid-way, its source file changed in place
(same length, with or without its modification time put back), the rerun either starts again
with a WARNING or resumes over bytes that are provably those it read; either way the corpus
and its manifest's input sha256 are those of one version of the file, as a fresh fetch of the
file as it now is gives them."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leviathan.data.fetch import fetch_hf, fetch_text
from leviathan.data.sources import HFSpec, HubSplit, LocalFiles
from leviathan.io import sha256_file
from leviathan.layout import corpus_file, fetch_state, partial_corpus_file
from leviathan.manifest import read_manifest

PART_BYTES = 16_000
VAL_FRACTION = 0.2

# The child fetches, and holds before its next document once a saved part has read a third of
# the file, until the parent kills it there (however slow either process runs); everything else
# is the production code path.
CHILD = """
import json, os, sys, time
import leviathan.data.fetch as fetch
from leviathan.layout import fetch_state

real = fetch.LocalFiles._jsonl
state = fetch_state(sys.argv[1])

def held(self, *args):
    for doc in real(self, *args):
        if state.is_file():
            read = json.loads(state.read_text())["position"]["offset"]
            if read >= os.path.getsize(sys.argv[2]) // 3:
                time.sleep(3600)
        yield doc

fetch.LocalFiles._jsonl = held
fetch.fetch_text(sys.argv[1], [sys.argv[2]], val_fraction=0.2, part_bytes=int(sys.argv[3]))
"""


def _source(path: Path, seed: int = 0, lines: int = 500) -> Path:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "naïve", "the", "of"]
    with open(path, "w", encoding="utf-8") as fh:
        for _ in range(lines):
            fh.write(json.dumps({"text": " ".join(rng.choices(words, k=60))}) + "\n")
    return path


def _edit_in_place(path: Path, at: int, keep_mtime: bool) -> None:
    """Change one letter of the first `alpha` at or after byte `at` to `b` (same length, still
    valid JSON); with `keep_mtime`, put the file's modification time back as it was."""
    before = path.stat()
    data = bytearray(path.read_bytes())
    i = data.index(b"alpha", at)
    data[i + 4 : i + 5] = b"b"
    with open(path, "r+b") as fh:  # in place: the same inode, the same length
        fh.write(data)
    assert path.stat().st_size == before.st_size
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _corpus(out: Path) -> dict[str, Any]:
    """The split files' bytes and what their manifests say of the content and the inputs."""
    keep = ("documents", "text_bytes", "content_sha256", "inputs")
    return {
        split: (
            corpus_file(out, split).read_bytes(),
            {k: read_manifest(corpus_file(out, split))[k] for k in keep},
        )
        for split in ("train", "val")
    }


def _kill_mid_way(out: Path, src: Path) -> int:
    """Run the fetch in a child and SIGKILL it once a part is saved; return the byte offset
    the saved state has read to in `src`."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(out), str(src), str(PART_BYTES)])
    state = fetch_state(out)
    deadline = time.monotonic() + 600  # a bound on a hung child, not a timing assert
    offset = 0
    while offset < src.stat().st_size // 3 and child.poll() is None and time.monotonic() < deadline:
        if state.is_file():
            offset = json.loads(state.read_text())["position"]["offset"]
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL, "the fetch finished before it could be killed"
    assert partial_corpus_file(out, "train").is_file()
    return int(json.loads(state.read_text())["position"]["offset"])


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["mtime-changed", "mtime-put-back"])
def test_a_fetch_killed_and_resumed_over_an_edited_head_starts_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, keep_mtime: bool
) -> None:
    """The letter changed lies in what the killed fetch had read: the rerun says so and starts
    again, and its corpus is a fresh fetch's of the edited file, input sha256 included."""
    src = _source(tmp_path / "src.jsonl")
    out = tmp_path / "out"
    offset = _kill_mid_way(out, src)
    _edit_in_place(src, 0, keep_mtime)  # the first line: read before the kill
    with caplog.at_level(logging.INFO, logger="leviathan.data.corpus"):
        fetch_text(out, [str(src)], VAL_FRACTION, part_bytes=PART_BYTES)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(src) in w and "starts again from the start" in w for w in warnings), warnings
    assert "resuming the fetch" not in caplog.text or keep_mtime  # the stat check: no resume
    fetch_text(tmp_path / "ref", [str(src)], VAL_FRACTION, part_bytes=PART_BYTES)
    assert _corpus(out) == _corpus(tmp_path / "ref")
    inputs = read_manifest(corpus_file(out, "train"))["inputs"]
    assert [i["sha256"] for i in inputs] == [sha256_file(src)]
    assert 0 < offset < src.stat().st_size
    assert not fetch_state(out).exists()


def test_an_edit_past_what_was_read_resumes_into_the_edited_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The letter changed lies after what the killed fetch had read, its modification time put
    back: the rerun resumes (what it had read is checked and unchanged), and the corpus is the
    edited file's whole text, under the edited file's sha256."""
    src = _source(tmp_path / "src.jsonl")
    out = tmp_path / "out"
    with pytest.MonkeyPatch.context() as m:
        _interrupt_after(m, 200)
        with pytest.raises(KeyboardInterrupt):
            fetch_text(out, [str(src)], VAL_FRACTION, part_bytes=PART_BYTES)
    offset = json.loads(fetch_state(out).read_text())["position"]["offset"]
    _edit_in_place(src, offset + 1000, keep_mtime=True)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="leviathan.data.corpus"):
        fetch_text(out, [str(src)], VAL_FRACTION, part_bytes=PART_BYTES)
    assert "resuming the fetch" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    fetch_text(tmp_path / "ref", [str(src)], VAL_FRACTION, part_bytes=PART_BYTES)
    assert _corpus(out) == _corpus(tmp_path / "ref")
    inputs = read_manifest(corpus_file(out, "train"))["inputs"]
    assert [i["sha256"] for i in inputs] == [sha256_file(src)]


def _interrupt_after(m: pytest.MonkeyPatch, after: int) -> None:
    """LocalFiles' documents end in a KeyboardInterrupt (as a kill ends a fetch) after `after`."""
    real = LocalFiles._jsonl

    def interrupted(self: LocalFiles, *args: Any) -> Iterator[Any]:
        for n, doc in enumerate(real(self, *args)):
            if n >= after:
                raise KeyboardInterrupt
            yield doc

    m.setattr(LocalFiles, "_jsonl", interrupted)


def test_a_file_edited_while_it_is_read_is_refused(tmp_path: Path) -> None:
    """No kill: the file changes under a running fetch. Nothing is published, nothing is left."""
    src = _source(tmp_path / "src.jsonl")
    out = tmp_path / "out"
    real = LocalFiles._jsonl

    def edited_mid_way(self: LocalFiles, *args: Any) -> Iterator[Any]:
        for n, doc in enumerate(real(self, *args)):
            if n == 100:
                _edit_in_place(src, src.stat().st_size // 2, keep_mtime=False)
            yield doc

    with pytest.MonkeyPatch.context() as m:
        m.setattr(LocalFiles, "_jsonl", edited_mid_way)
        with pytest.raises(ValueError, match=rf"{src} \(same size, modified since\) changed while"):
            fetch_text(out, [str(src)], VAL_FRACTION, part_bytes=PART_BYTES)
    assert sorted(p.name for p in out.iterdir()) == []


def test_a_resumed_builder_fetch_over_an_edited_data_file_starts_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`fetch hf --dataset json`: the data files are hashed before `datasets` reads them; an
    edit in place (same length, modification time put back) of a shard already read is seen
    by the rerun, which starts again, and its corpus is a fresh fetch's of the edited files."""
    shards = [_source(tmp_path / f"shard-{s}.jsonl", seed=s, lines=200) for s in range(3)]
    specs = {"train": HFSpec("json", "train", data_files=tuple(map(str, shards)))}
    out = tmp_path / "out"
    real = HubSplit._rows

    def interrupted(self: HubSplit, *args: Any) -> Iterator[Any]:
        for n, doc in enumerate(real(self, *args)):
            if n >= 350:  # inside the second shard
                raise KeyboardInterrupt
            yield doc

    with pytest.MonkeyPatch.context() as m:
        m.setattr(HubSplit, "_rows", interrupted)
        with pytest.raises(KeyboardInterrupt):
            fetch_hf(out, specs, VAL_FRACTION, part_bytes=PART_BYTES)
    assert fetch_state(out).is_file()
    _edit_in_place(shards[0], 0, keep_mtime=True)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="leviathan.data.corpus"):
        fetch_hf(out, specs, VAL_FRACTION, part_bytes=PART_BYTES)
    warning = next(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert f"{shards[0]} (sha256 " in warning
    assert "starts again from the start" in warning
    fetch_hf(tmp_path / "ref", specs, VAL_FRACTION, part_bytes=PART_BYTES)
    assert _corpus(out) == _corpus(tmp_path / "ref")
    inputs = read_manifest(corpus_file(out, "train"))["inputs"]
    assert [i["sha256"] for i in inputs] == [sha256_file(p) for p in shards]
