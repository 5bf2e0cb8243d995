"""Frequency-stratified loss: bins, reconciliation with the overall loss, real buckets."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from leviathan.data.counts import counts_from_shard, load_counts
from leviathan.data.shards import open_shard
from leviathan.eval.config import ValConfig
from leviathan.eval.errors import EvalInputError
from leviathan.eval.frequency import bucket_table, log10_bins, quantile_bins, stratify
from leviathan.eval.results import write_result
from leviathan.eval.token_bytes import token_bytes
from leviathan.eval.val import build_word_counts, evaluate_val
from leviathan.eval.words import segment


def test_log10_bins_cover_each_count_once() -> None:
    bins = log10_bins(6)
    assert [b.label for b in bins][:3] == ["0", "1-9", "10-99"]
    assert bins[-1].label == ">=1000000"
    counts = np.array([0, 1, 9, 10, 99, 100, 999_999, 1_000_000, 7_000_000_000], dtype=np.int64)
    member = np.stack([b.mask(counts) for b in bins])
    assert (member.sum(0) == 1).all()
    expected = [0 if c == 0 else min(int(math.log10(c)) + 1, 7) for c in counts.tolist()]
    assert member.argmax(0).tolist() == expected


def test_quantile_bins_have_equal_mass_without_ties() -> None:
    rng = np.random.default_rng(0)
    train = rng.permutation(1000).astype(np.int64)  # distinct counts: no ties
    n = rng.integers(1, 5, size=1000).astype(np.int64)
    loss = rng.random(1000) * n
    bins = quantile_bins(train, n, 10)
    assert len(bins) == 10
    rows = bucket_table(train, n, loss, bins)
    assert sum(r["n"] for r in rows) == n.sum()
    assert sum(r["types"] for r in rows) == 1000
    for r in rows:  # each bin holds 1/10 of the mass, give or take one type's weight
        assert abs(r["n"] - n.sum() / 10) <= n.max()


def test_quantile_bins_never_split_a_count() -> None:
    train = np.array([5, 5, 5, 5, 5, 5, 5, 5, 9, 100], dtype=np.int64)
    n = np.ones(10, dtype=np.int64)
    bins = quantile_bins(train, n, 4)
    member = np.stack([b.mask(train) for b in bins])
    assert (member.sum(0) == 1).all()
    assert len({tuple(member[:, i]) for i in range(8)}) == 1  # all the 5s in one bin
    assert len(bins) < 4


def _check_reconciles(strat: dict, total_n: int, total_loss: float) -> None:
    for kind in ("log10", "quantile"):
        rows = strat[kind]
        assert sum(r["n"] for r in rows) == total_n
        weighted = sum(r["mean_loss"] * r["n"] for r in rows if r["n"])
        assert weighted / total_n == pytest.approx(total_loss / total_n, rel=1e-9)
        for r in rows:
            if r["n"]:
                assert r["perplexity"] == pytest.approx(math.exp(r["mean_loss"]))
            else:
                assert r["mean_loss"] is None
                assert r["perplexity"] is None
    assert strat["mean_loss"] == pytest.approx(total_loss / total_n, rel=1e-12)


def test_token_buckets_on_a_trained_checkpoint(
    loaded, small_val: Path, gpt2_shards: Path, tmp_path: Path
) -> None:
    ckpt, em = loaded
    wc = build_word_counts(gpt2_shards / "train.bin", small_val)
    write_result(tmp_path / "wc.json", wc)
    out = evaluate_val(
        ckpt,
        em,
        small_val,
        counts=gpt2_shards / "counts.npy",
        word_counts=tmp_path / "wc.json",
        cfg=ValConfig(batch_size=8, quantile_bins=5),
    )
    res = out["results"]
    overall = res["overall"]
    tok = res["frequency_tokens"]
    _check_reconciles(tok, overall["targets"], overall["total_nats"])
    assert len(tok["quantile"]) <= 5
    # each bucket's mean loss, recomputed from per-target losses and the training counts
    from leviathan.eval.perplexity import evaluate_shard

    stats = evaluate_shard(
        em, small_val, vocab="gpt2", context=64, batch_size=8, keep_token_losses=True
    )
    targets = np.asarray(open_shard(small_val).tokens[1:], dtype=np.int64)
    train_counts = load_counts(gpt2_shards / "counts.npy")[targets]
    for row in tok["log10"]:
        sel = (train_counts >= row["count_lo"]) & (
            True if row["count_hi"] is None else train_counts <= row["count_hi"]
        )
        assert row["n"] == int(sel.sum())
        if row["n"]:
            assert row["mean_loss"] == pytest.approx(
                float(stats.token_losses[sel].astype(np.float64).mean()), rel=1e-5
            )
    # the words: their losses add up to the token losses
    words = res["words"]
    assert words["tokens_in_words"] + words["targets_outside_words"] == overall["targets"]
    assert words["total_nats"] + words["loss_outside_words"] == pytest.approx(
        overall["total_nats"], rel=1e-9
    )
    _check_reconciles(res["frequency_words"], words["words"], words["total_nats"])
    eot_count = int(
        np.count_nonzero(np.fromfile(gpt2_shards / "train.bin", dtype=np.uint16) == 50256)
    )
    assert wc["results"]["counts"][" <|endoftext|>"] == eot_count
    roles = [i["role"] for i in out["inputs"]]
    assert roles == ["val_tokens", "train_counts", "word_counts"]


def test_word_losses_are_the_sums_of_their_tokens(loaded, small_val: Path) -> None:
    from leviathan.eval.perplexity import evaluate_shard
    from leviathan.eval.words import word_losses

    _, em = loaded
    stats = evaluate_shard(
        em, small_val, vocab="gpt2", context=64, batch_size=8, keep_token_losses=True
    )
    tokens = np.asarray(open_shard(small_val).tokens, dtype=np.int64)
    ws = word_losses(tokens, stats.token_losses, "gpt2", chunk_tokens=500)  # several chunks
    seg = segment(tokens, token_bytes("gpt2"))
    loss = np.concatenate([[0.0], stats.token_losses.astype(np.float64)])
    per_occ = np.bincount(seg.word_of_token, weights=loss, minlength=len(seg.words))
    first = seg.word_of_token[0]  # holds the shard's first token, never a target: not evaluated
    expected: dict[str, float] = {}
    for i, w in enumerate(seg.words):
        if i != first:
            key = w.decode("utf-8", "surrogateescape")
            expected[key] = expected.get(key, 0.0) + per_occ[i]
    got = dict(zip(ws.words, ws.loss_sum.tolist(), strict=True))
    assert got.keys() == expected.keys()
    for k in got:
        assert got[k] == pytest.approx(expected[k], rel=1e-9, abs=1e-9)


def test_missing_or_foreign_counts_are_clear_errors(
    loaded, small_val: Path, tmp_path: Path, shard_writer
) -> None:
    ckpt, em = loaded
    with pytest.raises(FileNotFoundError, match="training counts not found.*counts.npy"):
        evaluate_val(ckpt, em, small_val, counts=tmp_path / "counts.npy")
    other = shard_writer(
        tmp_path / "train.bin", np.arange(1000), vocab="cl100k_base", split="train"
    )
    counts_from_shard(other, tmp_path / "cl100k_counts.npy")
    with pytest.raises(EvalInputError, match="cl100k_base.*trained on gpt2"):
        evaluate_val(ckpt, em, small_val, counts=tmp_path / "cl100k_counts.npy")


def test_word_counts_of_another_validation_text_are_refused(
    loaded, small_val: Path, gpt2_shards: Path, tmp_path: Path, shard_writer
) -> None:
    ckpt, em = loaded
    tokens = np.asarray(open_shard(small_val).tokens)
    other_val = shard_writer(tmp_path / "other_val.bin", tokens[:40])
    write_result(tmp_path / "wc.json", build_word_counts(gpt2_shards / "train.bin", other_val))
    with pytest.raises(EvalInputError, match="made for another validation text"):
        evaluate_val(ckpt, em, small_val, word_counts=tmp_path / "wc.json")


def test_stratify_handles_empty_and_single_type() -> None:
    s = stratify(
        np.array([3], dtype=np.int64), np.array([2], dtype=np.int64), np.array([4.0]), quantiles=10
    )
    assert [r["n"] for r in s["quantile"]] == [2]
    assert s["mean_loss"] == 2.0
    with pytest.raises(EvalInputError):
        quantile_bins(np.array([1]), np.array([1]), 0)


def test_word_buckets_on_a_prefix_of_the_split(
    loaded, small_val: Path, gpt2_shards: Path, tmp_path: Path
) -> None:
    ckpt, em = loaded
    write_result(tmp_path / "wc.json", build_word_counts(gpt2_shards / "train.bin", small_val))
    out = evaluate_val(
        ckpt, em, small_val, word_counts=tmp_path / "wc.json", cfg=ValConfig(max_windows=3)
    )
    words, overall = out["results"]["words"], out["results"]["overall"]
    assert overall["targets"] == 3 * 64
    assert words["total_nats"] + words["loss_outside_words"] == pytest.approx(
        overall["total_nats"], rel=1e-9
    )
    assert words["targets_outside_words"] >= 1  # the cut last word
