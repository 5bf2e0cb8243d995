"""Resumable fetch: a fetch SIGKILLed mid-way and rerun yields the same files, byte for byte,
as one that was never interrupted, and the rerun continues after the last complete part."""

from __future__ import annotations

import builtins
import importlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard

from leviathan.data.corpus import Document, hash_split, limit, write_corpus
from leviathan.data.fetch import fetch_text
from leviathan.io import sha256_file
from leviathan.layout import corpus_file, fetch_state, partial_corpus_file
from leviathan.manifest import read_manifest

PART_BYTES = 16_000
VAL_FRACTION = 0.2

# The child fetches the same files, and holds before its next document once a saved part has
# consumed 100 documents, until the parent kills it there (however slow either process runs);
# everything else is the production code path.
CHILD = """
import json, sys, time
import leviathan.data.fetch as fetch
from leviathan.layout import fetch_state

real = fetch.LocalFiles._jsonl
out, src, part, max_bytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
state = fetch_state(out)

def held(self, *args):
    for doc in real(self, *args):
        if state.is_file():
            splits = json.loads(state.read_text())["splits"]
            if sum(s["consumed"] for s in splits.values()) >= 100:
                time.sleep(3600)
        yield doc

fetch.LocalFiles._jsonl = held
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
    deadline = time.monotonic() + 600  # a bound on a hung child, not a timing assert
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


class _Counted:
    """A file opened for reading, every byte handed out counted against its path."""

    def __init__(self, raw: Any, counts: dict[str, int], path: str) -> None:
        self._raw, self._counts, self._path = raw, counts, path

    def _count(self, n: int) -> None:
        self._counts[self._path] = self._counts.get(self._path, 0) + n

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self._count(len(data))
        return data

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer)
        self._count(n)
        return n

    def readline(self, size: int = -1) -> bytes:
        data = self._raw.readline(size)
        self._count(len(data))
        return data

    def __iter__(self) -> Iterator[bytes]:
        for line in self._raw:
            self._count(len(line))
            yield line

    def __enter__(self) -> _Counted:
        return self

    def __exit__(self, *exc: object) -> None:
        self._raw.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def _count_reads(monkeypatch: pytest.MonkeyPatch, modules: list[Any]) -> dict[str, int]:
    """Bytes read from each file through `open` in `modules` (and Path.read_bytes)."""
    counts: dict[str, int] = {}

    def counting_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        raw = builtins.open(file, mode, *args, **kwargs)
        return _Counted(raw, counts, str(file)) if "r" in mode and "+" not in mode else raw

    def read_bytes(self: Path) -> bytes:
        with counting_open(self, "rb") as fh:
            return fh.read()

    for module in modules:
        monkeypatch.setattr(module, "open", counting_open, raising=False)
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    return counts


def _local_sources(tmp_path: Path) -> list[Path]:
    """Six files of every kind a text fetch reads: plain JSONL, JSONL.zst, a text file."""
    rng = random.Random(1)
    words = ["alpha", "beta", "gamma", "naïve", "日本語", "the", "of"]
    paths = []
    for i, name in enumerate(["a.jsonl", "b.jsonl.zst", "c.txt", "d.jsonl", "e.jsonl", "f.jsonl"]):
        path = tmp_path / "src" / name
        path.parent.mkdir(exist_ok=True)
        lines = [
            json.dumps({"text": f"{i} " + " ".join(rng.choices(words, k=40))}) for _ in range(400)
        ]
        data = "\n".join(lines).encode() + b"\n"
        if name.endswith(".zst"):
            data = zstandard.ZstdCompressor().compress(data)
        path.write_bytes(data)
        paths.append(path)
    return paths


def _interrupt_in(
    monkeypatch: pytest.MonkeyPatch, cls: Any, name: str, where: str, after: int
) -> None:
    """Make `cls.name` (a document generator) raise KeyboardInterrupt, as a kill would end the
    fetch, after `after` documents of the file or split named `where`."""
    real = getattr(cls, name)

    def interrupted(self: Any, *args: Any) -> Iterator[Document]:
        seen = 0
        for doc in real(self, *args):
            seen += where in doc.id
            if seen > after:
                raise KeyboardInterrupt
            yield doc

    monkeypatch.setattr(cls, name, interrupted)


def test_a_resumed_local_fetch_reads_no_finished_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Killed in the fifth of six files, the rerun opens none of the four finished files (their
    sha256 came from the first read) and reads the fifth once: its bytes before the recorded
    offset hashed again (checked against what the fetch had read), the rest parsed; the corpus
    is the same, byte for byte, as an unbroken fetch's."""
    import leviathan.data.jsonl as jsonl
    import leviathan.data.sources as sources
    import leviathan.io
    from leviathan.data.sources import LocalFiles

    paths = _local_sources(tmp_path)
    pattern = [str(tmp_path / "src" / "*")]
    fetch_text(tmp_path / "ref", pattern, VAL_FRACTION, part_bytes=PART_BYTES)
    out = tmp_path / "out"
    with monkeypatch.context() as m:
        _interrupt_in(m, LocalFiles, "_jsonl", "e.jsonl", after=300)
        with pytest.raises(KeyboardInterrupt):
            fetch_text(out, pattern, VAL_FRACTION, part_bytes=PART_BYTES)
    position = json.loads(fetch_state(out).read_text())["position"]
    assert position["file"] == 4  # inside e.jsonl
    counts = _count_reads(monkeypatch, [jsonl, sources, leviathan.io])
    with caplog.at_level(logging.INFO):
        fetch_text(out, pattern, VAL_FRACTION, part_bytes=PART_BYTES)
    assert _files(out) == _files(tmp_path / "ref")
    assert _stats(out) == _stats(tmp_path / "ref")
    assert "4 finished file(s) skipped unread" in caplog.text
    read = {Path(p).name: n for p, n in counts.items() if Path(p).parent == tmp_path / "src"}
    assert set(read) == {"e.jsonl", "f.jsonl"}  # the finished files: never opened
    size = {p.name: p.stat().st_size for p in paths}
    assert read["f.jsonl"] == size["f.jsonl"]
    # e.jsonl: once, its head hashed (what the fetch had read) and its tail parsed; the sha256
    # of the two, with no third read
    assert read["e.jsonl"] == size["e.jsonl"]
    manifest = read_manifest(corpus_file(out, "train"))
    assert {i["path"].rsplit("/", 1)[-1]: i["sha256"] for i in manifest["inputs"]} == {
        p.name: sha256_file(p) for p in paths
    }


