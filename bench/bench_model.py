"""Model benchmark: leviathan vs tied forward+backward on the same backbone, side by side.

Both models are built from the same preset and timed in alternation in one process, on the
same batches, so machine noise hits both; the figure that matters is the ratio. Token ids
follow a Zipf law over the vocabulary (s=1.1, shuffled ranks), like real text, so the
number of distinct ids per batch (what LEV evaluates) is realistic; it is printed.
Also times the full-vocabulary `materialize()` of LEV (o200k at D=1024, RECON defaults).

    python bench/bench_model.py [--presets micro tiny] [--repeats 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from leviathan.model import build_model, model_config


def zipf_batch(
    vocab: int, batch: int, seq: int, gen: torch.Generator, s: float = 1.1
) -> torch.Tensor:
    ranks = torch.arange(1, vocab + 1, dtype=torch.float64)
    probs = ranks.pow(-s)
    perm = torch.randperm(vocab, generator=gen)
    draws = torch.multinomial(
        probs / probs.sum(), batch * (seq + 1), replacement=True, generator=gen
    )
    return perm[draws].view(batch, seq + 1)


def step(model: torch.nn.Module, ids: torch.Tensor) -> None:
    model.zero_grad(set_to_none=True)
    model.loss(ids[:, :-1], ids[:, 1:]).backward()


def compare(preset: str, vocab: str, batch: int, repeats: int) -> dict:
    torch.manual_seed(0)
    models = {v: build_model(model_config(preset, vocab, v)) for v in ("tied", "leviathan")}
    cfg = models["tied"].cfg
    gen = torch.Generator().manual_seed(0)
    batches = [zipf_batch(cfg.vocab_size, batch, cfg.max_seq_len, gen) for _ in range(repeats)]
    for m in models.values():  # warm-up
        step(m, batches[0])
    times: dict[str, list[float]] = {v: [] for v in models}
    for ids in batches:
        for name, m in models.items():
            t0 = time.perf_counter()
            step(m, ids)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    distinct = statistics.mean(len(torch.unique(b[:, :-1])) for b in batches)
    return {
        "preset": preset,
        "vocab": vocab,
        "batch": [batch, cfg.max_seq_len],
        "distinct_ids_per_batch": distinct,
        "tied_s": med["tied"],
        "leviathan_s": med["leviathan"],
        "ratio": med["leviathan"] / med["tied"],
    }


def materialize_time(vocab: str, d_model: int, repeats: int) -> dict:
    cfg = model_config("400m", vocab, "leviathan").with_(d_model=d_model)
    from leviathan.model.lev import LEV

    lev = LEV(cfg.vocab_size, d_model, cfg.lev_base, cfg.lev)
    lev.materialize()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        table = lev.materialize()
        times.append(time.perf_counter() - t0)
    return {
        "vocab": vocab,
        "V": cfg.vocab_size,
        "D": d_model,
        "shape": list(table.shape),
        "seconds": statistics.median(times),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--presets", nargs="+", default=["micro", "tiny"])
    ap.add_argument("--vocab", default="gpt2")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--materialize-repeats", type=int, default=3)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    results = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "step": [compare(p, args.vocab, args.batch, args.repeats) for p in args.presets],
        "materialize": materialize_time("o200k_base", 1024, args.materialize_repeats),
    }
    for r in results["step"]:
        print(
            f"{r['preset']:>6} {r['vocab']} batch {r['batch'][0]}x{r['batch'][1]} "
            f"({r['distinct_ids_per_batch']:.0f} distinct ids): tied {r['tied_s'] * 1e3:.1f} ms, "
            f"leviathan {r['leviathan_s'] * 1e3:.1f} ms, ratio {r['ratio']:.3f}"
        )
    m = results["materialize"]
    print(f"materialize {m['vocab']} V={m['V']} D={m['D']}: {m['seconds']:.2f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
