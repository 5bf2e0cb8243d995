"""Per-id training-corpus counts for frequency-stratified evaluation.

`counts.npy` is an int64 array of length V (the vocabulary's n_vocab): how often each id
occurs in the train shard, EOT separators included. Its manifest (kind "counts") records
the shard it was counted from (path + sha256), the vocabulary and the totals.
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any

import numpy as np

from leviathan.data.shards import Shard, ShardError, open_shard
from leviathan.io import atomic_path
from leviathan.manifest import (
    display_path,
    invalidate_manifest,
    read_manifest,
    vocab_record,
    write_manifest,
)
from leviathan.provenance import utc_now
from leviathan.vocab import get_vocab

COUNT_CHUNK = 1 << 24  # tokens per bincount pass: bounded memory on any shard size


def count_shard(shard: Shard) -> np.ndarray[Any, np.dtype[np.int64]]:
    """int64[V] occurrences of each id in a shard, in bounded-memory chunks read from its file
    (not mapped: see Shard.streamed)."""
    n_vocab = get_vocab(shard.vocab).n_vocab
    counts = np.zeros(n_vocab, dtype=np.int64)
    tokens = shard.streamed()
    for start in range(0, len(shard), COUNT_CHUNK):
        chunk = tokens[start : start + COUNT_CHUNK]
        chunk_counts = np.bincount(chunk, minlength=n_vocab)
        if chunk_counts.size > n_vocab:
            raise ShardError(f"{shard.path}: holds ids >= n_vocab {n_vocab}; re-tokenize")
        counts += chunk_counts
    return counts


def write_counts(
    counts: np.ndarray[Any, np.dtype[np.int64]],
    shard: Shard,
    out: str | os.PathLike[str],
    *,
    started: _dt.datetime | None = None,
) -> dict[str, Any]:
    """Save `counts` as .npy (atomically) with its manifest; return the manifest.

    `started`: when counting began (default: now; the tokenize pass that counts as it
    encodes passes its own start).
    """
    started = started or utc_now()
    spec = get_vocab(shard.vocab)
    if counts.shape != (spec.n_vocab,) or counts.dtype != np.int64:
        raise ValueError(f"counts must be int64[{spec.n_vocab}], got {counts.dtype}{counts.shape}")
    with atomic_path(out) as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, counts, allow_pickle=False)
        invalidate_manifest(out)
    return write_manifest(
        out,
        artifact_type="counts",
        inputs=[shard.input_record()],
        vocab=vocab_record(spec),
        config={
            "step": "counts",
            "shard": display_path(shard.path),
            "vocab": spec.name,
            "includes_eot": True,
        },
        started=started,
        fields={
            "dtype": "int64",
            "length": int(counts.size),
            "total": int(counts.sum()),
            "nonzero_ids": int(np.count_nonzero(counts)),
            "split": shard.manifest.get("split"),
            "includes_eot": True,
        },
    )


def counts_from_shard(
    bin_path: str | os.PathLike[str], out: str | os.PathLike[str]
) -> dict[str, Any]:
    """Count ids of an existing `.bin` and write `out` (.npy) + manifest."""
    started = utc_now()
    shard = open_shard(bin_path)
    return write_counts(count_shard(shard), shard, out, started=started)


def load_counts(
    path: str | os.PathLike[str], vocab: str | None = None
) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Load counts, checking length/dtype against the manifest (and `vocab` if given)."""
    p = Path(path)
    manifest = read_manifest(p, artifact_type="counts")
    counts: np.ndarray[Any, np.dtype[np.int64]] = np.load(p, allow_pickle=False)
    spec = get_vocab(manifest["vocab"]["name"])
    if vocab is not None and get_vocab(vocab).name != spec.name:
        raise ValueError(f"{p}: counts are for {spec.name}, not {get_vocab(vocab).name}")
    if counts.dtype != np.int64 or counts.shape != (spec.n_vocab,):
        raise ValueError(
            f"{p}: {counts.dtype}{counts.shape}, expected int64[{spec.n_vocab}] for "
            f"{spec.name}; re-run `leviathan data counts`"
        )
    return counts
