"""A vocabulary tokenizes only the train text its budget needs: the documents that start
within `max_train_bytes`, whatever the batching and the number of processes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from leviathan.data.corpus import Document
from leviathan.data.counts import load_counts
from leviathan.data.prepare import tokenize_corpus
from leviathan.data.shards import open_shard
from leviathan.data.tokenizers import load_tokenizer
from leviathan.io import sha256_file
from leviathan.manifest import read_manifest

BUDGET = 300_000  # bytes of train text: a small share of the embedded corpus


@pytest.mark.parametrize(("processes", "batch_bytes"), [(1, 50_000), (2, 30_000)])
def test_train_split_stops_at_its_budget(
    embedded_corpus: Path,
    tmp_path: Path,
    processes: int,
    batch_bytes: int,
    corpus_documents: Callable[[Path], list[Document]],
) -> None:
    tokenize_corpus(
        embedded_corpus,
        "gpt2",
        tmp_path,
        splits=["train"],
        threads=1,
        processes=processes,
        batch_bytes=batch_bytes,
        progress=False,
        max_train_bytes=BUDGET,
    )
    # reference: tiktoken on each document that starts before BUDGET bytes, EOT after each
    tok = load_tokenizer("gpt2")
    ids: list[int] = []
    seen = 0
    for doc in corpus_documents(embedded_corpus / "train.jsonl.zst"):
        if seen >= BUDGET:
            break
        ids += [*tok.encoding.encode_ordinary(doc.text), tok.spec.eot_id]
        seen += len(doc.text.encode("utf-8"))
    shard = open_shard(tmp_path / "train.bin", "gpt2")
    assert np.array_equal(np.asarray(shard.tokens), np.asarray(ids, dtype=np.uint16))
    manifest = read_manifest(tmp_path / "train.bin")
    assert manifest["truncated"] is True
    assert manifest["text_bytes"] == seen
    assert seen > BUDGET  # the last document kept starts within the budget and ends past it
    assert manifest["config"]["max_text_bytes"] == BUDGET
    counts = load_counts(tmp_path / "counts.npy", "gpt2")
    assert np.array_equal(counts, np.bincount(ids, minlength=tok.spec.n_vocab))
    assert sha256_file(tmp_path / "train.bin") == manifest["artifact"]["sha256"]


def test_a_budget_beyond_the_split_tokenizes_it_whole(
    embedded_corpus: Path, gpt2_shards: Path, tmp_path: Path
) -> None:
    tokenize_corpus(
        embedded_corpus, "gpt2", tmp_path, splits=["val"], progress=False, max_train_bytes=1
    )  # the budget applies to the train split only
    assert sha256_file(tmp_path / "val.bin") == sha256_file(gpt2_shards / "val.bin")
    assert read_manifest(tmp_path / "val.bin")["truncated"] is False
