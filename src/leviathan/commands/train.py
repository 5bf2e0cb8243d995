"""`leviathan train`: train one cell from token shards (works under torchrun too)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from leviathan.model.variants import VARIANTS
from leviathan.scales import SCALES
from leviathan.train.config import RuntimeConfig, train_config


def _parse_set(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE (e.g. --set lr=3e-4)")
        out[key] = yaml.safe_load(value)
    return out


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "train",
        help="train one cell (scale x vocab x variant x seed) from token shards",
        description=(
            "Train one experiment cell. Rerunning the same command resumes from the newest "
            "complete checkpoint in RUN_DIR/checkpoints. SIGTERM/SIGUSR1 write a checkpoint "
            "and exit with 128+signal. Multi-GPU: torchrun --nproc-per-node N -m leviathan.cli train ..."
        ),
    )
    p.add_argument("--scale", required=True, choices=list(SCALES))
    p.add_argument("--vocab", required=True)
    p.add_argument("--variant", required=True, choices=list(VARIANTS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train", nargs="+", required=True, type=Path, help="train .bin shard(s)")
    p.add_argument("--val", type=Path, help="validation .bin shard (periodic val loss)")
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--config", type=Path, help="YAML with `train:` and/or `runtime:` sections")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a train config value (repeatable), e.g. --set lr=3e-4",
    )
    p.add_argument(
        "--runtime",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a runtime value: {', '.join(f.name for f in fields(RuntimeConfig))}",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from leviathan.train.trainer import NonFiniteLoss, Preempted, train

    file_cfg: dict[str, Any] = yaml.safe_load(args.config.read_text()) if args.config else {}
    unknown = sorted(set(file_cfg) - {"train", "runtime"})
    if unknown:
        raise ValueError(f"{args.config}: unknown section(s) {unknown}: use train: and runtime:")
    train_values = {**(file_cfg.get("train") or {}), **_parse_set(args.set)}
    cfg = train_config(args.scale, args.vocab, args.variant, seed=args.seed, **train_values)
    runtime_values = {**(file_cfg.get("runtime") or {}), **_parse_set(args.runtime)}
    known = {f.name for f in fields(RuntimeConfig)}
    bad = sorted(set(runtime_values) - known)
    if bad:
        raise ValueError(f"unknown runtime key(s) {bad}: valid keys are {sorted(known)}")
    runtime = RuntimeConfig(**runtime_values)
    try:
        result = train(
            cfg, train_bins=args.train, val_bin=args.val, run_dir=args.run_dir, runtime=runtime
        )
    except Preempted as exc:
        print(f"leviathan train: {exc}", file=sys.stderr)
        return exc.exit_code
    except NonFiniteLoss as exc:
        print(f"leviathan train: error: {exc}", file=sys.stderr)
        return 3
    print(
        json.dumps(
            {
                "final_checkpoint": str(result.final_checkpoint),
                "steps": result.steps,
                "start_step": result.start_step,
                "train_loss": result.final_train_loss,
                "val_loss": result.final_val_loss,
            }
        )
    )
    return 0
