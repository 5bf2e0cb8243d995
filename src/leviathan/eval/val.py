"""The `val` evaluation: loss, perplexity and bits per byte over the whole validation split,
with token- and word-level frequency-stratified loss when the training counts are given.

One pass over the split (`perplexity.evaluate_shard`) feeds everything: the per-id sums
give the overall figures and the token buckets; the kept per-token losses give the words.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from leviathan.anchor import check_anchored
from leviathan.data.counts import load_counts
from leviathan.data.roles import check_counted_from, check_held_out
from leviathan.data.shards import Shard, open_shard
from leviathan.eval.checkpoint import Checkpoint, EvalModel
from leviathan.eval.config import ValConfig
from leviathan.eval.errors import EvalInputError
from leviathan.eval.frequency import stratify, token_frequency
from leviathan.eval.perplexity import LN2, TokenStats, check_finite_loss, evaluate_shard
from leviathan.eval.results import envelope, file_record, perplexity, read_result
from leviathan.eval.words import WordStats, count_val_words, word_losses
from leviathan.provenance import utc_now

PathLike = str | os.PathLike[str]


def open_val_shard(ckpt: Checkpoint, path: PathLike) -> Shard:
    """The validation shard, hash-verified, of the checkpoint's vocabulary."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: validation shard not found; run `leviathan data tokenize`")
    shard = open_shard(p, verify_sha256=True)
    ckpt.check_vocab(shard.vocab, f"validation shard {p}")
    ckpt.check_bpe(shard.manifest.get("vocab"), f"validation shard {p}")
    check_held_out(p, shard.sha256, ckpt.trained_on, ckpt.path)
    return shard


def load_train_counts(ckpt: Checkpoint, path: PathLike) -> np.ndarray[Any, np.dtype[np.int64]]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"{p}: training counts not found; frequency-stratified loss needs the per-id counts "
            "that `leviathan data tokenize` writes next to train.bin (counts.npy)"
        )
    manifest = check_anchored(p, "rerun `leviathan data tokenize`, which writes it")
    try:
        counts = load_counts(p, vocab=ckpt.vocab.name)
    except ValueError as exc:
        raise EvalInputError(
            f"{exc} (the checkpoint {ckpt.path} was trained on {ckpt.vocab.name})"
        ) from exc
    counted = (manifest.get("inputs") or [{}])[0].get("sha256")
    check_counted_from(p, counted, ckpt.trained_on, ckpt.path)
    return counts


def build_word_counts(
    train: PathLike,
    val: PathLike,
    *,
    max_train_tokens: int | None = None,
    started: _dt.datetime | None = None,
) -> dict[str, Any]:
    """The `word_counts` output: training counts of every word of the validation text.

    `started`: when the command began (default: now)."""
    started = started or utc_now()
    t0 = time.perf_counter()
    val_shard = open_shard(val, verify_sha256=True)
    train_shard = open_shard(train)
    if train_shard.vocab != val_shard.vocab:
        raise EvalInputError(
            f"{train} is tokenized with {train_shard.vocab} but {val} with {val_shard.vocab}"
        )
    vocab = val_shard.vocab
    wc = count_val_words(train, val, vocab=vocab, max_tokens=max_train_tokens)
    results = {
        "counts": wc.counts,  # sorted by word
        "train_tokens_counted": wc.train_tokens,
        "train_tokens_total": len(train_shard),
        "train_words_counted": wc.train_words,
        "val_words": wc.val_words,
        "val_word_types": len(wc.counts),
        "definition": "maximal runs of non-ASCII-whitespace bytes of the UTF-8 text; each "
        "document end is the word ' <|endoftext|>' (leviathan.eval.words)",
    }
    inputs = [file_record(train, "train_tokens"), file_record(val, "val_tokens")]
    return envelope(
        "word_counts",
        checkpoint=None,
        inputs=inputs,
        config={"max_train_tokens": max_train_tokens, "vocab": vocab},
        results=results,
        seconds=time.perf_counter() - t0,
        started=started,
    )


def load_word_counts(path: PathLike) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"{p}: word counts not found; run `leviathan eval word-counts` first"
        )
    return read_result(p, "word_counts")


