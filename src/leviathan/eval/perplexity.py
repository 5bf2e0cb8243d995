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

import itertools
import json
import logging
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from leviathan import layout
from leviathan.data.loader import IGNORE_INDEX, ValWindows, val_batches
from leviathan.data.shards import open_shard
from leviathan.eval.checkpoint import EvalModel
from leviathan.eval.config import PERSIST_SECONDS
from leviathan.eval.errors import EvalInputError
from leviathan.eval.results import perplexity
from leviathan.eval.token_bytes import token_bytes
from leviathan.io import atomic_path

log = logging.getLogger(__name__)
LN2 = math.log(2.0)


@dataclass
class TokenStats:
    """Per-id sums of one evaluation pass (ids index the model's vocabulary)."""

    vocab: str
    loss_sum: np.ndarray[Any, np.dtype[np.float64]]  # [V] summed loss of targets with this id
    count: np.ndarray[Any, np.dtype[np.int64]]  # [V] number of targets with this id
    token_losses: np.ndarray[Any, np.dtype[np.float32]] | None  # [n_targets], shard order
    seconds: float
    windows: int = 0  # windows evaluated (the first ones of the split)
    split_windows: int = 0  # windows of the whole split
    resumed_windows: int = 0  # windows a previous, interrupted pass had done

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
            "windows": self.windows,
            "split_windows": self.split_windows,
            "resumed_windows": self.resumed_windows,
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


def check_context(context: int, model: EvalModel, key: str = "context") -> None:
    """Refuse windows longer than the model's positions (`key`: the setting that chose it)."""
    if context > model.max_seq_len:
        raise EvalInputError(
            f"{key}={context} exceeds the model's max_seq_len={model.max_seq_len}: "
            "evaluate with the training context or shorter"
        )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def add_token_sums(
    loss_sum: torch.Tensor, count: torch.Tensor, ids: torch.Tensor, losses: torch.Tensor
) -> None:
    """loss_sum[id] += loss, count[id] += 1 for each (id, loss), in the given order, on the CPU.

    A float64 `index_add_` on CUDA adds with atomics in no fixed order, so the sums (and the
    reported loss) would change in their last bits from run to run; on the CPU it adds one
    element after the other. The per-token losses of a batch are a few KB, so moving them to
    the CPU costs nothing next to the forward pass, and every device adds in the same order."""
    ids, losses = ids.cpu(), losses.cpu()
    loss_sum.index_add_(0, ids, losses.double())
    count.index_add_(0, ids, torch.ones_like(ids))


@dataclass
class _Partial:
    """The running sums of an interrupted `evaluate_shard`, persisted between batches."""

    key: str  # what was evaluated (checkpoint, shard, settings): a different key starts over
    windows_done: int
    loss_sum: torch.Tensor
    count: torch.Tensor
    kept: list[torch.Tensor]
    seconds: float

    def save(self, path: Path) -> None:
        """Replace the saved sums at `path` atomically; a full disk is `DiskFull` (one line),
        the sums saved before kept."""
        kept = torch.cat(self.kept) if self.kept else torch.zeros(0)
        needed = self.loss_sum.nbytes + self.count.nbytes + kept.numel() * 4
        fix = "free space there, then rerun the evaluation: it resumes from the sums saved last"
        with atomic_path(path, needed=needed, fix=fix) as tmp, open(tmp, "wb") as fh:
            np.savez(
                fh,
                key=np.array(self.key),
                windows_done=np.int64(self.windows_done),
                loss_sum=self.loss_sum.numpy(),
                count=self.count.numpy(),
                kept=kept.numpy().astype(np.float32),
                seconds=np.float64(self.seconds),
            )

    @classmethod
    def load(cls, path: Path, key: str, vocab_size: int) -> _Partial | None:
        """The saved state if it is of this evaluation (else None: start over). A file that
        cannot be read back (truncated, not a zip, wrong shapes) is set aside with a WARNING
        (`layout.damaged`) and the evaluation starts over."""
        try:
            with np.load(path, allow_pickle=False) as z:
                if str(z["key"]) != key:
                    return None
                state = cls._from_arrays(z, key)
            if state.loss_sum.shape != (vocab_size,) or state.count.shape != (vocab_size,):
                raise ValueError(
                    f"sums of {state.loss_sum.shape} ids, not the model's {vocab_size}"
                )
            return state
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 (zipfile, zlib, numpy: anything unreadable)
            aside = layout.damaged(path)
            os.replace(path, aside)
            log.warning(
                "%s: cannot be read back (%s: %s); set aside as %s, evaluating from the start",
                path,
                type(exc).__name__,
                str(exc).splitlines()[0] if str(exc) else "",
                aside,
            )
            return None

    @classmethod
    def _from_arrays(cls, z: Any, key: str) -> _Partial:
        kept = torch.from_numpy(z["kept"].copy())
        return cls(
            key,
            int(z["windows_done"]),
            torch.from_numpy(z["loss_sum"].copy()),
            torch.from_numpy(z["count"].copy()),
            [kept] if kept.numel() else [],
            float(z["seconds"]),
        )

    @classmethod
    def resume_or_start(cls, path: Path | None, key: str, vocab_size: int) -> _Partial:
        """The state saved at `path` if it is of this evaluation, else empty sums."""
        saved = cls.load(path, key, vocab_size) if path is not None and path.is_file() else None
        return saved or cls(
            key,
            0,
            torch.zeros(vocab_size, dtype=torch.float64),
            torch.zeros(vocab_size, dtype=torch.int64),
            [],
            0.0,
        )

    def add_batch(self, losses: torch.Tensor, y: torch.Tensor, keep_token_losses: bool) -> None:
        """Add one batch's per-token losses [B, T] (CPU) of targets y [B, T]."""
        valid = y != IGNORE_INDEX
        vals = losses[valid]  # row-major: shard order
        add_token_sums(self.loss_sum, self.count, y[valid], vals)
        if keep_token_losses:
            self.kept.append(vals.float())
        self.windows_done += len(y)

    def kept_losses(self, keep_token_losses: bool) -> np.ndarray[Any, np.dtype[np.float32]] | None:
        if not keep_token_losses:
            return None
        return torch.cat(self.kept).numpy() if self.kept else np.zeros(0, np.float32)


