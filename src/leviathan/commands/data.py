"""`leviathan data ...`: fetch corpora, resolve vocabularies, tokenize, count, inspect.

Examples:
    leviathan data fetch embedded --out data/raw/embedded
    leviathan data fetch text --out data/raw/mytext 'docs/**/*.txt'
    leviathan data fetch hf --out data/raw/wikitext103 --dataset Salesforce/wikitext \\
        --config wikitext-103-raw-v1 --split test=test
    leviathan data fetch pile --out data/raw/pile --max-bytes 2e9 --val-max-bytes 5e7
    leviathan data fetch pile --out data/raw/pile --local-dir /datasets/pile
    leviathan data vocab gpt2 cl100k_base o200k_base
    leviathan data tokenize --corpus data/raw/embedded --vocab o200k_base \\
        --out data/tokens/embedded/o200k_base
    leviathan data counts --bin data/tokens/embedded/o200k_base/train.bin \\
        --out data/tokens/embedded/o200k_base/counts.npy
    leviathan data inspect data/tokens/embedded/o200k_base --verify
    leviathan data batch --cell 200m/gpt2/leviathan/seed0 --step 1000 --decode
    leviathan data batch --train data/tokens/pile/gpt2/train.bin --context 1024 \\
        --global-batch 256 --seed 0 --step 1000 --rank 3 --world-size 8 --json
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from leviathan import layout
from leviathan.commands.config import configfile_arg, configured_cell
from leviathan.data.counts import counts_from_shard
from leviathan.data.encode import DEFAULT_BATCH_BYTES
from leviathan.data.fetch import DEFAULT_VAL_FRACTION
from leviathan.data.fetch_dispatch import fetch_corpus
from leviathan.data.inspect import inspect_path
from leviathan.data.prepare import tokenize_corpus
from leviathan.data.shards import open_shard
from leviathan.data.sources import (
    PILE_DATASET,
    PILE_LOCAL_TRAIN_GLOB,
    PILE_LOCAL_VAL_GLOB,
    PILE_TRAIN_SPLIT,
    PILE_VAL_SPLIT,
)
from leviathan.data.tokenizers import load_tokenizer
from leviathan.study.config import resolve
from leviathan.study.resolve import cell_train_config
from leviathan.values import split_assignment
from leviathan.vocab import VOCABS


def _log_warnings() -> None:
    """Show warnings (e.g. replaced undecodable characters) on stderr."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")


def _size(text: str) -> int:
    """Byte/document counts: plain ints or scientific notation (2e9)."""
    value = float(text)
    if value < 0 or value != int(value):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a non-negative whole number")
    return int(value)


def _add_limits(p: argparse.ArgumentParser, prefix: str = "", what: str = "") -> None:
    p.add_argument(
        f"--{prefix}max-docs",
        type=_size,
        default=None,
        help=f"stop after this many documents{what}",
    )
    p.add_argument(
        f"--{prefix}max-bytes",
        type=_size,
        default=None,
        help=f"stop once this many UTF-8 text bytes were read{what} (e.g. 2e9)",
    )


def _report_corpus(out: str, manifests: dict[str, dict[str, Any]]) -> int:
    for m in manifests.values():
        print(
            f"{out}/{m['artifact']['name']}: {m['documents']} documents, {m['text_bytes']} bytes"
            f", {m['replaced_chars']} undecodable characters replaced by U+FFFD"
            f", {m['empty_skipped']} empty documents skipped"
        )
    return 0


def _cmd_fetch(args: argparse.Namespace) -> int:
    """`leviathan data fetch SOURCE`: its arguments are the corpus settings the workflow's
    `corpus:` block gives (leviathan.data.fetch_dispatch), under the same names."""
    _log_warnings()
    corpus = {**vars(args), "kind": args.source}
    if args.source == "hf":
        corpus["splits"] = dict(args.split or [("train", "train")])
    return _report_corpus(args.out, fetch_corpus(corpus, args.out))


