"""`leviathan data tokenize`: a corpus directory -> token shards (+ train counts).

Output of one (corpus, vocabulary): `<out>/<split>.bin` with `<split>.bin.json` for each
split, and `<out>/counts.npy` with `counts.npy.json` counted from the train split in the
same pass (no second read).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from leviathan.data.corpus import CorpusError, corpus_splits
from leviathan.data.counts import write_counts
from leviathan.data.shards import DEFAULT_BATCH_BYTES, open_shard, tokenize_split
from leviathan.data.tokenizers import load_tokenizer
from leviathan.layout import COUNTS

TRAIN_SPLIT = "train"


def tokenize_corpus(
    corpus_dir: str | os.PathLike[str],
    vocab: str,
    out_dir: str | os.PathLike[str],
    *,
    splits: Sequence[str] | None = None,
    threads: int | None = None,
    processes: int | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    counts: bool = True,
    progress: bool = True,
    max_train_bytes: int | None = None,
) -> dict[str, Any]:
    """Tokenize every (or the given) split; write train counts. Returns a summary.

    `max_train_bytes`: tokenize only the train documents that start within that much text
    (what this vocabulary's largest token budget needs, `leviathan.study.corpus_size`); the
    other splits are tokenized whole.

    `threads` encoder threads run in each of `processes` processes (defaults: one worker
    process per usable CPU, at most 32; see `leviathan.data.encode.default_parallelism`).
    """
    tokenizer = load_tokenizer(vocab)  # unknown vocab / bad BPE file fail before any work
    available = corpus_splits(corpus_dir)
    wanted = list(splits) if splits else available
    missing = [s for s in wanted if s not in available]
    if not wanted or missing:
        raise CorpusError(
            f"{corpus_dir}: split(s) {missing or wanted} not found (found: {available or 'none'});"
            f" run `leviathan data fetch ... --out {corpus_dir}` first"
        )
    summary: dict[str, Any] = {"vocab": tokenizer.spec.name, "splits": {}}
    for split in wanted:
        want_counts = counts and split == TRAIN_SPLIT
        result = tokenize_split(
            corpus_dir,
            split,
            tokenizer,
            out_dir,
            threads=threads,
            processes=processes,
            batch_bytes=batch_bytes,
            with_counts=want_counts,
            progress=progress,
            max_text_bytes=max_train_bytes if split == TRAIN_SPLIT else None,
        )
        summary["splits"][split] = {
            "path": str(result.path),
            "tokens": result.tokens,
            "documents": result.documents,
            "mb_per_s": round(result.mb_per_s, 2),
            "truncated": result.truncated,
        }
        if want_counts and result.counts is not None:
            out = Path(out_dir) / COUNTS
            write_counts(result.counts, open_shard(result.path), out, started=result.started)
            summary["counts"] = str(out)
    return summary
