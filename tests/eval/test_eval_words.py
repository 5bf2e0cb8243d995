"""Tokenizer-independent words: segmentation, the fast path, training word counts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from leviathan.data.shards import open_shard
from leviathan.data.tokenizers import load_tokenizer
from leviathan.eval.token_bytes import token_bytes
from leviathan.eval.words import EOT_WORD, count_words, iter_words, segment, word_key

DOCS = [
    "Hello, world!  This is\n\n a test.\n",
    "It's   fine;(x) naïve café 日本語 end",
    "  leading whitespace\tand tabs \r\n",
]


@pytest.mark.parametrize("vocab", ["gpt2", "o200k_base"])
def test_words_are_the_same_for_every_vocabulary(vocab: str) -> None:
    tok = load_tokenizer(vocab)
    ids = []
    for d in DOCS:
        ids += tok.encode(d) + [tok.spec.eot_id]
    seg = segment(np.asarray(ids), token_bytes(vocab))
    expected = []
    for d in DOCS:
        expected += d.encode().split() + [EOT_WORD.encode()]
    assert seg.words == expected
    assert [
        w for chunk in iter_words(np.asarray(ids), vocab, chunk_tokens=3) for w in chunk
    ] == expected
    # every token's non-whitespace bytes lie inside the word it belongs to
    tb = token_bytes(vocab)
    for t, w in zip(ids, seg.word_of_token.tolist(), strict=True):
        piece = tb.pieces[t].strip()
        if piece:
            assert piece in seg.words[w]
        elif t == tok.spec.eot_id:
            assert seg.words[w] == EOT_WORD.encode()


def test_whitespace_tokens_belong_to_the_next_word() -> None:
    tok = load_tokenizer("gpt2")
    ids = tok.encode("one\n\ntwo") + [tok.spec.eot_id]
    seg = segment(np.asarray(ids), token_bytes("gpt2"))
    by_token = [
        (tok.decode([t]), seg.words[w])
        for t, w in zip(ids, seg.word_of_token.tolist(), strict=True)
    ]
    ws_tokens = [word for text, word in by_token if text.isspace()]
    assert ws_tokens
    assert set(ws_tokens) == {b"two"}


def test_fast_path_equals_segmentation_on_the_real_val_shard(small_val: Path) -> None:
    tokens = np.asarray(open_shard(small_val).tokens, dtype=np.int64)
    seg = segment(tokens, token_bytes("gpt2"))
    fast = [w for chunk in iter_words(tokens, "gpt2", chunk_tokens=700) for w in chunk]
    assert fast == seg.words


def test_count_words_on_a_known_corpus(tmp_path: Path, shard_writer) -> None:
    tok = load_tokenizer("gpt2")
    docs = ["a rose is a rose", "is it\na rose?", "rose"]
    ids = []
    for d in docs:
        ids += tok.encode(d) + [tok.spec.eot_id]
    train = shard_writer(tmp_path / "train.bin", ids, split="train")
    wanted = {"rose", "a", "rose?", "absent", EOT_WORD}
    wc = count_words(train, wanted, vocab="gpt2", chunk_tokens=4)
    truth = Counter(w for d in docs for w in d.split()) + Counter({EOT_WORD: len(docs)})
    assert wc.counts == {w: truth.get(w, 0) for w in wanted}
    assert wc.train_words == sum(truth.values())
    assert wc.train_tokens == len(ids)


def test_word_keys_round_trip_undecodable_bytes() -> None:
    raw = b"caf\xc3"  # a truncated UTF-8 sequence
    assert word_key(raw).encode("utf-8", "surrogateescape") == raw
