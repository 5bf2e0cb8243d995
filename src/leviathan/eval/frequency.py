"""Frequency-stratified loss: evaluated units bucketed by how often they occur in training.

A *unit* is a token id (token level) or a word (word level, `leviathan.eval.words`). For
each unit type k we have its training-corpus count c_k, how many evaluated occurrences n_k
it has and their summed loss s_k. Two bucketings:

* fixed log10 bins on c: 0, 1-9, 10-99, ..., 10^(m-1)..10^m - 1, >= 10^m (m = `max_decade`,
  6 by default: the last bin is ">= 1M", the paper's top bucket);
* equal-mass quantile bins: the evaluated occurrences sorted by c and cut into q groups of
  (nearly) equal size. A type never straddles two bins, so where one count holds more than
  1/q of the mass, neighbouring cuts coincide and fewer than q bins are reported.

Per bucket: the count range, number of occurrences n, distinct types, share of all
occurrences, mean loss (nats) and perplexity exp(mean loss). Bucket n sum to the total, and
the n-weighted mean of bucket losses is the overall loss (up to float rounding).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from leviathan.eval.errors import EvalInputError
from leviathan.eval.results import perplexity

Int64 = np.ndarray[Any, np.dtype[np.int64]]
Float64 = np.ndarray[Any, np.dtype[np.float64]]


@dataclass(frozen=True)
class Bin:
    """Units whose training count c satisfies lo <= c <= hi (hi None: no upper bound)."""

    label: str
    lo: int
    hi: int | None

    def mask(self, counts: Int64) -> np.ndarray[Any, np.dtype[np.bool_]]:
        m = counts >= self.lo
        return m if self.hi is None else m & (counts <= self.hi)


def log10_bins(max_decade: int = 6) -> list[Bin]:
    """0, 1-9, 10-99, ..., >= 10**max_decade."""
    if max_decade < 1:
        raise EvalInputError(f"max_decade={max_decade} must be >= 1")
    bins = [Bin("0", 0, 0)]
    for d in range(max_decade):
        lo, hi = 10**d, 10 ** (d + 1) - 1
        bins.append(Bin(f"{lo}-{hi}", lo, hi))
    top = 10**max_decade
    bins.append(Bin(f">={top}", top, None))
    return bins


def quantile_bins(train_counts: Int64, n: Int64, q: int) -> list[Bin]:
    """Up to q bins of equal evaluated mass (n-weighted) along the training count."""
    if q < 1:
        raise EvalInputError(f"quantile bins q={q} must be >= 1")
    present = n > 0
    c, w = train_counts[present], n[present]
    if c.size == 0:
        return []
    order = np.argsort(c, kind="stable")
    c, w = c[order], w[order]
    cum = np.cumsum(w) / w.sum()
    # the count at which the cumulative mass first reaches k/q closes bin k
    cuts = sorted(
        {int(c[min(np.searchsorted(cum, k / q - 1e-12), c.size - 1)]) for k in range(1, q)}
    )
    his = [x for x in cuts if x < int(c[-1])] + [int(c[-1])]
    bins, lo = [], 0
    for i, hi in enumerate(his):
        last = i == len(his) - 1
        bins.append(Bin(f"q{i + 1}", lo, None if last else hi))
        lo = hi + 1
    return bins


def bucket_table(
    train_counts: Int64, n: Int64, loss_sum: Float64, bins: list[Bin]
) -> list[dict[str, Any]]:
    """Per-bin statistics (see the module docstring) over unit types k."""
    if not (train_counts.shape == n.shape == loss_sum.shape):
        raise EvalInputError(
            f"shapes differ: train counts {train_counts.shape}, n {n.shape}, loss {loss_sum.shape}"
        )
    total = int(n.sum())
    rows = []
    for b in bins:
        m = b.mask(train_counts)
        nb = int(n[m].sum())
        mean = float(loss_sum[m].sum() / nb) if nb else None
        present = m & (n > 0)
        rows.append(
            {
                "label": b.label,
                "count_lo": b.lo,
                "count_hi": b.hi,
                "observed_count_min": int(train_counts[present].min()) if nb else None,
                "observed_count_max": int(train_counts[present].max()) if nb else None,
                "n": nb,
                "types": int(present.sum()),
                "share": nb / total if total else None,
                "loss_sum": float(loss_sum[m].sum()),
                "mean_loss": mean,
                "perplexity": perplexity(mean),
            }
        )
    return rows


def stratify(
    train_counts: Int64, n: Int64, loss_sum: Float64, *, quantiles: int = 10, max_decade: int = 6
) -> dict[str, Any]:
    """Both bucketings plus the overall figures they must reconcile with."""
    total_n = int(n.sum())
    total_loss = float(loss_sum.sum())
    overall = total_loss / total_n if total_n else None
    return {
        "n": total_n,
        "types": int((n > 0).sum()),
        "mean_loss": overall,
        "perplexity": perplexity(overall),
        "log10": bucket_table(train_counts, n, loss_sum, log10_bins(max_decade)),
        "quantile": bucket_table(
            train_counts, n, loss_sum, quantile_bins(train_counts, n, quantiles)
        ),
    }


def token_frequency(
    count: Int64,
    loss_sum: Float64,
    train_counts: Int64,
    *,
    quantiles: int = 10,
    max_decade: int = 6,
) -> dict[str, Any]:
    """Token-level stratification: per-id evaluated counts/losses vs per-id training counts.

    The model's vocabulary may be larger than the tokenizer's (ids past n_vocab never occur
    in the data); those ids must have no evaluated targets.
    """
    V = len(train_counts)
    if len(count) < V:
        raise EvalInputError(f"training counts cover {V} ids but the model has only {len(count)}")
    if count[V:].any():
        bad = int(np.flatnonzero(count[V:])[0]) + V
        raise EvalInputError(
            f"evaluated target id {bad} is outside the training counts' vocabulary ({V} ids)"
        )
    return stratify(
        train_counts.astype(np.int64),
        count[:V].astype(np.int64),
        loss_sum[:V].astype(np.float64),
        quantiles=quantiles,
        max_decade=max_decade,
    )
