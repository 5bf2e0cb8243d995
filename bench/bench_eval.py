"""Evaluation benchmark: evaluation tokens/s vs the training forward pass of the same model.

In one process, on the same model, the same batches (real token shards) and the same thread
count, alternating batch by batch so machine noise hits both:
  * training forward: `model.train()`, gradients enabled, `loss = model(x, y)` (what the
    trainer's step runs before backward: LEV on the batch's distinct ids, the chunked
    cross-entropy that also prepares its gradients);
  * evaluation kernel: `EvalModel.token_losses(x, y)` (input table materialised once, no
    autograd), the per-token losses every evaluation is built on;
  * evaluation end to end: `evaluate_shard` over the validation shard (window loading, the
    kernel, per-id accumulation), the `leviathan eval val` pass;
  * the lm-eval adapter: `LeviathanLM._loglikelihood_tokens` on one request per window (the
    first half as context, the rest as continuation: the same T tokens through the model;
    logits only for the continuation), what lm-eval's tasks run through our model;
  * for reference, the trainer's own validation path: `model.token_losses(x, y)` under
    no_grad on the training model (LEV run per batch, the training loss's chunk size).
Ratio = evaluation tokens/s / training-forward tokens/s (target >= 1.0). The one-off cost of
materialising the input table is reported separately.

    python bench/bench_eval.py [--shards DIR] [--presets micro tiny] [--variants tied leviathan]
                               [--repeats 10] [--threads N] [--json out.json]
Without --shards, the embedded corpus is fetched and tokenized with gpt2 into a temp dir.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from leviathan.data.loader import TrainLoader
from leviathan.eval.checkpoint import Checkpoint, EvalModel
from leviathan.eval.lm_eval_adapter import LeviathanLM
from leviathan.eval.perplexity import evaluate_shard
from leviathan.train.config import train_config
from leviathan.train.trainer import build_cell_model

BATCH = {"micro": 16, "tiny": 8, "200m": 8, "400m": 8, "1.2b": 4}


def shards(path: str | None, vocab: str) -> Path:
    if path:
        return Path(path)
    from leviathan.data.fetch import fetch_embedded
    from leviathan.data.prepare import tokenize_corpus

    tmp = Path(tempfile.mkdtemp(prefix="bench_eval_"))
    fetch_embedded(tmp / "corpus")
    tokenize_corpus(tmp / "corpus", vocab, tmp / "tokens", progress=False)
    return tmp / "tokens"


def adapter(em: EvalModel, vocab: str, context: int, batch: int) -> LeviathanLM:
    """The lm-eval model around an EvalModel, as `leviathan eval lm-eval` builds it."""
    state = {"train_config": {"vocab": vocab, "context": context}}
    ckpt = Checkpoint(Path("untrained"), "", state, em.cfg)
    return LeviathanLM(loaded=(ckpt, em), batch_size=batch)


def requests(x: torch.Tensor, y: torch.Tensor) -> list[tuple[None, list[int], list[int]]]:
    """One lm-eval loglikelihood request per row: the first half of the window as context,
    the rest as the continuation (the model sees the same T tokens as the other paths)."""
    half = x.shape[1] // 2
    return [
        (None, r[:half].tolist(), [*r[half:].tolist(), int(t[-1])])
        for r, t in zip(x, y, strict=True)
    ]


def measure(
    preset: str, vocab: str, variant: str, data: Path, repeats: int, val_windows: int
) -> dict:
    cfg = train_config(preset, vocab, variant)
    model = build_cell_model(cfg)
    B, T = BATCH.get(preset, 8), cfg.context
    loader = TrainLoader([data / "train.bin"], context=T, global_batch=B, seed=0)
    batches = [loader.batch(s) for s in range(repeats + 1)]
    t0 = time.perf_counter()
    em = EvalModel(model, precision="fp32")
    materialize_s = time.perf_counter() - t0
    lm = adapter(em, vocab, T, B)
    train_s, eval_s, trainer_val_s, lm_s = [], [], [], []
    for i, (x, y) in enumerate(batches):
        model.train()
        t0 = time.perf_counter()
        loss = model(x, y)
        t1 = time.perf_counter()
        del loss
        em.token_losses(x, y)
        t2 = time.perf_counter()
        model.eval()
        model.token_losses(x, y)
        t3 = time.perf_counter()
        lm._loglikelihood_tokens(requests(x, y), disable_tqdm=True)
        t4 = time.perf_counter()
        if i:  # the first batch is warm-up
            train_s.append(t1 - t0)
            eval_s.append(t2 - t1)
            trainer_val_s.append(t3 - t2)
            lm_s.append(t4 - t3)
    tokens = B * T
    train_tok_s = tokens / statistics.median(train_s)
    kernel_tok_s = tokens / statistics.median(eval_s)
    lm_tok_s = tokens / statistics.median(lm_s)
    stats = evaluate_shard(
        em, data / "val.bin", vocab=vocab, context=T, batch_size=B, max_windows=val_windows
    )
    e2e_tok_s = stats.n_targets / stats.seconds
    return {
        "preset": preset,
        "vocab": vocab,
        "variant": variant,
        "batch": [B, T],
        "train_forward_tok_s": train_tok_s,
        "eval_kernel_tok_s": kernel_tok_s,
        "eval_end_to_end_tok_s": e2e_tok_s,
        "ratio_kernel": kernel_tok_s / train_tok_s,
        "ratio_end_to_end": e2e_tok_s / train_tok_s,
        "lm_eval_adapter_tok_s": lm_tok_s,
        "ratio_lm_eval_adapter": lm_tok_s / train_tok_s,
        "trainer_val_tok_s": tokens / statistics.median(trainer_val_s),
        "eval_tokens": stats.n_targets,
        "materialize_s": materialize_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--shards", help="directory with train.bin and val.bin (default: embedded corpus)"
    )
    ap.add_argument("--vocab", default="gpt2")
    ap.add_argument("--presets", nargs="+", default=["micro", "tiny"])
    ap.add_argument("--variants", nargs="+", default=["tied", "leviathan"])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument(
        "--val-windows", type=int, default=64, help="validation windows of the end-to-end pass"
    )
    ap.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    data = shards(args.shards, args.vocab)
    load_before = os.getloadavg()[0]
    rows = [
        measure(p, args.vocab, v, data, args.repeats, args.val_windows)
        for p in args.presets
        for v in args.variants
    ]
    results = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "load_avg_1m": [load_before, os.getloadavg()[0]],
        "rows": rows,
    }
    print(
        f"threads {results['threads']}, load {load_before:.2f} -> {results['load_avg_1m'][1]:.2f}"
    )
    for r in rows:
        print(
            f"{r['preset']:>6} {r['variant']:<10} batch {r['batch'][0]}x{r['batch'][1]}: train fwd "
            f"{r['train_forward_tok_s']:,.0f} tok/s | eval kernel {r['eval_kernel_tok_s']:,.0f} tok/s "
            f"(x{r['ratio_kernel']:.2f}) | eval end to end {r['eval_end_to_end_tok_s']:,.0f} tok/s "
            f"(x{r['ratio_end_to_end']:.2f}) | lm-eval adapter {r['lm_eval_adapter_tok_s']:,.0f} "
            f"tok/s (x{r['ratio_lm_eval_adapter']:.2f}) | trainer val path {r['trainer_val_tok_s']:,.0f} tok/s "
            f"| materialize {r['materialize_s'] * 1e3:.1f} ms"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
