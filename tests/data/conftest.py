"""Data-layer fixtures beyond the shared ones of tests/conftest.py (embedded corpus, gpt2
shards, make_shard): the o200k shards, and `corpus_documents`, a reader of corpus files
independent of the package's streaming one.

Tokenization uses the real BPE files, resolved through the project cache exactly as in
production (the gpt2 file comes from the openai-whisper sdist on PyPI the first time on a
fresh machine).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from leviathan.data.corpus import Document
from leviathan.data.prepare import tokenize_corpus


@pytest.fixture(scope="session")
def o200k_shards(embedded_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tok_o200k")
    tokenize_corpus(embedded_corpus, "o200k_base", out, threads=2, processes=1, progress=False)
    return out


def _decompress_frames(data: bytes) -> bytes:
    """Every zstd frame of `data` decompressed in one call each (a fetch writes one frame
    per part), not through the streaming reader the package uses."""
    out = []
    while data:
        frame = zstandard.ZstdDecompressor().decompressobj()
        out.append(frame.decompress(data))
        data = frame.unused_data
    return b"".join(out)


def _read_documents(path: Path) -> list[Document]:
    # bytes.splitlines splits at \n and \r only (str.splitlines would also cut at U+2028)
    lines = _decompress_frames(path.read_bytes()).splitlines()
    return [Document(obj["id"], obj["text"]) for obj in map(json.loads, lines)]


@pytest.fixture
def corpus_documents() -> Callable[[Path], list[Document]]:
    """The documents of a `<split>.jsonl.zst` corpus file, as a reference."""
    return _read_documents


@pytest.fixture
def resident_file_kb() -> Callable[[], int]:
    """A reader of this process's file-backed resident memory in KiB (Linux: RssFile in
    /proc/self/status); skips where there is none."""
    status = Path("/proc/self/status")
    if not status.is_file() or "RssFile:" not in status.read_text():
        pytest.skip("no RssFile in /proc/self/status (not Linux)")

    def read() -> int:
        line = next(x for x in status.read_text().splitlines() if x.startswith("RssFile:"))
        return int(line.split()[1])

    return read
