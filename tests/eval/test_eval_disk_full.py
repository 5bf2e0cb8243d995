"""A full disk while an evaluation writes its output or its running sums: one line (`DiskFull`:
the path, the bytes, the space free, the fix), no temporary file left, and the sums saved before
still there to resume from. The full disk is real: a tmpfs of a few pages (`small_fs`; needs
root, skipped elsewhere)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from leviathan.data.shards import open_shard
from leviathan.eval.perplexity import _Partial
from leviathan.eval.results import write_result
from leviathan.eval.words import count_val_words
from leviathan.io import DiskFull


def test_an_evaluation_output_on_a_full_disk_is_one_line(small_fs: Callable[[str], Path]) -> None:
    root = small_fs("8k")  # two pages
    (root / "filler").write_bytes(b"\0" * 4096)  # one taken
    result = {"kind": "val", "loss": 7.19, "per_token": [0.5] * 1000}
    path = root / "val.json"
    with pytest.raises(DiskFull) as caught:
        write_result(path, result)
    size = len(json.dumps(result, indent=2, sort_keys=True)) + 1
    free = shutil.disk_usage(root).free
    assert str(caught.value) == (
        f"no space left on the filesystem of {path}: writing it needs about {size:,} bytes and "
        f"{free:,} are free; free space there, then rerun the evaluation"
    )
    assert sorted(p.name for p in root.iterdir()) == ["filler"]  # no temporary file left


def _sums(n: int, windows: int) -> _Partial:
    return _Partial(
        "key",
        windows,
        torch.full((n,), 0.5, dtype=torch.float64),
        torch.full((n,), 2, dtype=torch.int64),
        [],
        1.0,
    )


def test_running_sums_on_a_full_disk_are_one_line_and_keep_the_last_saved(
    small_fs: Callable[[str], Path],
) -> None:
    root = small_fs("64k")
    path = root / "val.partial.npz"
    _sums(1000, windows=3).save(path)  # 16 KB of sums
    before = path.read_bytes()
    with pytest.raises(DiskFull) as caught:
        _sums(5000, windows=9).save(path)  # 80 KB: more than the space left
    text = str(caught.value)
    assert "\n" not in text
    assert f"no space left on the filesystem of {path}: writing it needs about 80,000 bytes" in text
    assert text.endswith("then rerun the evaluation: it resumes from the sums saved last")
    assert sorted(p.name for p in root.iterdir()) == [path.name]
    assert path.read_bytes() == before
    saved = _Partial.load(path, "key", 1000)
    assert saved is not None and saved.windows_done == 3


def test_word_counts_on_a_full_disk_are_one_line_and_leave_no_bucket(
    small_fs: Callable[[str], Path], gpt2_shards: Path
) -> None:
    """The bucket files of the word counts (about 5 bytes per training token) on a disk of 64 KB."""
    root = small_fs("64k")
    train = gpt2_shards / "train.bin"
    with pytest.raises(DiskFull) as caught:
        count_val_words(train, gpt2_shards / "val.bin", vocab="gpt2", tmp_dir=root)
    n = len(open_shard(train).tokens)
    free = shutil.disk_usage(root).free
    assert str(caught.value) == (
        f"no space left on the filesystem of {root}: writing it needs about {5 * n:,} bytes and "
        f"{free:,} are free; free space there, or set TMPDIR to a filesystem with room, then "
        "rerun the evaluation"
    )
    assert list(root.iterdir()) == []
