"""The run-start shard check: size and a sampled fingerprint on every open (milliseconds),
the whole sha256 on request, before a training process joins its group; the group's
timeout set explicitly."""

from __future__ import annotations

import datetime
import hashlib
from pathlib import Path

import numpy as np
import pytest

from leviathan.data import shards as shards_mod
from leviathan.data.prepare import tokenize_corpus
from leviathan.data.shards import ShardError, open_shard, sampled_fingerprint, verify_shards


def test_fingerprint_hashes_the_size_and_evenly_spread_blocks(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    data = np.random.default_rng(0).integers(0, 256, 10 << 20, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    blocks, size = 8, 4096
    offsets = np.floor(np.linspace(0, len(data) - size, blocks)).astype(np.int64)
    ref = hashlib.sha256(str(len(data)).encode())
    for off in offsets.tolist():
        ref.update(data[off : off + size])
    got = sampled_fingerprint(path, blocks, size)
    assert got == {"sha256": ref.hexdigest(), "blocks": blocks, "block_bytes": size}
    small = tmp_path / "small.bin"
    small.write_bytes(data[:10_000])  # smaller than the sample: hashed whole
    expected = hashlib.sha256(b"10000" + data[:10_000]).hexdigest()
    assert sampled_fingerprint(small, blocks, size)["sha256"] == expected


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0xFF]))


@pytest.fixture
def sparse_shard(embedded_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The embedded val split in gpt2, its fingerprint two 4 KiB blocks (first and last)."""
    monkeypatch.setattr(shards_mod, "FINGERPRINT_BLOCKS", 2)
    monkeypatch.setattr(shards_mod, "FINGERPRINT_BLOCK_BYTES", 4096)
    tokenize_corpus(embedded_corpus, "gpt2", tmp_path, splits=["val"], progress=False)
    return tmp_path / "val.bin"


def test_sampled_check_catches_sampled_bytes_full_check_the_rest(sparse_shard: Path) -> None:
    size = sparse_shard.stat().st_size
    assert size > 3 * 4096
    open_shard(sparse_shard)
    _flip(sparse_shard, size // 2)  # between the two sampled blocks
    open_shard(sparse_shard)  # not sampled: only the full hash sees it
    with pytest.raises(ShardError, match="changed after tokenization"):
        verify_shards([sparse_shard])
    _flip(sparse_shard, size - 1)  # in the last block
    with pytest.raises(ShardError, match="sampled blocks differ"):
        open_shard(sparse_shard)


def test_full_check_runs_before_the_process_group_is_joined(
    sparse_shard: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from leviathan.train import trainer
    from leviathan.train.config import RuntimeConfig, train_config

    def joined(*args: object) -> None:
        raise AssertionError("joined the process group before the full shard check")

    monkeypatch.setattr(trainer, "init_distributed", joined)
    monkeypatch.delenv("RANK", raising=False)
    _flip(sparse_shard, sparse_shard.stat().st_size // 2)
    cfg = train_config("micro", "gpt2", "tied")
    runtime = RuntimeConfig(device="cpu", verify_shards="full", progress=False)
    with pytest.raises(ShardError, match="changed after tokenization"):
        trainer.train(
            cfg, train_bins=[sparse_shard], val_bin=None, run_dir=tmp_path / "run", runtime=runtime
        )


def test_process_group_timeout_is_explicit(monkeypatch: pytest.MonkeyPatch) -> None:
    from leviathan.train import distributed

    seen: dict[str, object] = {}
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda **kw: seen.update(kw))
    distributed.init_distributed("cpu", 77)
    assert seen == {"backend": "gloo", "timeout": datetime.timedelta(seconds=77)}