def evaluate_val(
    ckpt: Checkpoint,
    model: EvalModel,
    val: PathLike,
    *,
    counts: PathLike | None = None,
    word_counts: PathLike | None = None,
    cfg: ValConfig = ValConfig(),
    started: _dt.datetime | None = None,
    partial: PathLike | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """The `val` evaluation output (see the module docstring and `leviathan.eval.results`).

    `started`: when the evaluation began, checkpoint loading included (default: now).
    `partial`: where the pass keeps its running sums, so that a killed evaluation continues
    (`perplexity.evaluate_shard`); the caller removes it once the output is written."""
    started = started or utc_now()
    t0 = time.perf_counter()
    shard = open_val_shard(ckpt, val)
    train_counts = load_train_counts(ckpt, counts) if counts is not None else None
    wc = load_word_counts(word_counts) if word_counts is not None else None
    if wc is not None:
        _check_word_counts_of(wc, word_counts, ckpt, shard)  # type: ignore[arg-type]
    stats = _val_pass(ckpt, model, shard, cfg, wc is not None, partial, progress)
    summary = stats.summary()
    check_finite_loss(summary["loss"], ckpt)
    results: dict[str, Any] = {"overall": summary}
    inputs = [{**file_record(shard.path, "val_tokens", sha256=shard.sha256), "check": shard.check}]
    if train_counts is not None:
        results["frequency_tokens"] = token_frequency(
            stats.count,
            stats.loss_sum,
            train_counts,
            quantiles=cfg.quantile_bins,
            max_decade=cfg.max_decade,
        )
        inputs.append(file_record(counts, "train_counts"))  # type: ignore[arg-type]
    if wc is not None:
        results.update(_word_results(stats, shard, wc, word_counts, cfg))  # type: ignore[arg-type]
        inputs.append(file_record(word_counts, "word_counts"))  # type: ignore[arg-type]
    return envelope(
        "val",
        checkpoint=ckpt,
        inputs=inputs,
        config=_val_config(cfg, cfg.context or ckpt.context, model.precision),
        results=results,
        seconds=time.perf_counter() - t0,
        device=str(model.device),
        started=started,
    )


def _check_word_counts_of(
    wc: dict[str, Any], path: PathLike, ckpt: Checkpoint, shard: Shard
) -> None:
    """Word counts of the checkpoint's training shard and of this validation shard."""
    roles = {i.get("role"): i.get("sha256") for i in wc.get("inputs", [])}
    check_counted_from(path, roles.get("train_tokens"), ckpt.trained_on, ckpt.path)
    if roles.get("val_tokens") not in (None, shard.sha256):
        raise EvalInputError(
            f"{path}: was made for another validation text (a shard of sha256 "
            f"{str(roles['val_tokens'])[:12]}), not {shard.path}: rerun "
            "`leviathan eval word-counts` with this validation shard"
        )


def _val_pass(
    ckpt: Checkpoint,
    model: EvalModel,
    shard: Shard,
    cfg: ValConfig,
    keep_token_losses: bool,
    partial: PathLike | None,
    progress: bool,
) -> TokenStats:
    """The one pass over the split, resumable from `partial` while checkpoint, shard, device
    type and precision are the same."""
    return evaluate_shard(
        model,
        shard.path,
        vocab=shard.vocab,
        context=cfg.context or ckpt.context,
        batch_size=cfg.batch_size,
        max_windows=cfg.max_windows,
        keep_token_losses=keep_token_losses,
        partial=partial,
        partial_key=f"{ckpt.sha256} {shard.sha256} {model.device.type} {model.precision}",
        persist_seconds=cfg.persist_seconds,
        progress=progress,
    )


def _val_config(cfg: ValConfig, context: int, precision: str) -> dict[str, Any]:
    """The settings a `val` output records."""
    return {
        "context": context,
        "batch_size": cfg.batch_size,
        "max_windows": cfg.max_windows,
        "quantile_bins": cfg.quantile_bins,
        "max_decade": cfg.max_decade,
        "precision": precision,
    }


def _word_results(
    stats: TokenStats, shard: Shard, wc: dict[str, Any], word_counts: PathLike, cfg: ValConfig
) -> dict[str, Any]:
    """The `words` totals and the word-level frequency buckets (`frequency_words`)."""
    assert stats.token_losses is not None
    ws = word_losses(shard.tokens, stats.token_losses, shard.vocab)
    train_wc = _train_word_counts(ws, wc, word_counts, shard)
    return {
        "words": word_summary(ws),
        "frequency_words": stratify(
            train_wc, ws.n, ws.loss_sum, quantiles=cfg.quantile_bins, max_decade=cfg.max_decade
        ),
    }


def _train_word_counts(
    ws: WordStats, wc: dict[str, Any], word_counts: PathLike, shard: Shard
) -> np.ndarray[Any, np.dtype[np.int64]]:
    """The training count of each evaluated word type, from the `word_counts` output."""
    table = wc["results"]["counts"]
    missing = [w for w in ws.words if w not in table]
    if missing:
        raise EvalInputError(
            f"{word_counts}: has no count for {len(missing)} word(s) of {shard.path} (e.g. "
            f"{missing[:3]}): it was made for another validation text; rerun "
            "`leviathan eval word-counts` with this validation shard"
        )
    return np.asarray([table[w] for w in ws.words], dtype=np.int64)


def word_summary(ws: WordStats) -> dict[str, Any]:
    """Word-level totals of a pass: words, their loss, perplexity and bits per word."""
    total = float(ws.loss_sum.sum())
    return {
        "words": ws.n_words,
        "word_types": len(ws.words),
        "tokens_in_words": ws.tokens_in_words,
        "targets_outside_words": ws.targets_outside_words,
        "loss_outside_words": ws.loss_outside_words,
        "total_nats": total,
        "mean_word_loss": total / ws.n_words if ws.n_words else None,
        "word_perplexity": perplexity(total / ws.n_words) if ws.n_words else None,
        "bits_per_word": total / LN2 / ws.n_words if ws.n_words else None,
    }
