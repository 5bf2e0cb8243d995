"""Training I/O off the critical path: the loader's prefetch on a cold page cache,
and the stall of a periodic checkpoint, in line against in the background.

Loader. A token shard of `--gib` GiB (o200k_base, uint32, random ids) read at the study's
global batch (512 windows of context 512 per step, one rank) while a step of `--step-ms`
milliseconds runs (the host waiting on the device, as on a GPU). Before each variant the
shard's pages are dropped from the page cache (`posix_fadvise(POSIX_FADV_DONTNEED)` on the
file: no root needed, no other file's cache touched), so every window is a read from the disk.
Variants: a reference that reads one slice per window and stacks them, the loader's
synchronous `batch(step)` and `prefetch(depth)`, in one run; the batches of all three are
compared (sha256 of every step's tensors).

Checkpoint. A model of `--ckpt-params` million fp32 parameters with AdamW state (12 bytes per
parameter on disk) trains `--ckpt-steps` steps of a fixed CPU matmul load, saving every
`--ckpt-every` steps through `CheckpointManager`; the stall per save is the loop's time beyond
the same loop without saves, in line (`checkpoint: {background: false}`) and in the background.

    .venv/bin/python bench/bench_train_io.py --gib 2 --steps 24 --step-ms 100
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from leviathan.data.loader import TrainLoader
from leviathan.io import atomic_path
from leviathan.manifest import vocab_record, write_manifest
from leviathan.train import checkpoint as ckpt
from leviathan.train.config import CheckpointConfig, train_config
from leviathan.train.distributed import DistInfo
from leviathan.vocab import get_vocab

CONTEXT, GLOBAL_BATCH = 512, 512  # the study's (docs/method.md §4)
CPU = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


def make_shard(path: Path, gib: float) -> Path:
    spec = get_vocab("o200k_base")
    n = int(gib * (1 << 30)) // 4
    rng = np.random.default_rng(0)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        for start in range(0, n, 1 << 24):
            fh.write(rng.integers(0, spec.n_vocab, min(1 << 24, n - start), dtype="<u4").tobytes())
    write_manifest(
        path,
        artifact_type="tokens",
        vocab=vocab_record(spec),
        fields={"split": "train", "dtype": "uint32", "tokens": n, "documents": 1},
    )
    return path


def drop_cache(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())
        os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def per_window_batch(loader: TrainLoader, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference batch: one slice of the shard per window, stacked (no gathered read)."""
    rows = []
    for w in loader.window_ids(step).tolist():
        shard = int(np.searchsorted(loader._offsets, w, side="right")) - 1
        start = (w - int(loader._offsets[shard])) * loader.context
        rows.append(loader.shards[shard].tokens[start : start + loader.context + 1])
    batch = np.stack(rows).astype(np.int64)
    loader.shards[0].check_ids(batch)
    return torch.from_numpy(batch[:, :-1].copy()), torch.from_numpy(batch[:, 1:].copy())


def loader_run(shard: Path, steps: int, step_s: float, depth: int | None) -> tuple[float, str]:
    """Seconds per step and a digest of every batch; depth None: `per_window_batch` in line,
    -1: `batch(step)` in line, else `prefetch(depth)`."""
    loader = TrainLoader(shard, context=CONTEXT, global_batch=GLOBAL_BATCH, seed=0)
    loader.window_ids(0)  # the permutation, built before timing (once per run in training)
    digest = hashlib.sha256()
    drop_cache(shard)
    t0 = time.perf_counter()
    if depth is None or depth < 0:
        read = per_window_batch if depth is None else TrainLoader.batch
        for step in range(steps):
            x, y = read(loader, step)
            digest.update(x.numpy().tobytes() + y.numpy().tobytes())
            time.sleep(step_s)
    else:
        with loader.prefetch(0, steps, depth=depth) as batches:
            for step in range(steps):
                x, y = batches.get(step)
                digest.update(x.numpy().tobytes() + y.numpy().tobytes())
                time.sleep(step_s)
    return (time.perf_counter() - t0) / steps, digest.hexdigest()


@dataclass(frozen=True)
class ParamsConfig:
    millions: int

    def to_dict(self) -> dict[str, int]:
        return {"params_millions": self.millions}


class Params(torch.nn.Module):
    """`millions` fp32 parameter tensors of 2**20 each (what a checkpoint holds of a model)."""

    def __init__(self, millions: int) -> None:
        super().__init__()
        self.cfg = ParamsConfig(millions)  # state.json's model config
        self.w = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(1 << 20) * 0.01) for _ in range(millions)
        )