@pytest.mark.parametrize("name", ["d.jsonl", "b.jsonl.zst"])
def test_local_files_enter_a_file_at_its_position(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    """From a recorded position a plain JSONL file is entered at its byte offset (the bytes
    before it read once, to hash them, not parsed); a zstd one is decompressed again from its
    start (one frame), as the log says. Either way the documents are the rest of an unbroken
    read."""
    import leviathan.data.jsonl as jsonl
    import leviathan.data.sources as sources
    from leviathan.data.sources import LocalFiles

    path = next(p for p in _local_sources(tmp_path) if p.name == name)
    whole = LocalFiles([path])
    docs = whole.documents()
    head = [next(docs) for _ in range(123)]
    position = whole.position()
    assert position["line"] == 123
    assert head[-1].id.endswith(":123")
    rest = list(docs)
    counts = _count_reads(monkeypatch, [jsonl, sources])
    with caplog.at_level(logging.INFO):
        resumed = list(LocalFiles([path]).documents(0, position))
    assert resumed == rest
    read = counts[str(path)]
    if name.endswith(".zst"):
        assert read == path.stat().st_size
        assert "decompressing it again to line 123" in caplog.text
    else:
        assert read == path.stat().st_size  # the head hashed, the tail parsed: once each
        assert position["offset"] == sum(
            len(line) for line in path.read_bytes().splitlines(keepends=True)[:123]
        )


def test_a_resumed_hub_stream_reads_no_finished_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A `datasets` stream of six shard files (the Hub's streaming path, on local files),
    interrupted in the fifth: the rerun enters the stream at the state saved with the last
    part (`IterableDataset.load_state_dict`), so the shards finished before the one it was in
    are not read again (the first is read by `datasets` itself to infer the features, the
    fourth where the saved state points at its end); the corpus is the same, byte for byte."""
    from leviathan.data.fetch import fetch_hf
    from leviathan.data.sources import HFSpec, HubSplit

    rng = random.Random(2)
    shards = []
    for s in range(6):
        path = tmp_path / "hub" / f"shard-{s}.jsonl"
        path.parent.mkdir(exist_ok=True)
        rows = [
            {"text": f"{s} " + " ".join(rng.choices(["a", "bb", "ccc"], k=80))} for _ in range(300)
        ]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        shards.append(path)
    specs = {"train": HFSpec("json", "train", data_files=tuple(map(str, shards)))}
    fetch_hf(tmp_path / "ref", specs, VAL_FRACTION, part_bytes=PART_BYTES)
    out = tmp_path / "out"
    with monkeypatch.context() as m:
        _interrupt_in(m, HubSplit, "_rows", "train/", after=4 * 300 + 150)
        with pytest.raises(KeyboardInterrupt):
            fetch_hf(out, specs, VAL_FRACTION, part_bytes=PART_BYTES)
    assert json.loads(fetch_state(out).read_text())["position"] is not None

    # the json builder opens its files through the `open` datasets' streaming put in its module
    builder = importlib.import_module("datasets.packaged_modules.json.json")
    real = builder.open
    counts: dict[str, int] = {}

    def counting(file: Any, *args: Any, **kwargs: Any) -> Any:
        return _Counted(real(file, *args, **kwargs), counts, str(file))

    monkeypatch.setattr(builder, "open", counting)
    with caplog.at_level(logging.INFO):
        fetch_hf(out, specs, VAL_FRACTION, part_bytes=PART_BYTES)
    assert "entering the stream at its saved state" in caplog.text
    assert _files(out) == _files(tmp_path / "ref")
    assert _stats(out) == _stats(tmp_path / "ref")
    read = [counts.get(str(p), 0) for p in shards]
    assert read[1] == read[2] == 0, read  # finished shards: not read again
    assert read[4:] == [p.stat().st_size for p in shards[4:]], read  # the current one, the rest
    assert sum(read) < sum(p.stat().st_size for p in shards) - shards[1].stat().st_size