def _pass_key(partial_key: str, shard: str | os.PathLike[str], **settings: Any) -> str:
    """What one pass evaluates, as the partial file records it: a saved state of another
    key is not resumed."""
    return json.dumps({"key": partial_key, "shard": str(shard), **settings}, sort_keys=True)


def evaluate_shard(
    model: EvalModel,
    shard: str | os.PathLike[str],
    *,
    vocab: str,
    context: int,
    batch_size: int,
    max_windows: int | None = None,
    keep_token_losses: bool = False,
    partial: str | os.PathLike[str] | None = None,
    partial_key: str = "",
    persist_seconds: float = PERSIST_SECONDS,
    progress: bool = False,
) -> TokenStats:
    """One pass over the shard's validation windows; see the module docstring.

    `partial`: a file that holds the running sums, rewritten (atomically) at most every
    `persist_seconds` between batches; a rerun whose `partial_key` (what is evaluated: the
    caller names checkpoint and settings) matches continues after its last saved batch, and
    gives the same numbers as an uninterrupted pass (sums are added in the same order)."""
    check_context(context, model)
    n_windows = ValWindows(open_shard(shard, vocab), context).n_windows
    total = n_windows if max_windows is None else min(max_windows, n_windows)
    key = _pass_key(
        partial_key,
        shard,
        context=context,
        batch_size=batch_size,
        windows=total,
        V=model.vocab_size,
        keep=keep_token_losses,
    )
    path = Path(partial) if partial is not None else None
    state = _Partial.resume_or_start(path, key, model.vocab_size)
    resumed = state.windows_done
    batches = val_batches(
        shard, context=context, batch_size=batch_size, max_windows=total, vocab=vocab
    )
    seconds = _score_batches(
        model,
        itertools.islice(batches, resumed // batch_size, None),
        state,
        total=total,
        keep_token_losses=keep_token_losses,
        partial=path,
        persist_seconds=persist_seconds,
        progress=progress,
    )
    return TokenStats(
        vocab=vocab,
        loss_sum=state.loss_sum.numpy(),
        count=state.count.numpy(),
        token_losses=state.kept_losses(keep_token_losses),
        seconds=seconds,
        windows=total,
        split_windows=n_windows,
        resumed_windows=resumed,
    )


def _score_batches(
    model: EvalModel,
    batches: Iterator[tuple[torch.Tensor, torch.Tensor]],
    state: _Partial,
    *,
    total: int,
    keep_token_losses: bool,
    partial: Path | None,
    persist_seconds: float,
    progress: bool,
) -> float:
    """Add the batches' losses to `state`, saving it to `partial` at most every
    `persist_seconds` until the last batch; returns the seconds of all passes so far."""
    dev = model.device
    bar = tqdm(
        total=total,
        initial=state.windows_done,
        disable=not progress,
        desc="val windows",
        unit="win",
    )
    _sync(dev)
    t0 = time.perf_counter()
    saved = t0
    for x, y in batches:
        losses = model.token_losses(x.to(dev, non_blocking=True), y.to(dev, non_blocking=True))
        state.add_batch(losses.cpu(), y, keep_token_losses)
        bar.update(len(x))
        now = time.perf_counter()
        if partial is not None and now - saved >= persist_seconds and state.windows_done < total:
            state.seconds += now - t0
            t0 = saved = now
            state.save(partial)
    bar.close()
    _sync(dev)
    return state.seconds + time.perf_counter() - t0


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
    check_context(context, model)
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
