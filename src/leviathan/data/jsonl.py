"""Reading JSONL files, plain or zstd-compressed: `jsonl_lines`, the one reader of them
(corpus splits, local sources, the tokenizer's input)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import zstandard

ZSTD_SUFFIXES = (".zst", ".zstd")


def _open_zstd(raw: IO[bytes]) -> IO[bytes]:
    """A decompressing reader of a zstd file, across all its frames (a fetch writes one
    frame per part)."""
    reader = zstandard.ZstdDecompressor().stream_reader(
        raw, read_size=1 << 20, read_across_frames=True
    )
    return reader  # type: ignore[no-any-return]


def jsonl_lines(path: Path, start: int = 0, digest: Any = None) -> Iterator[bytes]:
    """Every raw line of a JSONL file, decompressed when its name ends in `.zst`/`.zstd`.

    The one reader of JSONL files (corpus splits, local sources): blank lines are yielded
    too, so that callers number lines as an editor does. `start`: a byte offset to enter an
    uncompressed file at (a line's start); `digest` (a hashlib object) is fed every byte read
    from the file, compressed as stored, so a reader that reads a file whole gets its sha256
    without a second pass.
    """
    with open(path, "rb") as raw:
        if path.name.endswith(ZSTD_SUFFIXES):
            if start:
                raise ValueError(f"{path}: a zstd stream cannot be entered at byte {start}")
            source = _Hashing(raw, digest) if digest is not None else raw
            yield from io.BufferedReader(_open_zstd(source), buffer_size=1 << 20)  # type: ignore[type-var]
            return
        raw.seek(start)
        for line in raw:
            if digest is not None:
                digest.update(line)
            yield line


class _Hashing(io.RawIOBase):
    """A file read through, every byte also fed to a hash."""

    def __init__(self, raw: IO[bytes], digest: Any) -> None:
        self._raw, self._digest = raw, digest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer)  # type: ignore[attr-defined]
        self._digest.update(memoryview(buffer)[:n])
        return int(n)
