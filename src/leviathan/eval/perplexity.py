"""Validation loss, perplexity and bits per byte over a whole token shard; sliding windows.

`evaluate_shard` runs the model over the shard's fixed validation windows (the data layer's
`val_batches`: every target token exactly once, last window padded with -100) and keeps,
per target id, the number of targets and their summed loss (float64): enough for the overall
loss and for any stratification by id, in O(V) memory whatever the shard size. With
`keep_token_losses` it also keeps every target's loss in shard order (4 bytes per token) for
the word-level analysis.

Bits per byte = total nats / ln 2 / total UTF-8 bytes of the target tokens (EOT and other
special tokens have no bytes), so models with different vocabularies are comparable.

`score_stream` scores one long token sequence with windows of `context` tokens moved by
`stride` (stride < context gives every scored token at least context - stride tokens of
context), used for WikiText-103.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from leviathan.data.loader import IGNORE_INDEX, val_batches
from leviathan.eval.checkpoint import EvalModel
from leviathan.eval.errors import EvalInputError
from leviathan.eval.results import perplexity
from leviathan.eval.token_bytes import token_bytes

LN2 = math.log(2.0)


@dataclass
class TokenStats:
    """Per-id sums of one evaluation pass (ids index the model's vocabulary)."""

    vocab: str
    loss_sum: np.ndarray[Any, np.dtype[np.float64]]  # [V] summed loss of targets with this id
    count: np.ndarray[Any, np.dtype[np.int64]]  # [V] number of targets with this id
    token_losses: np.ndarray[Any, np.dtype[np.float32]] | None  # [n_targets], shard order
    seconds: float

    @property
    def n_targets(self) -> int:
        return int(self.count.sum())

    @property
    def total_loss(self) -> float:
        return float(self.loss_sum.sum())

    @property
    def mean_loss(self) -> float:
        return self.total_loss / max(self.n_targets, 1)

    @property
    def n_bytes(self) -> int:
        lengths = token_bytes(self.vocab).lengths
        n = min(len(lengths), len(self.count))
        return int((self.count[:n] * lengths[:n]).sum())

    def summary(self) -> dict[str, Any]:
        """Loss (nats/token), perplexity, bits per token and per byte."""
        loss, n_bytes = self.mean_loss, self.n_bytes
        return {
            "targets": self.n_targets,
            "loss": loss,
            "perplexity": perplexity(loss),
            "bits_per_token": loss / LN2,
            "bytes": n_bytes,
            "bits_per_byte": self.total_loss / LN2 / n_bytes if n_bytes else None,
            "tokens_per_byte": self.n_targets / n_bytes if n_bytes else None,
            "total_nats": self.total_loss,
            "seconds": round(self.seconds, 3),
            "tokens_per_s": self.n_targets / self.seconds if self.seconds > 0 else None,
        }


def check_finite_loss(loss: float, ckpt: Any) -> None:
    """A non-finite loss means broken weights, not a result: say so instead of writing it."""
    if not math.isfinite(loss):
        where = getattr(ckpt, "path", ckpt)
        raise EvalInputError(
            f"the evaluation loss is {loss}: the weights of {where} are not finite "
            "(the run diverged); evaluate an earlier checkpoint"
        )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def evaluate_shard(
    model: EvalModel,
    shard: str | os.PathLike[str],
    *,
    vocab: str,
    context: int,
    batch_size: int,
    max_windows: int | None = None,
    keep_token_losses: bool = False,
) -> TokenStats:
    """One pass over the shard's validation windows; see the module docstring."""
    if context > model.max_seq_len:
        raise EvalInputError(
            f"context={context} exceeds the model's max_seq_len={model.max_seq_len}: "
            "evaluate with the training context or shorter"
        )
    dev = model.device
    V = model.vocab_size
    loss_sum = torch.zeros(V, dtype=torch.float64, device=dev)
    count = torch.zeros(V, dtype=torch.int64, device=dev)
    kept: list[torch.Tensor] = []
    _sync(dev)
    t0 = time.perf_counter()
    for x, y in val_batches(
        shard, context=context, batch_size=batch_size, max_windows=max_windows, vocab=vocab
    ):
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        losses = model.token_losses(x, y)
        valid = y != IGNORE_INDEX
        ids, vals = y[valid], losses[valid]  # row-major: shard order
        loss_sum.index_add_(0, ids, vals.double())
        count.index_add_(0, ids, torch.ones_like(ids))
        if keep_token_losses:
            kept.append(vals.float().cpu())
    _sync(dev)
    seconds = time.perf_counter() - t0
    return TokenStats(
        vocab=vocab,
        loss_sum=loss_sum.cpu().numpy(),
        count=count.cpu().numpy(),
        token_losses=torch.cat(kept).numpy()
        if keep_token_losses and kept
        else (np.zeros(0, np.float32) if keep_token_losses else None),
        seconds=seconds,
    )


def stream_windows(n_tokens: int, context: int, stride: int) -> list[tuple[int, int, int]]:
    """(begin, first_scored, end) per window over a stream of n_tokens.

    Inputs are tokens[begin:end-1+1) predicting targets begin+1..end; the window scores
    targets first_scored..end (inclusive), each target of the stream exactly once.
    """
    if not 1 <= stride <= context:
        raise EvalInputError(f"stride={stride} must be in [1, context={context}]")
    out: list[tuple[int, int, int]] = []
    last = 0  # last target scored (targets are positions 1..n_tokens-1)
    begin = 0
    while last < n_tokens - 1:
        end = min(begin + context, n_tokens - 1)
        out.append((begin, last + 1, end))
        last = end
        begin += stride
    return out


def score_stream(
    model: EvalModel, tokens: np.ndarray[Any, Any], *, context: int, stride: int, batch_size: int
) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Loss of tokens[1:] (float32 [n-1]) with sliding windows; see `stream_windows`."""
    if context > model.max_seq_len:
        raise EvalInputError(
            f"context={context} exceeds the model's max_seq_len={model.max_seq_len}"
        )
    ids = torch.as_tensor(np.asarray(tokens, dtype=np.int64))
    n = len(ids)
    out = np.zeros(max(n - 1, 0), dtype=np.float32)
    windows = stream_windows(n, context, stride)
    dev = model.device
    for i in range(0, len(windows), batch_size):
        chunk = windows[i : i + batch_size]
        x = torch.zeros(len(chunk), context, dtype=torch.int64)
        y = torch.full((len(chunk), context), IGNORE_INDEX, dtype=torch.int64)
        for r, (begin, first, end) in enumerate(chunk):
            length = end - begin
            x[r, :length] = ids[begin:end]
            lo = first - begin - 1  # input position predicting target `first`
            y[r, lo:length] = ids[first : end + 1]
        losses = model.token_losses(x.to(dev), y.to(dev)).cpu().numpy()
        for r, (begin, first, end) in enumerate(chunk):
            lo = first - begin - 1
            out[first - 1 : end] = losses[r, lo : end - begin]
    return out
