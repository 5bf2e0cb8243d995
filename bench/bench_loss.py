"""The CPU rule's loss against torch's own and against chunks of all V, on one thread.

Three ways to the mean cross-entropy of N tokens under a [V, D] head, forward + backward (d
hidden, d head) and forward alone (per-token losses, what evaluation asks), timed in rounds
that run each once in turn (medians over rounds: machine noise hits all alike; the figures are
ratios):

  torch    `F.cross_entropy(h @ w.T, t)` with autograd: all N x V logits in memory;
  chunks   the chunked loss of all V classes per chunk of `--chunk-elems` logits (128 MiB: what
           the CPU ran before the tiles; the GPU rule's code, here under the CPU rule);
  tiles    `linear_cross_entropy` / `token_losses` under the CPU rule (2 MiB tiles).

Shapes: the default run's micro steps (8 x 64 tokens, D 64) at the three vocabularies.

    python bench/bench_loss.py [--repeats 5] [--threads 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Callable

import torch
import torch.nn.functional as F

# run as a script from the repository root: bench/ is on the path
from bench_lev import _time_rounds

from leviathan.device import forced_policy
from leviathan.model import loss

VOCABS = {"gpt2": 50_257, "cl100k_base": 100_277, "o200k_base": 200_019}


def _train_parts(
    h: torch.Tensor, w: torch.Tensor, t: torch.Tensor, chunk_elems: int
) -> dict[str, Callable[[], object]]:
    def torch_ref() -> object:
        return torch.autograd.grad(F.cross_entropy(h @ w.t(), t), (h, w))

    def chunks() -> object:
        return torch.autograd.grad(loss._LinearCrossEntropy.apply(h, w, t, chunk_elems), (h, w))

    def tiles() -> object:
        return torch.autograd.grad(loss.linear_cross_entropy(h, w, t), (h, w))

    return {"torch": torch_ref, "chunks": chunks, "tiles": tiles}


def _eval_parts(
    h: torch.Tensor, w: torch.Tensor, t: torch.Tensor, chunk_elems: int
) -> dict[str, Callable[[], object]]:
    hd, wd = h.detach(), w.detach()

    def torch_ref() -> object:
        with torch.no_grad():
            return F.cross_entropy(hd @ wd.t(), t, reduction="none")

    def chunks() -> object:
        out = torch.zeros(len(t))
        for rows, _, losses in loss._scored_chunks(hd, wd, t, chunk_elems):
            out[rows] = losses
        return out

    def tiles() -> object:
        return loss.token_losses(hd, wd, t)

    return {"torch": torch_ref, "chunks": chunks, "tiles": tiles}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=8 * 64)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--chunk-elems", type=int, default=1 << 25)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=str, default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    with forced_policy("cpu"):
        for vocab, V in VOCABS.items():
            gen = torch.Generator().manual_seed(0)
            h = torch.randn(args.tokens, args.d_model, generator=gen).requires_grad_()
            w = (torch.randn(V, args.d_model, generator=gen) * 0.05).requires_grad_()
            t = torch.randint(0, V, (args.tokens,), generator=gen)
            for what, parts in (
                ("fwd+bwd", _train_parts(h, w, t, args.chunk_elems)),
                ("fwd", _eval_parts(h, w, t, args.chunk_elems)),
            ):
                ms = {k: 1e3 * v for k, v in _time_rounds(parts, args.repeats).items()}
                rows.append({"vocab": vocab, "V": V, "pass": what, **ms})
                print(
                    f"{vocab:12s} {what:8s} torch {ms['torch']:8.1f} ms  chunks "
                    f"{ms['chunks']:8.1f} ms  tiles {ms['tiles']:8.1f} ms  tiles/chunks "
                    f"{ms['tiles'] / ms['chunks']:.3f}  tiles/torch {ms['tiles'] / ms['torch']:.3f}",
                    flush=True,
                )
    if args.json:
        meta = {"threads": args.threads, "tokens": args.tokens, "d_model": args.d_model}
        meta["machine"] = platform.processor() or platform.machine()
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
