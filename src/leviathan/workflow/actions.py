"""What each workflow rule does, as plain functions of the validated config (unit-tested;
the rule scripts only unpack `snakemake` and call these): fetch the corpus, tokenize it, count
the validation text's words, group cells for sample efficiency. What a job asks of the cluster
is in leviathan.workflow.cluster, the training command in leviathan.workflow.launch, the
evaluation of a checkpoint in leviathan.eval.run."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from leviathan.workflow.grid import Cell


def corpus_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """config.corpus as the fetch applies it: `max_bytes: auto` replaced by the size the
    configured studies need (leviathan.workflow.plan), so a larger budget refetches."""
    from leviathan.workflow.plan import fetch_max_bytes

    return {**config["corpus"], "max_bytes": fetch_max_bytes(config)}


def fetch_corpus(corpus: Mapping[str, Any], out: str | Path) -> dict[str, Any]:
    """Write the configured corpus to `out` (<split>.jsonl.zst + manifests)."""
    from leviathan.data import fetch
    from leviathan.data.sources import HFSpec

    kind = corpus["kind"]
    limits = (corpus.get("max_docs"), corpus.get("max_bytes"))
    parts = {"part_bytes": corpus["part_bytes"]} if corpus.get("part_bytes") else {}
    if kind == "embedded":
        return fetch.fetch_embedded(out, val_fraction=corpus["val_fraction"], **parts)
    if kind == "text":
        if not corpus.get("paths"):
            raise ValueError("corpus.kind=text needs corpus.paths (files, directories or globs)")
        return fetch.fetch_text(
            out,
            corpus["paths"],
            val_fraction=corpus["val_fraction"],
            text_field=corpus["text_field"],
            limits=limits,
            **parts,
        )
    if kind == "hf":
        if not corpus.get("dataset"):
            raise ValueError("corpus.kind=hf needs corpus.dataset (a Hub id or json/text/parquet)")

        def spec(split: str) -> HFSpec:
            files = tuple(corpus["data_files"]) if corpus.get("data_files") else None
            return HFSpec(
                dataset=corpus["dataset"],
                split=split,
                config=corpus.get("config"),
                revision=corpus.get("revision"),
                data_files=files,
                text_field=corpus["text_field"],
            )

        train_split = corpus.get("train_split") or "train"
        if corpus.get("val_split"):
            specs = {"train": spec(train_split), "val": spec(corpus["val_split"])}
            return fetch.fetch_hf(out, specs, limits=limits, **parts)
        return fetch.fetch_hf(
            out,
            {"train": spec(train_split)},
            val_fraction=corpus["val_fraction"],
            limits=limits,
            **parts,
        )
    if kind == "pile":
        options = {
            k: corpus[k]
            for k in ("dataset", "config", "revision", "train_split", "val_split", "local_dir")
            if corpus.get(k)
        }
        return fetch.fetch_pile(out, train_limits=limits, val_limits=limits, **options, **parts)
    raise ValueError(f"corpus.kind={kind!r}: use embedded, text, hf or pile")


def tokenize_options(config: Mapping[str, Any], vocab: str) -> dict[str, Any]:
    """config.tokenize for one vocabulary, `max_bytes: auto` replaced by the training text its
    largest budget needs (budget x corpus.bytes_per_token x (1 + corpus.size_margin),
    leviathan.workflow.plan.corpus_bytes), so a larger budget retokenizes."""
    from leviathan.workflow.plan import corpus_bytes

    options = dict(config.get("tokenize") or {})
    if options.get("max_bytes") == "auto":
        options["max_bytes"] = corpus_bytes(config).get(vocab)
    return options


def tokenize(
    corpus_dir: str | Path, vocab: str, out: str | Path, options: Mapping[str, Any]
) -> dict[str, Any]:
    from leviathan.data.prepare import tokenize_corpus

    return tokenize_corpus(
        corpus_dir,
        vocab,
        out,
        threads=options.get("threads"),
        processes=options.get("processes"),
        progress=False,
        max_train_bytes=options.get("max_bytes"),
    )


def word_counts(
    train: str | Path, val: str | Path, out: str | Path, config: Mapping[str, Any]
) -> None:
    from leviathan.eval.results import write_result
    from leviathan.eval.run import eval_sections
    from leviathan.eval.val import build_word_counts

    options = eval_sections(config).get("word_counts") or {}
    write_result(
        out, build_word_counts(train, val, max_train_tokens=options.get("max_train_tokens"))
    )


def sample_efficiency_groups(cells: list[Cell]) -> dict[tuple[str, str, int], list[Cell]]:
    """(scale, vocab, seed) groups with a tied baseline and another variant; tied first."""
    groups: dict[tuple[str, str, int], list[Cell]] = {}
    for cell in cells:
        groups.setdefault((cell.scale, cell.vocab, cell.seed), []).append(cell)
    return {
        key: sorted(group, key=lambda c: c.variant != "tied")
        for key, group in groups.items()
        if any(c.variant == "tied" for c in group) and len(group) > 1
    }
