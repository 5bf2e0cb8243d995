"""One corpus fetch for every caller: a corpus's settings to the fetch of its kind.

The workflow passes its `corpus:` block (the schema's keys), `leviathan data fetch` its
arguments under the same names. Keys a caller leaves out (or sets to null) get the fetch's
own defaults (leviathan.data.fetch). Besides the config's keys, the command line may give:
`workers` (embedded), `splits` ({output split: dataset split}, hf; instead of train_split
and val_split), `train_glob` and `val_glob` (pile's local files), and `val_max_docs`,
`val_max_bytes` (pile's validation split; without them it takes the train split's limits).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from leviathan.data.fetch import Manifests, fetch_embedded, fetch_hf, fetch_pile, fetch_text
from leviathan.data.sources import HFSpec

KINDS = ("embedded", "text", "hf", "pile")
_PILE_OPTIONS = (
    "dataset",
    "config",
    "revision",
    "train_split",
    "val_split",
    "local_dir",
    "train_glob",
    "val_glob",
)


def fetch_corpus(corpus: Mapping[str, Any], out: str | os.PathLike[str]) -> Manifests:
    """Write the corpus `corpus` describes to `out` (<split>.jsonl.zst + manifests)."""
    kind = corpus.get("kind")
    limits = (corpus.get("max_docs"), corpus.get("max_bytes"))
    parts = _given(corpus, "part_bytes")
    if kind == "embedded":
        return fetch_embedded(out, **_given(corpus, "val_fraction", "workers"), **parts)
    if kind == "text":
        if not corpus.get("paths"):
            raise ValueError("corpus.kind=text needs corpus.paths (files, directories or globs)")
        options = _given(corpus, "val_fraction", "text_field")
        return fetch_text(out, corpus["paths"], **options, limits=limits, **parts)
    if kind == "hf":
        return _fetch_hf(corpus, out, limits, parts)
    if kind == "pile":
        val = ("val_max_docs", "val_max_bytes")
        val_limits = tuple(corpus.get(k) for k in val) if any(k in corpus for k in val) else limits
        options = {k: corpus[k] for k in _PILE_OPTIONS if corpus.get(k)}
        return fetch_pile(out, train_limits=limits, val_limits=val_limits, **options, **parts)
    raise ValueError(f"corpus.kind={kind!r}: use {', '.join(KINDS)}")


def _fetch_hf(
    corpus: Mapping[str, Any],
    out: str | os.PathLike[str],
    limits: tuple[Any, Any],
    parts: Mapping[str, Any],
) -> Manifests:
    """A dataset's splits: `splits` as given (hash-split by val_fraction where set), or the
    config's train_split and val_split (hash-split by val_fraction where no val_split)."""
    if not corpus.get("dataset"):
        raise ValueError("corpus.kind=hf needs corpus.dataset (a Hub id or json/text/parquet)")
    splits = corpus.get("splits")
    if splits is None:
        splits = {"train": corpus.get("train_split") or "train"}
        if corpus.get("val_split"):
            splits["val"] = corpus["val_split"]
    hash_split = "val" not in splits or corpus.get("splits") is not None
    files = tuple(corpus["data_files"]) if corpus.get("data_files") else None
    specs = {
        name: HFSpec(
            dataset=corpus["dataset"],
            split=split,
            config=corpus.get("config"),
            revision=corpus.get("revision"),
            data_files=files,
            **_given(corpus, "text_field"),
        )
        for name, split in splits.items()
    }
    options = _given(corpus, "val_fraction") if hash_split else {}
    return fetch_hf(out, specs, **options, limits=limits, **parts)


def _given(corpus: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    """The settings among `keys` that `corpus` gives (not null)."""
    return {k: corpus[k] for k in keys if corpus.get(k) is not None}
