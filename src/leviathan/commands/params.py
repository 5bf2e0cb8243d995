"""`leviathan params`: parameter and FLOP accounting of any cell, computed from the model."""

from __future__ import annotations

import argparse
import json
from typing import Any

from leviathan.model.accounting import Accounting, account, overhead
from leviathan.model.config import LEVConfig, model_config
from leviathan.model.variants import VARIANTS
from leviathan.scales import SCALES
from leviathan.values import coerce, parse_assignments
from leviathan.vocab import VOCABS


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "params",
        help="parameter and FLOP accounting of a model, from the code",
        description=(
            "Print parameters (input/LEV, backbone, head, total) and FLOPs per token of one or "
            "more variants at a scale and vocabulary, and the overhead vs tied. "
            "--check-paper recomputes the paper's cost claims."
        ),
    )
    p.add_argument("--scale", default="1.2b", choices=list(SCALES))
    p.add_argument("--vocab", default="o200k_base", help=f"one of {', '.join(VOCABS)}")
    p.add_argument(
        "--variant",
        action="append",
        help=f"one of {', '.join(VARIANTS)} or 'all' (repeatable; default: leviathan and tied)",
    )
    p.add_argument(
        "--vocab-size", type=int, help="model vocabulary size (default: tokenizer's n_vocab)"
    )
    p.add_argument("--seq-len", type=int, help="context for attention FLOPs (default: the scale's)")
    p.add_argument(
        "--check-paper", action="store_true", help="compare with the paper's cost claims"
    )
    p.add_argument(
        "--lev",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a LEV config value for every variant (repeatable), e.g. knot_scale=learned, "
        "seed_bias=false, basis=normalised (docs/method.md §6)",
    )
    p.add_argument(
        "--init-stats",
        action="store_true",
        help="LEV's health statistics at initialisation (builds the leviathan model on the CPU)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


# each LEV reconstruction choice other than the default (docs/method.md §6), alone
RECON_CHOICES = (
    ("seed_bias", False),
    ("basis", "normalised"),
    ("knot_scale", "learned"),
)


def _lev_overrides(items: list[str]) -> dict[str, Any]:
    return coerce(LEVConfig, parse_assignments(items, "--lev"), "--lev")


def recon_effects(scale: str, vocab: str, vocab_size: int | None) -> list[dict[str, Any]]:
    """LEV's parameters under its defaults and under each other RECON choice alone, counted
    from the model (the constant part and the part per D: LEV's count is a + b D)."""

    # two widths the scale's heads divide (its own D and twice it), so every scale works
    width = model_config(scale, vocab, "leviathan", vocab_size=vocab_size).d_model

    def lev_params(overrides: dict[str, Any], d_model: int) -> int:
        cfg = model_config(
            scale,
            vocab,
            "leviathan",
            vocab_size=vocab_size,
            overrides={"lev": overrides, "d_model": d_model},
        )
        return account(cfg).input_params

    def split(overrides: dict[str, Any]) -> tuple[int, int]:
        at_d, at_2d = lev_params(overrides, width), lev_params(overrides, 2 * width)
        per_d = (at_2d - at_d) // width
        return at_d - width * per_d, per_d

    base = split({})
    rows = [{"choice": "defaults", "constant": base[0], "per_d": base[1], "change": 0}]
    for key, value in RECON_CHOICES:
        a, b = split({key: value})
        rows.append({"choice": f"{key}={value}", "constant": a, "per_d": b, "change": a - base[0]})
    return rows


def _variants(requested: list[str] | None) -> list[str]:
    names = requested or ["leviathan", "tied"]
    if "all" in names:
        return list(VARIANTS)
    for name in names:
        if name not in VARIANTS:
            raise ValueError(f"unknown variant {name!r}: use one of {', '.join(VARIANTS)} or all")
    return list(dict.fromkeys(names))


def _m(n: float) -> str:
    return f"{n / 1e6:,.3f}M"


def _table(rows: dict[str, Accounting], tied: Accounting) -> str:
    head = (
        f"{'variant':<13} {'input':>12} {'backbone':>12} {'head':>12} {'total':>12} "
        f"{'fwd GFLOP/tok':>14} {'train GFLOP/tok':>16} {'params vs tied':>15} {'FLOPs vs tied':>14}"
    )
    lines = [head, "-" * len(head)]
    for name, a in rows.items():
        o = overhead(a, tied)
        lines.append(
            f"{name:<13} {_m(a.input_params):>12} {_m(a.backbone_params):>12} "
            f"{_m(a.head_params):>12} {_m(a.total_params):>12} {a.forward_flops / 1e9:>14.4f} "
            f"{a.train_flops / 1e9:>16.4f} {o['params']:>+15.3%} {o['train_flops']:>+14.3%}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.check_paper:
        from leviathan.report.cost_checks import cost_checks

        checks = cost_checks(args.vocab)
        if args.json:
            print(json.dumps([c.to_dict() for c in checks], indent=2))
            return 0
        for c in checks:
            status = "ok " if c.ok else "DIFF"
            print(
                f"[{status}] {c.claim}: paper {c.shown(c.paper)}, ours {c.shown(c.ours)} "
                f"(ours {c.rel_diff:+.2%} relative)"
            )
            if c.note and not c.ok:
                print(f"       why: {c.note}")
        return 0

    lev = _lev_overrides(args.lev)
    if args.init_stats:
        return _init_stats(args, lev)

    def acc(variant: str) -> Accounting:
        overrides = {"lev": lev} if lev else None
        cfg = model_config(
            args.scale, args.vocab, variant, vocab_size=args.vocab_size, overrides=overrides
        )
        return account(cfg, args.seq_len)

    rows = {name: acc(name) for name in _variants(args.variant)}
    tied = rows.get("tied") or acc("tied")
    effects = recon_effects(args.scale, args.vocab, args.vocab_size)
    if args.json:
        out = {
            name: {**a.to_dict(), "overhead_vs_tied": overhead(a, tied)} for name, a in rows.items()
        }
        doc = {"scale": args.scale, "vocab": args.vocab, "lev": lev, "variants": out}
        print(json.dumps({**doc, "lev_recon_choices": effects}, indent=2))
        return 0
    first = next(iter(rows.values()))
    print(
        f"scale {args.scale}, vocab {args.vocab} (V={first.vocab_size:,}), D={first.d_model}, "
        f"L={first.n_layers}, FLOPs at T={first.seq_len} (train = 3 x forward)"
    )
    print(_table(rows, tied))
    if lev:
        print("LEV config values: " + ", ".join(f"{k}={v}" for k, v in lev.items()))
    print("\nLEV's parameters under each reconstruction choice alone (docs/method.md §6):")
    for row in effects:
        print(
            f"  {row['choice']:<20} {row['constant']:>12,} + {row['per_d']} D"
            f"  ({row['change']:+,} vs the defaults)"
        )
    return 0


def _init_stats(args: argparse.Namespace, lev: dict[str, Any]) -> int:
    """`--init-stats`: LEV's health at initialisation (`leviathan.model.lev_health`), the
    model seeded as the trainer seeds a run with seed 0."""
    import torch

    from leviathan.model.language_model import build_model
    from leviathan.model.lev_health import model_health

    cfg = model_config(
        args.scale,
        args.vocab,
        "leviathan",
        vocab_size=args.vocab_size,
        overrides={"lev": lev} if lev else None,
    )
    torch.manual_seed(0)
    stats = model_health(build_model(cfg))
    assert stats is not None
    if args.json:
        print(json.dumps({"scale": args.scale, "vocab": args.vocab, "lev": lev, **stats}, indent=2))
        return 0
    print(
        f"LEV at initialisation, scale {args.scale}, vocab {args.vocab}, {stats['ids']} ids "
        "spread over the vocabulary (docs/method.md §6)"
    )
    print(f"{'head':>4} {'near 0 or 1':>12} {'ln std M':>10} {'RMS W_out_l M_l':>16}")
    for head, (near, log_std, rms) in enumerate(
        zip(stats["near_ends"], stats["log_std_M"], stats["rms_head"], strict=True)
    ):
        print(f"{head:>4} {near:>12.4%} {log_std:>10.4f} {rms:>16.4g}")
    print(
        f"embeddings RMS {stats['emb_rms']:.4g}, output head rows RMS {stats['head_row_rms']:.4g} "
        f"(ratio {stats['emb_vs_head_rms']:.4g}); mean pairwise cosine {stats['mean_cosine']:.4f}"
    )
    return 0
