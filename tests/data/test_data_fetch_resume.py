"""Resumable fetch: a fetch SIGKILLed mid-way and rerun yields the same files, byte for byte,
as one that was never interrupted, and the rerun continues after the last complete part."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from leviathan.data.corpus import Document, hash_split, limit, write_corpus
from leviathan.data.fetch import fetch_text
from leviathan.layout import corpus_file, fetch_state, partial_corpus_file
from leviathan.manifest import read_manifest

PART_BYTES = 16_000
VAL_FRACTION = 0.2

# The child fetches the same files with each document delayed, so that the parent can kill it
# between parts; everything else is the production code path.
CHILD = """
import sys, time
import leviathan.data.fetch as fetch

real = fetch.text_documents

def slow(paths, field="text", skip=0):
    for doc in real(paths, field, skip):
        time.sleep(0.004)
        yield doc

fetch.text_documents = slow
out, src, part, max_bytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
fetch.fetch_text(out, [src], val_fraction=0.2, limits=(None, max_bytes), part_bytes=part)
"""


def _source(tmp_path: Path) -> tuple[Path, list[Document], int]:
    """A JSONL file of 500 documents of random words (one with a byte U+FFFD replaces, one
    empty); its path, its documents and a byte limit that cuts it about 80% through."""
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "naïve", "日本語", "x" * 12, "the", "of"]
    texts = [" ".join(rng.choices(words, k=rng.randint(20, 400))) for _ in range(500)]
    texts[7], texts[11] = "  ", "bad \udcff byte"
    path = tmp_path / "src.jsonl"
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as fh:
        for t in texts:
            fh.write(json.dumps({"text": t}) + "\n")
    docs = [Document(f"{path.as_posix()}:{i + 1}", t) for i, t in enumerate(texts)]
    total = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
    return path, docs, int(total * 0.8)


def _files(out: Path) -> dict[str, bytes]:
    return {s: corpus_file(out, s).read_bytes() for s in ("train", "val")}


def _stats(out: Path) -> dict[str, dict[str, object]]:
    keep = ("documents", "text_bytes", "replaced_chars", "empty_skipped", "content_sha256")
    return {s: {k: read_manifest(corpus_file(out, s))[k] for k in keep} for s in ("train", "val")}


def test_sigkilled_fetch_resumes_to_the_same_bytes(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    corpus_documents: Callable[[Path], list[Document]],
) -> None:
    src, docs, max_bytes = _source(tmp_path)
    ref = tmp_path / "ref"
    fetch_text(ref, [str(src)], VAL_FRACTION, limits=(None, max_bytes), part_bytes=PART_BYTES)

    out = tmp_path / "killed"
    args = [str(out), str(src), str(PART_BYTES), str(max_bytes)]
    child = subprocess.Popen([sys.executable, "-c", CHILD, *args])
    state = fetch_state(out)
    deadline = time.monotonic() + 120
    consumed = 0
    while consumed < 100 and child.poll() is None and time.monotonic() < deadline:
        if state.is_file():
            splits = json.loads(state.read_text())["splits"]
            consumed = sum(s["consumed"] for s in splits.values())
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL, "the fetch finished before it could be killed"
    assert not corpus_file(out, "train").exists()
    assert partial_corpus_file(out, "train").is_file()
    done = json.loads(state.read_text())["splits"]
    assert 0 < sum(s["consumed"] for s in done.values()) < len(docs)

    with caplog.at_level(logging.INFO, logger="leviathan.data.corpus"):
        fetch_text(out, [str(src)], VAL_FRACTION, limits=(None, max_bytes), part_bytes=PART_BYTES)
    assert "resuming the fetch" in caplog.text
    assert _files(out) == _files(ref)
    assert _stats(out) == _stats(ref)
    assert not state.exists()
    assert not partial_corpus_file(out, "train").exists()

    # independent reference: the documents a plain limit + hash split of the source gives
    expected: dict[str, list[tuple[str, str]]] = {"train": [], "val": []}
    for split, doc in hash_split(limit(docs, max_bytes=max_bytes), VAL_FRACTION):
        if doc.text.strip():
            expected[split].append((doc.id, doc.text.replace("\udcff", "\ufffd")))
    for split in ("train", "val"):
        back = [(d.id, d.text) for d in corpus_documents(corpus_file(out, split))]
        assert back == expected[split]
    assert _stats(out)["train"]["replaced_chars"] + _stats(out)["val"]["replaced_chars"] == 1


def test_a_fetch_of_other_settings_does_not_resume(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A leftover state of a different fetch is discarded, not continued; one of the same
    settings resumes from a plain iterable too (re-reading the consumed documents)."""
    docs = [Document(f"d{i}", f"text {i} " * 50) for i in range(200)]

    def broken() -> object:
        for i, item in enumerate(hash_split(docs, 0.3)):
            if i == 150:
                raise KeyboardInterrupt
            yield item

    def write(out: Path, version: int, interrupted: bool = False) -> dict[str, dict[str, object]]:
        routed = broken() if interrupted else hash_split(docs, 0.3)
        source = {"v": version}
        return write_corpus(out, routed, splits=("train", "val"), source=source, part_bytes=2000)

    for out in (tmp_path / "other", tmp_path / "again"):
        with pytest.raises(KeyboardInterrupt):
            write(out, 1, interrupted=True)
        assert fetch_state(out).is_file()
    with caplog.at_level(logging.INFO, logger="leviathan.data.corpus"):
        write(tmp_path / "other", 2)  # the state of version 1 is dropped: a fresh fetch
        assert "resuming" not in caplog.text
        write(tmp_path / "again", 1)
        assert "resuming" in caplog.text
    write(tmp_path / "ref2", 2)
    write(tmp_path / "ref1", 1)
    assert _files(tmp_path / "other") == _files(tmp_path / "ref2")
    assert _stats(tmp_path / "other") == _stats(tmp_path / "ref2")
    assert _files(tmp_path / "again") == _files(tmp_path / "ref1")
    assert _stats(tmp_path / "again") == _stats(tmp_path / "ref1")
    assert sum(s["documents"] for s in _stats(tmp_path / "ref1").values()) == 200
