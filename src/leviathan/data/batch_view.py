"""The exact batch of any training step, and its fingerprint (`leviathan data batch`).

A step's batch is a pure function of the data, the seed, the global batch and the step
(`leviathan.data.loader`): row j of step s (j in [0, global_batch)) is the window
perm_e[(s * global_batch + j) mod n_windows]; rank r of W ranks trains rows [r*b, (r+1)*b),
b = global_batch / W. `step_rows` names each row's window, its shard and the token offset of
the window there, and reads its context + 1 tokens from the shard's memory map (not through
the loader's reads), so what it shows is checked against what the trainer consumed.

Fingerprint. Each row's digest is the sha256 of its context + 1 tokens as little-endian int64;
a step's `batch_sha256` is the sha256 of its rows' digests in global row order. The trainer
computes it from the tensors it trains on: each rank hashes its own rows and the digests are
gathered in rank order (a few bytes per row), so the fingerprint is the same for any number
of ranks, and it is in every `train` record of the metrics log (`batch_sha256`).

Steps are counted as the metrics log counts them: step N is the N-th optimizer step (its
record says `"step": N`), which trains the loader's batch at position N - 1.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from leviathan.data.loader import TrainLoader


def row_digests(windows: np.ndarray[Any, Any]) -> bytes:
    """The 32-byte sha256 of each row of `windows` ([rows, context + 1] token ids), joined."""
    rows = np.ascontiguousarray(windows, dtype="<i8")
    return b"".join(hashlib.sha256(row.tobytes()).digest() for row in rows)


def batch_sha256(digests: bytes) -> str:
    """A batch's fingerprint from its rows' digests (`row_digests`) in global row order."""
    return hashlib.sha256(digests).hexdigest()


@dataclass(frozen=True)
class Row:
    row: int  # in the global batch
    window: int  # global window index (over the shards, concatenated)
    shard: str  # the shard file
    offset: int  # the window's first token in that shard
    tokens: np.ndarray[Any, Any]  # its context + 1 token ids

    @property
    def sha256(self) -> str:
        return row_digests(self.tokens[None, :]).hex()

    def record(self, text: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "row": self.row,
            "window": self.window,
            "shard": self.shard,
            "offset": self.offset,
            "sha256": self.sha256,
        }
        if text is not None:
            out["text"] = text
        return out


@dataclass(frozen=True)
class StepBatch:
    step: int  # 1-based, as the metrics log counts
    rows: list[Row]  # every row of the global batch
    context: int

    @property
    def batch_sha256(self) -> str:
        return batch_sha256(b"".join(bytes.fromhex(r.sha256) for r in self.rows))

    def of_rank(self, rank: int, world_size: int) -> list[Row]:
        """The rows rank `rank` of `world_size` trains."""
        if world_size < 1 or not 0 <= rank < world_size or len(self.rows) % world_size:
            raise ValueError(
                f"--rank {rank} --world-size {world_size}: need 0 <= rank < world size, and a "
                f"world size dividing the global batch {len(self.rows)}"
            )
        b = len(self.rows) // world_size
        return self.rows[rank * b : (rank + 1) * b]


def step_rows(
    train_bins: Sequence[Path | str],
    *,
    context: int,
    global_batch: int,
    seed: int,
    step: int,
    vocab: str | None = None,
) -> StepBatch:
    """The global batch of optimizer step `step` (1-based) with each row's window, shard,
    offset and tokens (read from the shard's memory map)."""
    if step < 1:
        raise ValueError(f"--step {step}: steps count from 1 (the first optimizer step)")
    loader = TrainLoader(
        list(train_bins), context=context, global_batch=global_batch, seed=seed, vocab=vocab
    )
    offsets = np.concatenate([[0], np.cumsum([(len(s) - 1) // context for s in loader.shards])])
    rows = []
    for j, window in enumerate(loader.window_ids(step - 1).tolist()):
        s = int(np.searchsorted(offsets, window, side="right") - 1)
        offset = (window - int(offsets[s])) * context
        shard = loader.shards[s]
        tokens = np.asarray(shard.tokens[offset : offset + context + 1], dtype=np.int64)
        rows.append(Row(j, window, str(shard.path), offset, tokens))
    return StepBatch(step, rows, context)