def _parse_split(text: str) -> tuple[str, str]:
    """`--split OUT=DATASET_SPLIT` as (OUT, DATASET_SPLIT); `--split SPLIT` as (SPLIT, SPLIT)."""
    if text and "=" not in text:
        return text, text
    try:
        return split_assignment(text, repr(text), "OUT=DATASET_SPLIT or SPLIT", need_value=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cmd_vocab(args: argparse.Namespace) -> int:
    for name in args.names or sorted(VOCABS):
        tok = load_tokenizer(name)
        print(
            f"{tok.spec.name}: {tok.bpe_path} (from {tok.bpe_source}, sha256 "
            f"{tok.spec.bpe_sha256}), n_vocab {tok.spec.n_vocab}, "
            f"'hello world' -> {tok.encode('hello world')}"
        )
    return 0


def _cmd_tokenize(args: argparse.Namespace) -> int:
    _log_warnings()
    summary = tokenize_corpus(
        args.corpus,
        args.vocab,
        args.out,
        splits=args.splits,
        threads=args.threads,
        processes=args.processes,
        batch_bytes=int(args.batch_mb * (1 << 20)),
        counts=not args.no_counts,
        progress=not args.no_progress,
    )
    print(json.dumps(summary, indent=2))
    return 0


def _cmd_counts(args: argparse.Namespace) -> int:
    m = counts_from_shard(args.bin, args.out)
    print(f"{args.out}: {m['length']} ids, {m['total']} tokens, {m['nonzero_ids']} seen")
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    print(inspect_path(args.path, verify=args.verify, decode=args.decode))
    return 0


def _add_fetch(sub: Any) -> None:
    fetch = sub.add_parser("fetch", help="write a corpus directory (<split>.jsonl.zst + manifests)")
    sources = fetch.add_subparsers(dest="source", required=True, metavar="SOURCE")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--out", required=True, help="corpus directory to write")

    emb = sources.add_parser("embedded", help="CPython stdlib docstrings/comments + pydoc topics")
    common(emb)
    emb.add_argument("--val-fraction", type=float, default=DEFAULT_VAL_FRACTION)
    emb.add_argument("--workers", type=int, default=None, help="parser processes (default 2)")
    emb.set_defaults(func=_cmd_fetch)

    txt = sources.add_parser("text", help="local files/globs (JSONL[.zst]: one document per line)")
    common(txt)
    txt.add_argument("paths", nargs="+", help="files, directories or globs ('**' recursive)")
    txt.add_argument("--val-fraction", type=float, default=DEFAULT_VAL_FRACTION)
    txt.add_argument("--text-field", default="text", help="JSONL field holding the text")
    _add_limits(txt)
    txt.set_defaults(func=_cmd_fetch)

    hf = sources.add_parser("hf", help="any text dataset through HF `datasets` streaming")
    common(hf)
    hf.add_argument("--dataset", required=True, help="hub id, or a builder (json, text, parquet)")
    hf.add_argument("--config", default=None, help="dataset config name")
    hf.add_argument("--revision", default=None, help="branch, tag or commit sha")
    hf.add_argument(
        "--split",
        type=_parse_split,
        action="append",
        help="OUT=DATASET_SPLIT (repeatable; default train=train)",
    )
    hf.add_argument("--data-files", nargs="+", default=None, help="local files for a builder")
    hf.add_argument("--text-field", default="text")
    hf.add_argument(
        "--val-fraction",
        type=float,
        default=None,
        help="hash-split the single --split into train/val",
    )
    _add_limits(hf, what=" (per split)")
    hf.set_defaults(func=_cmd_fetch)

    pile = sources.add_parser("pile", help="The Pile: a Hub mirror, or --local-dir of its files")
    common(pile)
    pile.add_argument("--dataset", default=PILE_DATASET)
    pile.add_argument("--config", default=None)
    pile.add_argument("--revision", default=None)
    pile.add_argument("--train-split", default=PILE_TRAIN_SPLIT)
    pile.add_argument("--val-split", default=PILE_VAL_SPLIT)
    pile.add_argument("--local-dir", default=None, help="folder with the Pile's *.jsonl.zst")
    pile.add_argument("--train-glob", default=PILE_LOCAL_TRAIN_GLOB)
    pile.add_argument("--val-glob", default=PILE_LOCAL_VAL_GLOB)
    _add_limits(pile, what=" (train)")
    _add_limits(pile, "val-", " (val)")
    pile.set_defaults(func=_cmd_fetch)


def _add_batch(sub: Any) -> None:
    """`leviathan data batch`: the exact batch of a training step (leviathan.data.batch_view)."""
    p = sub.add_parser(
        "batch",
        help="the windows, shard offsets (and text) of a training step's batch",
        description="The batch optimizer step N trained on (N counts from 1, as the metrics "
        "log's `step`): each row's window index, shard and token offset, the batch's "
        "fingerprint (the metrics log's batch_sha256) and, with --decode, the text.",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--cell", help="SCALE/VOCAB/VARIANT/seedK of the workflow config")
    where.add_argument("--train", nargs="+", type=Path, help="the training shards (.bin)")
    configfile_arg(p)
    p.add_argument("--context", type=int, help="with --train: tokens per window")
    p.add_argument("--global-batch", type=int, help="with --train: sequences per step")
    p.add_argument("--seed", type=int, default=0, help="with --train: the run's seed")
    p.add_argument("--step", type=int, required=True, help="optimizer step, from 1")
    p.add_argument("--rank", type=int, default=None, help="only this rank's rows")
    p.add_argument("--world-size", type=int, default=1, help="ranks the run trained on")
    p.add_argument("--decode", action="store_true", help="also each row's text")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=_cmd_batch)


def _source(args: argparse.Namespace) -> dict[str, Any]:
    """The shards and ordering of the step: given, or the cell's in the workflow config (a
    cell no configured study has, or a step past the cell's last, refused in one line)."""
    if args.train:
        if args.context is None or args.global_batch is None:
            raise ValueError("--train needs --context and --global-batch (the run's recipe)")
        return {
            "train_bins": args.train,
            "context": args.context,
            "global_batch": args.global_batch,
            "seed": args.seed,
        }
    config = resolve(args.configfile)
    cell = configured_cell(config, args.cell)
    tc = cell_train_config(config, cell)
    if args.step > tc.max_steps:
        raise ValueError(
            f"--step {args.step}: past the last step of {cell.key}, {tc.max_steps}; give a step "
            f"from 1 to {tc.max_steps}"
        )
    tokens = layout.tokens_dir(config["corpus"]["name"], cell.vocab)
    return {
        "train_bins": [layout.shards(tokens)["train"]],
        "context": tc.context,
        "global_batch": tc.global_batch,
        "seed": tc.seed,
        "vocab": cell.vocab,
    }


def _cmd_batch(args: argparse.Namespace) -> int:
    from leviathan.data.batch_view import step_rows  # here: its loader imports torch

    source = _source(args)
    batch = step_rows(**source, step=args.step)
    rank = args.rank
    rows = batch.rows if rank is None else batch.of_rank(rank, args.world_size)
    texts: list[str | None] = [None] * len(rows)
    if args.decode:
        vocab = open_shard(rows[0].shard).manifest["vocab"]["name"]
        tok = load_tokenizer(vocab)
        texts = [tok.decode(r.tokens[:-1].tolist()) for r in rows]
    out = {
        "step": batch.step,
        "context": batch.context,
        "global_batch": len(batch.rows),
        "batch_sha256": batch.batch_sha256,
        "rank": rank,
        "world_size": args.world_size,
        "rows": [r.record(t) for r, t in zip(rows, texts, strict=True)],
    }
    if args.json:
        print(json.dumps(out))
        return 0
    who = "all rows" if rank is None else f"rank {rank} of {args.world_size}"
    print(
        f"step {batch.step}: {len(batch.rows)} rows x {batch.context + 1} tokens ({who}), "
        f"batch_sha256 {batch.batch_sha256}"
    )
    for r, text in zip(rows, texts, strict=True):
        print(f"row {r.row:>6}  window {r.window:>10}  {r.shard}  offset {r.offset}")
        if text is not None:
            print("    " + json.dumps(text, ensure_ascii=False))
    return 0


def register(subparsers: Any) -> None:
    """Add `leviathan data ...` to the top-level command."""
    data = subparsers.add_parser("data", help="corpora, tokenizers, token shards, counts")
    sub = data.add_subparsers(dest="data_command", required=True, metavar="STEP")
    _add_fetch(sub)
    _add_batch(sub)

    voc = sub.add_parser("vocab", help="resolve + verify BPE files (fills the offline cache)")
    voc.add_argument("names", nargs="*", help=f"default: all of {', '.join(sorted(VOCABS))}")
    voc.set_defaults(func=_cmd_vocab)

    tok = sub.add_parser("tokenize", help="corpus -> <split>.bin shards + train counts")
    tok.add_argument("--corpus", required=True, help="corpus directory from `data fetch`")
    tok.add_argument("--vocab", required=True, help=f"one of {', '.join(sorted(VOCABS))}")
    tok.add_argument("--out", required=True, help="output directory")
    tok.add_argument("--splits", nargs="+", default=None, help="default: every split found")
    tok.add_argument(
        "--threads",
        type=int,
        default=None,
        help="encode threads per process (default: usable CPUs / processes)",
    )
    tok.add_argument(
        "--processes",
        type=int,
        default=None,
        help="encoder processes (default: one per usable CPU, at most 32; 1 = in-process)",
    )
    tok.add_argument(
        "--batch-mb",
        type=float,
        default=DEFAULT_BATCH_BYTES / (1 << 20),
        help="text per encode task (MiB)",
    )
    tok.add_argument("--no-counts", action="store_true", help="skip counts.npy")
    tok.add_argument("--no-progress", action="store_true")
    tok.set_defaults(func=_cmd_tokenize)

    cnt = sub.add_parser("counts", help="per-id counts of a .bin (int64[V] .npy + manifest)")
    cnt.add_argument("--bin", required=True)
    cnt.add_argument("--out", required=True)
    cnt.set_defaults(func=_cmd_counts)

    ins = sub.add_parser("inspect", help="summarise and check an artifact or directory")
    ins.add_argument("path", type=Path)
    ins.add_argument("--verify", action="store_true", help="recompute sha256 of artifacts")
    ins.add_argument("--decode", type=int, default=0, help="decode the first N tokens of a .bin")
    ins.set_defaults(func=_cmd_inspect)
