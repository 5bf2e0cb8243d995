"""Word counts through bucket files: the same counts as a plain re-derivation with tiktoken's
own decoder, whatever the number of buckets, and memory bounded by a bucket."""

from __future__ import annotations

import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from leviathan.data.shards import open_shard
from leviathan.data.tokenizers import load_tokenizer
from leviathan.eval import words as words_mod
from leviathan.eval.words import EOT_WORD, count_val_words, word_key


def _reference_words(ids: np.ndarray) -> Counter[str]:
    """Words of a token sequence: each document decoded by tiktoken and split on ASCII
    whitespace (bytes.split), plus one EOT word per document end."""
    tok = load_tokenizer("gpt2")
    out: Counter[str] = Counter()
    ends = np.flatnonzero(ids == tok.spec.eot_id)
    start = 0
    for stop in [*ends.tolist(), None]:
        doc = ids[start:stop].tolist()
        out.update(word_key(w) for w in tok.encoding.decode_bytes(doc).split())
        if stop is None:
            break
        out[EOT_WORD] += 1
        start = stop + 1
    return out


@pytest.mark.parametrize(
    ("bucket_bytes", "read_bytes"),
    [(1 << 30, 4 << 20), (100_000, 4 << 20), (100_000, 1000)],  # one bucket; dozens; read in
)  # blocks that cut words
def test_val_word_counts_match_a_plain_count(
    gpt2_shards: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    bucket_bytes: int,
    read_bytes: int,
) -> None:
    monkeypatch.setattr(words_mod, "BUCKET_BYTES", bucket_bytes)
    monkeypatch.setattr(words_mod, "READ_BYTES", read_bytes)
    max_tokens = 300_001  # cuts a document: its words so far count
    wc = count_val_words(
        gpt2_shards / "train.bin",
        gpt2_shards / "val.bin",
        vocab="gpt2",
        max_tokens=max_tokens,
        chunk_tokens=50_000,
        tmp_dir=tmp_path,
    )
    train = _reference_words(np.asarray(open_shard(gpt2_shards / "train.bin").tokens[:max_tokens]))
    val = _reference_words(np.asarray(open_shard(gpt2_shards / "val.bin").tokens))
    assert wc.counts == {w: train.get(w, 0) for w in sorted(val)}
    assert list(wc.counts) == sorted(val)
    assert wc.train_words == sum(train.values())
    assert wc.val_words == sum(val.values())
    assert wc.train_tokens == max_tokens
    assert list(tmp_path.iterdir()) == []  # bucket files removed


def test_memory_does_not_grow_with_the_training_text(
    gpt2_shards: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Peak Python memory counting 4x the training text stays about the same, with dozens of
    buckets or one (bucket files grow in number or size, and are read back in blocks), while
    the same measurement sees a larger chunk of words held at once."""

    def peak(max_tokens: int, bucket_bytes: int, chunk_tokens: int = 20_000) -> int:
        monkeypatch.setattr(words_mod, "BUCKET_BYTES", bucket_bytes)
        monkeypatch.setattr(words_mod, "READ_BYTES", 64 << 10)
        tracemalloc.start()
        count_val_words(
            gpt2_shards / "train.bin",
            gpt2_shards / "val.bin",
            vocab="gpt2",
            max_tokens=max_tokens,
            chunk_tokens=chunk_tokens,
        )
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    n = len(open_shard(gpt2_shards / "train.bin"))
    assert n > 800_000
    assert peak(n, 50_000) < 1.25 * peak(n // 4, 50_000)
    assert peak(n, 1 << 30) < 1.25 * peak(n // 4, 1 << 30)
    assert peak(n, 50_000, chunk_tokens=200_000) > 1.5 * peak(n, 50_000)  # it can see growth
