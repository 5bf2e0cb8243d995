"""Batches for the trainer: deterministic, DDP-shardable, resumable; plus validation windows.

Training windows. The token shards (one or more `.bin`, concatenated in order) are cut
into windows of `context + 1` tokens at stride `context` (window w of a shard covers
tokens [w*context, w*context + context + 1)), so consecutive windows share one token and
every token after a shard's first is a target exactly once per epoch; a tail shorter than
a window is unused. Windows never cross shard boundaries. Shards of fewer windows than one
step's global batch are refused: every step would train the same windows more than once.

Order. Sample position p = step * global_batch + j (j in [0, global_batch)) reads window
perm_e[p mod n_windows] with epoch e = p div n_windows and perm_e a permutation seeded by
(seed, e) (NumPy PCG64 + shuffle). A batch is a pure function of (seed, step), so resuming at
any step needs only the step. Rank r of world_size takes rows [r*b, (r+1)*b) of the global batch
(b = global_batch / world_size): ranks never overlap and together cover every row.

Resuming. `state_dict()` holds the step plus a fingerprint of the data (shard sha256s and
token counts, vocabulary, dtype, context), the ordering parameters (seed, global batch) and
the sha256 of epoch 0's permutation with the NumPy version that made it; `load_state_dict`
refuses a state whose fingerprint or ordering differs. NumPy guarantees PCG64's bit stream but
not `shuffle`'s algorithm across versions: resuming under another NumPy is accepted only where
it provably gives the same order (the same permutation digest), and refused otherwise.
The world size may change between runs: the global order does not depend on it.

Prefetch. `TrainLoader.prefetch(start, stop, depth=d)` reads the batches of the next d steps in
background threads while the current step trains (memmap reads release the GIL, so file-system
latency on a cold cache overlaps the step instead of adding to it); on CUDA they are pinned, so
the trainer's `.to(device, non_blocking=True)` copies asynchronously. Each prefetched batch is
`batch(step)` itself: the same tensors, bitwise, in the same order.

Validation. `val_batches` walks one shard's windows in order, without overlap in targets,
covering every target token exactly once; the last window is padded with target -100
(PyTorch's cross-entropy ignore_index) so no token is dropped.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from leviathan.data.shards import Shard, open_shard

STATE_VERSION = 2  # of `TrainLoader.state_dict`'s fields; a resume refuses any other
IGNORE_INDEX = -100
PathLike = str | os.PathLike[str]


class DataMismatchError(ValueError):
    """A loader state does not belong to this data or ordering."""


def _as_paths(paths: PathLike | Sequence[PathLike]) -> list[PathLike]:
    if isinstance(paths, (str, os.PathLike)):
        return [paths]
    out = list(paths)
    if not out:
        raise ValueError("no token shard given: pass at least one .bin path")
    return out


def fingerprint(shards: Sequence[Shard], context: int) -> dict[str, Any]:
    """What identifies the data a loader reads (compared on resume)."""
    vocab = shards[0].manifest["vocab"]
    for shard in shards[1:]:
        if shard.manifest["vocab"] != vocab or shard.tokens.dtype != shards[0].tokens.dtype:
            raise ValueError(
                f"{shard.path}: vocabulary/dtype differ from {shards[0].path}; all shards of "
                f"a loader must come from the same vocabulary"
            )
    return {
        "shards": [{"sha256": s.sha256, "tokens": len(s)} for s in shards],
        "vocab": vocab["name"],
        "vocab_bpe_sha256": vocab["bpe_sha256"],
        "dtype": shards[0].tokens.dtype.name,
        "context": context,
    }


class TrainLoader:
    """Training batches `(x, y)` of shape [global_batch / world_size, context], int64.

    Build one per rank with the same arguments except `rank`. `batch(step)` is pure. The
    loader owns its position `step`, the next step to train (what a checkpoint records and a
    resume restores): handing out a step's batch, by iterating or through `prefetch`, moves it
    past that step.
    """

    def __init__(
        self,
        paths: PathLike | Sequence[PathLike],
        *,
        context: int,
        global_batch: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        vocab: str | None = None,
        verify_sha256: bool = False,
        progress: bool = False,
    ) -> None:
        if context < 1 or global_batch < 1:
            raise ValueError(f"context={context}, global_batch={global_batch}: must be >= 1")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank={rank}, world_size={world_size}: need 0 <= rank < world")
        if global_batch % world_size:
            raise ValueError(
                f"global_batch={global_batch} is not divisible by world_size={world_size}; "
                f"choose a global batch that is a multiple of the number of ranks"
            )
        self.shards = [open_shard(p, vocab, verify_sha256, progress) for p in _as_paths(paths)]
        self.context = context
        self.global_batch = global_batch
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.local_batch = global_batch // world_size
        per_shard = [max(0, (len(s) - 1) // context) for s in self.shards]
        self._offsets = np.concatenate([[0], np.cumsum(per_shard)]).astype(np.int64)
        self.n_windows = int(self._offsets[-1])
        if self.n_windows == 0:
            raise ValueError(
                f"{[str(s.path) for s in self.shards]}: fewer than context+1={context + 1} "
                f"tokens per shard; use a larger corpus or a shorter context"
            )
        if self.n_windows < global_batch:
            raise ValueError(
                f"{[str(s.path) for s in self.shards]}: {sum(len(s) for s in self.shards):,} "
                f"tokens, {self.n_windows} windows of context+1={context + 1}: fewer than one "
                f"step's global_batch={global_batch}, so every step would train the same "
                f"windows more than once; use a larger corpus, a shorter context or a smaller "
                f"global batch"
            )
        self.fingerprint = fingerprint(self.shards, context)
        self._files = [s.streamed() for s in self.shards]
        self.step = 0
        self._perm_cache: dict[int, np.ndarray[Any, Any]] = {}
        self._perm_lock = threading.Lock()  # prefetch threads share the permutation cache
        self._order_sha256: str | None = None

    @property
    def order_sha256(self) -> str:
        """sha256 of epoch 0's window permutation: the data order this NumPy produces."""
        if self._order_sha256 is None:
            import hashlib

            perm = np.ascontiguousarray(self._perm(0), dtype="<i8")
            self._order_sha256 = hashlib.sha256(perm.tobytes()).hexdigest()
        return self._order_sha256

    @property
    def tokens_per_step(self) -> int:
        """Target tokens per optimizer step over all ranks."""
        return self.global_batch * self.context

    def _perm(self, epoch: int) -> np.ndarray[Any, Any]:
        with self._perm_lock:
            return self._perm_locked(epoch)

    def _perm_locked(self, epoch: int) -> np.ndarray[Any, Any]:
        if epoch not in self._perm_cache:
            rng = np.random.Generator(np.random.PCG64([self.seed, epoch]))
            dtype = np.int32 if self.n_windows < 2**31 else np.int64
            perm = np.arange(self.n_windows, dtype=dtype)  # 4 bytes/window, shuffled in place
            rng.shuffle(perm)
            self._perm_cache = {e: p for e, p in self._perm_cache.items() if e == epoch - 1}
            self._perm_cache[epoch] = perm
        return self._perm_cache[epoch]

    def window_ids(self, step: int) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Global window indices of this rank's rows at `step`."""
        if step < 0:
            raise ValueError(f"step={step}: must be >= 0")
        first = step * self.global_batch + self.rank * self.local_batch
        positions = np.arange(first, first + self.local_batch, dtype=np.int64)
        epochs, within = np.divmod(positions, self.n_windows)
        out = np.empty(self.local_batch, dtype=np.int64)
        for epoch in np.unique(epochs):
            mask = epochs == epoch
            out[mask] = self._perm(int(epoch))[within[mask]]
        return out

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) of this rank at `step`; a pure function of (seed, step, rank).
        Windows are read from the shard files (one positioned read each), not through their
        memory maps: over a run every part of a 100 GB shard is read, and a map would keep it
        all resident in each rank's memory (see `Shard.streamed`)."""
        windows = self.window_ids(step)
        shard_of = np.searchsorted(self._offsets, windows, side="right") - 1
        rows = np.empty((windows.size, self.context + 1), dtype=np.int64)
        for shard in np.unique(shard_of):
            mine = shard_of == shard
            starts = (windows[mine] - self._offsets[shard]) * self.context
            rows[mine] = self._files[int(shard)].windows(starts, self.context + 1)
        self.shards[0].check_ids(rows)  # all shards share one vocabulary (fingerprint)
        return torch.from_numpy(rows[:, :-1].copy()), torch.from_numpy(rows[:, 1:].copy())

    def prefetch(
        self, start: int, stop: int, *, depth: int = 2, pin_for: torch.device | None = None
    ) -> Prefetcher:
        """The batches of steps [start, stop), each read `depth` steps ahead in background
        threads (`depth=0`: read when asked); `pin_for` (a CUDA device): pinned for asynchronous
        copies to it (the thread selects that device first, as PyTorch's DataLoader does, so no
        context is created on another GPU). Each `get(step)` moves the position past `step`."""

        def load(step: int) -> tuple[torch.Tensor, torch.Tensor]:
            x, y = self.batch(step)
            if pin_for is None:
                return x, y
            torch.cuda.set_device(pin_for)
            return x.pin_memory(), y.pin_memory()

        return Prefetcher(load, start, stop, depth, handed_out=self._handed_out)

    def _handed_out(self, step: int) -> None:
        """The batch of `step` went to training: the position moves past it."""
        self.step = step + 1

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            step = self.step
            x_y = self.batch(step)
            self._handed_out(step)
            yield x_y

    def state_dict(self) -> dict[str, Any]:
        """Small, JSON-able state: the next step, ordering parameters and data fingerprint."""
        return {
            "version": STATE_VERSION,
            "step": self.step,
            "seed": self.seed,
            "global_batch": self.global_batch,
            "fingerprint": self.fingerprint,
            "order_sha256": self.order_sha256,
            "numpy": np.__version__,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at `state["step"]`; refuse a state made with other data or ordering."""
        if state.get("version") != STATE_VERSION:
            raise DataMismatchError(
                f"loader state version {state.get('version')!r} != "
                f"{STATE_VERSION}; cannot resume with this code"
            )
        problems = [
            f"{key}: checkpoint {state.get(key)!r} != now {value!r}"
            for key, value in (("seed", self.seed), ("global_batch", self.global_batch))
            if state.get(key) != value
        ]
        theirs = state.get("fingerprint", {})
        problems += [
            f"{key}: checkpoint {theirs.get(key)!r} != now {value!r}"
            for key, value in self.fingerprint.items()
            if theirs.get(key) != value
        ]
        if not problems and state.get("order_sha256") != self.order_sha256:
            problems.append(
                f"data order: NumPy {np.__version__} shuffles the windows differently from NumPy "
                f"{state.get('numpy')!r} that made the checkpoint (permutation sha256 "
                f"{self.order_sha256[:12]} != {str(state.get('order_sha256'))[:12]}); resume under "
                f"numpy=={state.get('numpy')}"
            )
        if problems:
            raise DataMismatchError(
                "refusing to resume: the checkpoint was made with different data or ordering ("
                + "; ".join(problems)
                + "). Resume with the same shards/vocab/context/seed/global batch, or start "
                "a new run"
            )
        self.step = int(state["step"])


Batch = tuple[torch.Tensor, torch.Tensor]


class Prefetcher:
    """`get(step)` for steps start, start + 1, ... < stop in order, each loaded by `load(step)`
    up to `depth` steps ahead in as many threads (so as many reads in flight on a slow file
    system). An error of a load is raised by the `get` of its step; `handed_out(step)` is
    called once a `get` has its batch. Use as a context manager: leaving it cancels what was not
    started and waits for what was."""

    def __init__(
        self,
        load: Callable[[int], Batch],
        start: int,
        stop: int,
        depth: int,
        handed_out: Callable[[int], None] | None = None,
    ) -> None:
        if depth < 0:
            raise ValueError(f"prefetch depth={depth}: must be >= 0 (0: no prefetch)")
        self._load, self._stop, self._depth, self._handed_out = load, stop, depth, handed_out
        self._next = self._submitted = start
        self._pending: deque[Future[Batch]] = deque()
        self._pool = (
            ThreadPoolExecutor(depth, thread_name_prefix="leviathan-prefetch") if depth else None
        )

    def _fill(self) -> None:
        assert self._pool is not None
        while len(self._pending) < self._depth and self._submitted < self._stop:
            self._pending.append(self._pool.submit(self._load, self._submitted))
            self._submitted += 1

    def get(self, step: int) -> Batch:
        if step != self._next or step >= self._stop:
            raise ValueError(
                f"prefetcher asked for step {step}, expected {self._next} (< {self._stop}): "
                "steps are read in order; make a new prefetcher to jump"
            )
        self._next += 1
        if self._pool is None:
            batch = self._load(step)
        else:
            self._fill()
            pending = self._pending.popleft()
            self._fill()  # the next read starts before this step trains
            batch = pending.result()
        if self._handed_out is not None:
            self._handed_out(step)
        return batch

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pending.clear()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class ValWindows:
    """Fixed windows of one shard: window w has inputs [w*T, w*T+T) and targets shifted by 1."""

    shard: Shard
    context: int

    @property
    def n_windows(self) -> int:
        """Windows needed to cover all len-1 targets (the last one may be partial)."""
        return -(-(len(self.shard) - 1) // self.context)

    @property
    def n_targets(self) -> int:
        return len(self.shard) - 1

    def window(self, w: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        start = w * self.context
        chunk = np.asarray(self.shard.tokens[start : start + self.context + 1], dtype=np.int64)
        x = np.zeros(self.context, dtype=np.int64)
        y = np.full(self.context, IGNORE_INDEX, dtype=np.int64)
        n = chunk.size - 1
        x[:n], y[:n] = chunk[:-1], chunk[1:]
        return x, y


def val_batches(
    path: PathLike,
    *,
    context: int,
    batch_size: int,
    rank: int = 0,
    world_size: int = 1,
    max_windows: int | None = None,
    vocab: str | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Validation batches (x, y) int64 [<=batch_size, context] over fixed windows, in order.

    Every target token of the shard appears exactly once over all ranks (rank r takes
    windows r, r + world_size, ...); padded targets are -100. `max_windows` evaluates only
    the first windows (a fixed prefix, identical across runs).
    """
    if context < 1 or batch_size < 1:
        raise ValueError(f"context={context}, batch_size={batch_size}: must be >= 1")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank={rank}, world_size={world_size}: need 0 <= rank < world")
    windows = ValWindows(open_shard(path, vocab), context)
    if windows.n_targets < 1:
        raise ValueError(f"{path}: needs at least 2 tokens for one target")
    total = windows.n_windows if max_windows is None else min(max_windows, windows.n_windows)
    mine = range(rank, total, world_size)
    for i in range(0, len(mine), batch_size):
        pairs = [windows.window(w) for w in mine[i : i + batch_size]]
        for x, y in pairs:
            windows.shard.check_ids(x)
            windows.shard.check_ids(y)
        yield (
            torch.from_numpy(np.stack([p[0] for p in pairs])),
            torch.from_numpy(np.stack([p[1] for p in pairs])),
        )
