"""A full disk during a fetch or a tokenize: one line (`DiskFull`: the path, the bytes, the space
free, the fix), nothing half-written left, and what a fetch completed kept for the rerun. The
full disk is real: a tmpfs of a few hundred KB (`small_fs`; needs root, skipped elsewhere)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from leviathan.data.fetch import fetch_text
from leviathan.io import DiskFull
from leviathan.layout import corpus_file, fetch_state, partial_corpus_file

PART_BYTES = 16_000


def _source(path: Path) -> Path:
    """About 1.2 MB of hex words: text that compresses only about twofold."""
    rng = random.Random(0)
    with open(path, "w") as fh:
        for _ in range(600):
            words = [rng.randbytes(8).hex() for _ in range(60)]
            fh.write(json.dumps({"text": " ".join(words)}) + "\n")
    return path


def _grow(root: Path, size: str) -> None:
    """Free space: the tmpfs made larger in place."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(root)], check=True)


def test_a_fetch_on_a_full_disk_is_one_line_and_resumes_once_there_is_space(
    small_fs: Callable[[str], Path], tmp_path: Path
) -> None:
    root = small_fs("128k")
    src = _source(tmp_path / "src.jsonl")
    out = root / "corpus"
    with pytest.raises(DiskFull) as caught:
        fetch_text(out, [str(src)], 0.2, part_bytes=PART_BYTES)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(f"no space left on the filesystem of {out}: writing it needs more than ")
    assert "free space there, then rerun the fetch: it resumes after its last complete part" in text
    state = json.loads(fetch_state(out).read_text())
    for split in ("train", "val"):  # cut back to the last complete part: no torn tail
        assert partial_corpus_file(out, split).stat().st_size == state["splits"][split]["length"]
    _grow(root, "8m")
    fetch_text(out, [str(src)], 0.2, part_bytes=PART_BYTES)
    fetch_text(tmp_path / "ref", [str(src)], 0.2, part_bytes=PART_BYTES)
    for split in ("train", "val"):
        assert (
            corpus_file(out, split).read_bytes()
            == corpus_file(tmp_path / "ref", split).read_bytes()
        )
    assert not fetch_state(out).exists()


def _leviathan(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "leviathan.cli", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def test_leviathan_data_fetch_on_a_full_disk_says_so_in_one_line(
    small_fs: Callable[[str], Path], tmp_path: Path
) -> None:
    """No part completed (the default part is 64 MB of text): nothing is left at all."""
    root = small_fs("128k")
    src = _source(tmp_path / "src.jsonl")
    done = _leviathan("data", "fetch", "text", "--out", str(root / "c"), str(src))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"leviathan data: error: no space left on the filesystem of {root}")
    assert "it starts again" in lines[0]
    assert sorted(p.name for p in (root / "c").iterdir()) == []


def test_leviathan_data_tokenize_on_a_full_disk_says_so_in_one_line(
    small_fs: Callable[[str], Path], embedded_corpus: Path
) -> None:
    """The shard's temporary file is removed: the space it took is free again."""
    root = small_fs("256k")
    out = root / "tokens"
    done = _leviathan(
        "data", "tokenize", "--corpus", str(embedded_corpus), "--vocab", "gpt2", "--out", str(out)
    )
    assert done.returncode == 2, done.stderr
    lines = [ln for ln in done.stderr.strip().splitlines() if "tokenize" not in ln[:9]]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"leviathan data: error: no space left on the filesystem of {out}/")
    assert "writing it needs more than " in lines[0]
    assert list(out.iterdir()) == []
