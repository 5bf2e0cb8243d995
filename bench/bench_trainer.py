"""Trainer benchmark: the trainer's step time vs a bare PyTorch loop, and leviathan vs tied.

Side by side in one process, on the same model, the same batches (real token shards) and the
same thread count:
  * bare loop: batch -> loss -> backward -> clip -> AdamW step, nothing else;
  * the trainer (`leviathan.train.trainer.train`), checkpoints and validation off, metrics
    JSONL and LR schedule on: its per-step times come from its own metrics log.
Figures are medians over steps (the first steps are warm-up and dropped); what matters are
the ratios. The runs alternate (bare, trainer, bare, trainer, ...) so machine noise hits both.

    python bench/bench_trainer.py --shards DIR_WITH_train.bin [--preset micro] [--steps 30]
Without --shards, the embedded corpus is fetched and tokenized with gpt2 into a temp dir.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from leviathan.data.loader import TrainLoader
from leviathan.train.config import CheckpointConfig, RuntimeConfig, ValidationConfig, train_config
from leviathan.train.metrics_log import read_metrics
from leviathan.train.trainer import build_cell_model, train

WARMUP = 3


def bare_loop(cfg, bins: list[Path], steps: int) -> list[float]:
    model = build_cell_model(cfg)
    loader = TrainLoader(bins, context=cfg.context, global_batch=cfg.global_batch, seed=cfg.seed)
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=0.0
    )
    n_micro = cfg.global_batch // cfg.micro_batch
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        x, y = loader.batch(step)
        for i in range(0, x.shape[0], cfg.micro_batch):
            (model(x[i : i + cfg.micro_batch], y[i : i + cfg.micro_batch]) / n_micro).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    return times[WARMUP:]


def trainer_steps(cfg, bins: list[Path], work: Path) -> list[float]:
    run = Path(tempfile.mkdtemp(dir=work))
    runtime = RuntimeConfig(
        progress=False, validation=ValidationConfig(every=0), checkpoint=CheckpointConfig(every=0)
    )
    train(cfg, train_bins=bins, val_bin=None, run_dir=run, runtime=runtime)
    return [r["step_s"] for r in read_metrics(run / "metrics.jsonl", "train")][WARMUP:]


def prepare_shards(work: Path) -> Path:
    from leviathan.data.fetch import fetch_embedded
    from leviathan.data.prepare import tokenize_corpus

    fetch_embedded(work / "corpus")
    tokenize_corpus(work / "corpus", "gpt2", work / "tok", progress=False)
    return work / "tok"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--shards", type=Path)
    ap.add_argument("--preset", default="micro")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shards = args.shards or prepare_shards(work)
        bins = [shards / "train.bin"]
        results = {}
        for variant in ("tied", "leviathan"):
            cfg = train_config(args.preset, "gpt2", variant)
            cfg = cfg.with_(total_tokens=cfg.tokens_per_step * args.steps)
            bare: list[float] = []
            trained: list[float] = []
            for _ in range(args.rounds):
                bare += bare_loop(cfg, bins, args.steps)
                trained += trainer_steps(cfg, bins, work)
            b, t = statistics.median(bare), statistics.median(trained)
            results[variant] = {
                "bare_step_s": b,
                "trainer_step_s": t,
                "trainer_vs_bare_tokens_per_s": b / t,
                "trainer_tokens_per_s": cfg.tokens_per_step / t,
            }
            print(
                f"{args.preset} {variant:>9}: bare {b * 1e3:.1f} ms/step, trainer {t * 1e3:.1f} ms/step, "
                f"trainer/bare tokens/s {b / t:.3f}"
            )
        ratio = results["leviathan"]["trainer_step_s"] / results["tied"]["trainer_step_s"]
        results["leviathan_vs_tied_step_time"] = ratio
        print(f"{args.preset}: leviathan vs tied step time through the trainer: {ratio:.3f}")
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