def checkpoint_run(
    root: Path, millions: int, steps: int, every: int, mode: str, shard: Path
) -> tuple[float, float]:
    """Seconds of the whole loop, and of it those the training thread spent in `save_step`."""
    model = Params(millions)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()  # the moments exist
    loader = TrainLoader(shard, context=CONTEXT, global_batch=GLOBAL_BATCH, seed=0)
    manager = ckpt.CheckpointManager(
        root,
        model=model,  # type: ignore[arg-type]
        optimizer=optimizer,
        loader=loader,
        cfg=train_config("micro", "gpt2", "tied", total_tokens=512),
        info=CPU,
        config=CheckpointConfig(every=0, keep_last=1, background=mode == "background"),
    )
    a = torch.randn(768, 768)
    blocked = 0.0
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        for _ in range(40):  # the step's compute
            a = torch.tanh(a @ a * 1e-3)
        if mode != "none" and step % every == 0 and step <= steps - every:
            t1 = time.perf_counter()
            manager.save_step(step, None)
            blocked += time.perf_counter() - t1
    manager.close()
    return time.perf_counter() - t0, blocked


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--gib", type=float, default=2.0, help="shard size")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--step-ms", type=float, default=100.0, help="simulated device step")
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ckpt-params", type=int, default=100, help="millions of parameters")
    ap.add_argument("--ckpt-steps", type=int, default=12)
    ap.add_argument("--ckpt-every", type=int, default=4)
    ap.add_argument("--skip-loader", action="store_true")
    ap.add_argument("--skip-checkpoint", action="store_true")
    return ap.parse_args()


def bench_loader(args: argparse.Namespace, shard: Path) -> None:
    """The three loader modes, interleaved over `--rounds`; medians per step."""
    per_window, sync, pre, digests = [], [], [], set()
    for _ in range(args.rounds):  # interleaved
        b, d0 = loader_run(shard, args.steps, args.step_ms / 1e3, None)
        s, d1 = loader_run(shard, args.steps, args.step_ms / 1e3, -1)
        p, d2 = loader_run(shard, args.steps, args.step_ms / 1e3, args.depth)
        per_window.append(b)
        sync.append(s)
        pre.append(p)
        digests |= {d0, d1, d2}
    b, s, p = (statistics.median(x) for x in (per_window, sync, pre))
    print(
        f"loader, cold cache, {args.gib} GiB o200k shard, {GLOBAL_BATCH}x{CONTEXT} per "
        f"step, {args.step_ms:.0f} ms step, {args.rounds} rounds (medians)"
    )
    for name, t in (
        ("per-window, in line", b),
        ("batch(step), in line", s),
        (f"prefetch depth {args.depth}", p),
    ):
        print(
            f"  {name:<24} {t * 1e3:8.1f} ms/step  (beyond the step "
            f"{t * 1e3 - args.step_ms:6.1f} ms)  ratio to per-window {t / b:.3f}"
        )
    print(f"  batches identical: {len(digests) == 1}")


def bench_checkpoint(args: argparse.Namespace, shard: Path, tmp: Path) -> None:
    """No saves, inline saves and background saves, interleaved over `--rounds`; medians."""
    times: dict[str, list[float]] = {}
    blocked: dict[str, list[float]] = {}
    for r in range(args.rounds):  # interleaved
        for mode in ("none", "inline", "background"):
            root = tmp / f"ckpt_{mode}_{r}"
            loop, wait = checkpoint_run(
                root, args.ckpt_params, args.ckpt_steps, args.ckpt_every, mode, shard
            )
            times.setdefault(mode, []).append(loop)
            blocked.setdefault(mode, []).append(wait)
    saves = args.ckpt_steps // args.ckpt_every - 1  # none in the last `every` steps
    size = args.ckpt_params * (1 << 20) * 12 / 1e9
    print(
        f"checkpoint: {args.ckpt_params}M params ({size:.2f} GB on disk), {saves} saves in "
        f"{args.ckpt_steps} steps, {args.rounds} rounds (medians)"
    )
    base = statistics.median(times["none"])
    for mode in ("inline", "background"):
        loop, wait = statistics.median(times[mode]), statistics.median(blocked[mode])
        print(
            f"  {mode:<10} training thread in save_step {wait / saves:6.2f} s per save; "
            f"loop {loop:7.2f} s ({(loop - base) / saves:+6.2f} s per save vs no saves)"
        )
    print(f"  no saves   loop {base:7.2f} s")


def main() -> None:
    args = _parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        shard = make_shard(Path(tmp) / "train.bin", args.gib)
        if not args.skip_loader:
            bench_loader(args, shard)
        if not args.skip_checkpoint:
            bench_checkpoint(args, shard, Path(tmp))


if __name__ == "__main__":
    main()
