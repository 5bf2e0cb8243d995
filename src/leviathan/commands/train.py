"""`leviathan train`: train one cell from token shards (works under torchrun too)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from leviathan.cost.memory import fitting_micro_batch
from leviathan.io import write_json
from leviathan.layout import out_of_memory_file
from leviathan.model.config import VARIANT_NAMES
from leviathan.scales import SCALES
from leviathan.train.config import RuntimeConfig, train_config
from leviathan.train.errors import KERNEL_CHECK_EXIT, OUT_OF_MEMORY_EXIT, NonFiniteLoss, OutOfMemory
from leviathan.train.exit_record import amend_reason
from leviathan.values import flatten, load_yaml, parse_assignments


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "train",
        help="train one cell (scale x vocab x variant x seed) from token shards",
        description=(
            "Train one experiment cell. Rerunning the same command resumes from the newest "
            "intact checkpoint in RUN_DIR/checkpoints. SIGTERM/SIGUSR1 and Ctrl-C write a "
            "checkpoint and exit with 128+signal (a second Ctrl-C stops at once); a non-finite "
            "loss exits with 3, the device running out of memory with 4 (one line naming the "
            "micro_batch to set), a kernel failing its self-check under runtime.kernel_check: "
            "error with 5. Multi-GPU: "
            "python -m leviathan.torchrun --nproc-per-node N -m leviathan.cli train ... "
            "(torchrun's arguments; exits 128+signal on preemption too)"
        ),
    )
    p.add_argument("--scale", required=True, choices=list(SCALES))
    p.add_argument("--vocab", required=True)
    p.add_argument("--variant", required=True, choices=list(VARIANT_NAMES))
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
        help=(
            "override a runtime value (a block's keys dotted, e.g. checkpoint.every=500): "
            f"{', '.join(flatten(asdict(RuntimeConfig())))}"
        ),
    )
    p.set_defaults(func=run)


def _config_file(path: Path) -> dict[str, dict[str, Any]]:
    """A `--config` file's `train:` and `runtime:` sections."""
    if not path.is_file():
        raise FileNotFoundError(f"--config {path}: no such file")
    content = load_yaml(path.read_text(), str(path)) or {}
    if not isinstance(content, dict):
        raise ValueError(f"{path}: expected a mapping with train: and/or runtime: sections")
    if unknown := sorted(set(content) - {"train", "runtime"}):
        raise ValueError(f"{path}: unknown section(s) {unknown}: use train: and runtime:")
    for section in ("train", "runtime"):
        if not isinstance(content.get(section) or {}, dict):
            raise ValueError(f"{path}: {section}: must be a mapping of KEY: VALUE")
    return {section: dict(content.get(section) or {}) for section in ("train", "runtime")}


def runtime_config(
    from_file: dict[str, Any], assignments: list[str], config: Path | None
) -> RuntimeConfig:
    """The run's runtime: a `--config` file's `runtime:` section, then the `--runtime`
    assignments. A block's keys merge one by one (`--runtime checkpoint.every=2` leaves the
    file's other checkpoint keys as they are, and so does a block written whole on the command
    line)."""
    values = {**flatten(from_file), **flatten(parse_assignments(assignments, "--runtime"))}
    where = f"{config} runtime: / --runtime" if config else "--runtime"
    return RuntimeConfig.from_dict(values, where)


def _resume_hint(run_dir: Path) -> str:
    from leviathan.checkpoint.files import checkpoints_dir
    from leviathan.checkpoint.store import latest_checkpoint

    ref = latest_checkpoint(checkpoints_dir(run_dir))
    return f"resume from {ref.path}" if ref else "no checkpoint yet: a rerun starts afresh"


def _with_fitting_micro_batch(exc: OutOfMemory, run_dir: Path) -> OutOfMemory:
    """The refusal naming the largest micro-batch the memory model (leviathan.cost.memory)
    predicts to fit the GPU that ran out, where it knows that GPU; the run's out-of-memory
    record rewritten with it."""
    import torch

    at = exc.at
    device = torch.device(at.device)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    fitting = fitting_micro_batch(
        at.model_cfg, gpu, (at.per_rank, at.micro_batch, at.ranks), at.parallel
    )
    if fitting is None or fitting >= at.micro_batch:
        return exc
    refined = exc.with_fitting(fitting)
    write_json(out_of_memory_file(run_dir), refined.record)
    amend_reason(run_dir, str(refined))  # the exit record says what stderr and the record say
    return refined


def run(args: argparse.Namespace) -> int:
    from leviathan.model.kernel_check import KernelCheckFailed
    from leviathan.train.preemption import Preempted
    from leviathan.train.trainer import train

    # the trainer's WARNINGs (a damaged checkpoint or a torn metrics line set aside) and its
    # INFO line of a rerun that finds the run finished, one line each
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    logging.getLogger("leviathan.train").setLevel(logging.INFO)
    file_cfg = _config_file(args.config) if args.config else {}
    train_values = {**file_cfg.get("train", {}), **parse_assignments(args.set, "--set")}
    where = f"{args.config} train: / --set" if args.config else "--set"
    cfg = train_config(args.scale, args.vocab, args.variant, where, seed=args.seed, **train_values)
    runtime = runtime_config(file_cfg.get("runtime", {}), args.runtime, args.config)
    try:
        result = train(
            cfg, train_bins=args.train, val_bin=args.val, run_dir=args.run_dir, runtime=runtime
        )
    except Preempted as exc:
        print(f"leviathan train: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:  # a second Ctrl-C (or one before training began)
        print(
            f"leviathan train: stopped at once by Ctrl-C; {_resume_hint(args.run_dir)}",
            file=sys.stderr,
        )
        return 128 + signal.SIGINT
    except NonFiniteLoss as exc:
        print(f"leviathan train: error: {exc}", file=sys.stderr)
        return 3
    except OutOfMemory as exc:
        exc = _with_fitting_micro_batch(exc, args.run_dir)
        print(f"leviathan train: error: {exc}", file=sys.stderr)
        return OUT_OF_MEMORY_EXIT
    except KernelCheckFailed as exc:
        print(f"leviathan train: error: {exc}", file=sys.stderr)
        return KERNEL_CHECK_EXIT
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
