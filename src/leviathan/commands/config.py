"""`leviathan config show`: the workflow config as `snakemake [--configfile F]` resolves it, a
cell's settings, and the study's plan."""

from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import asdict

import yaml

from leviathan import layout
from leviathan.cells import Cell, config_cells
from leviathan.study.cluster import resources, scale_resources
from leviathan.study.config import resolve, stand_in_files
from leviathan.study.launch import launch_env, train_command
from leviathan.study.resolve import cell_recipe, cell_train_config
from leviathan.study.sweep import cell_variant
from leviathan.train.config import workflow_runtime
from leviathan.vocab import get_vocab


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cfg = sub.add_parser("config", help="the workflow config as the workflow resolves it")
    csub = cfg.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    show = csub.add_parser(
        "show",
        help="print the resolved config, then the study's plan (or one cell's settings)",
        description="Print the config exactly as `snakemake [--configfile F]` resolves it (a config file "
        "replaces the default one; schema and code defaults filled), then the plan of its studies: "
        "cells, tokens, disk per artifact, GPU-hours at a stated MFU. With --cell: that cell's resolved "
        "training config, runtime, resources and training command.",
    )
    configfile_arg(show)
    show.add_argument(
        "--cell", metavar="SCALE/VOCAB/VARIANT/seedN", help="one cell's resolved settings"
    )
    show.add_argument(
        "--mfu",
        type=float,
        default=None,
        help="a stated model FLOPs utilisation for GPU-hours (e.g. 0.4, what mature stacks "
        "publish for ~1B models); default: each cell's roofline prediction",
    )
    show.add_argument(
        "--no-memory",
        action="store_true",
        help="skip tracing each job's GPU memory (and the check that each micro-batch fits): "
        "seconds instead of about 3 s per cell",
    )
    show.add_argument(
        "--download-mb-s",
        type=float,
        default=None,
        metavar="MB_S",
        help="the corpus download's bandwidth the budget assumes, in MB/s (default: "
        "leviathan.cost.budget.DOWNLOAD_MB_S)",
    )
    show.add_argument(
        "--json", action="store_true", help="the resolved config (or cell) as JSON, no plan"
    )
    show.set_defaults(func=run_show)


def configfile_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--configfile",
        action="append",
        default=[],
        metavar="FILE",
        help=f"as snakemake's --configfile (default: {layout.DEFAULT_CONFIG})",
    )


def configured_cell(config: dict, key: str) -> Cell:  # type: ignore[type-arg]
    """The cell `--cell key` names, refused (one line) where no configured study has it."""

    try:
        scale, vocab, variant, seed = layout.parse_cell_key(key)
    except ValueError as exc:
        raise ValueError(f"--cell {exc}") from None
    cell = Cell(scale, get_vocab(vocab).name, variant, seed, layout.config_results_key(config))
    if cell not in config_cells(config):
        raise ValueError(
            f"{cell.key} is not a cell of the configured studies ({', '.join(config['studies'])})"
        )
    return cell


def run_show(args: argparse.Namespace) -> int:

    from leviathan.cost.plan import study_plans
    from leviathan.cost.plan_text import render_plan

    config = resolve(args.configfile)
    mfu = args.mfu
    if args.cell:
        cell = configured_cell(config, args.cell)
        out = cell_settings(config, cell, mfu, memory=not args.no_memory)
        print(
            json.dumps(out, indent=2) if args.json else yaml.safe_dump(out, sort_keys=False), end=""
        )
        return 0
    if args.json:
        print(json.dumps(config, indent=2))
        return 0
    files = " ".join(args.configfile) or layout.DEFAULT_CONFIG
    plans = study_plans(config, mfu)
    print(budget_section(config, plans, args.download_mb_s))
    print(f"# resolved config of: snakemake --configfile {files}")
    print(yaml.safe_dump(config, sort_keys=False), end="")
    stand_ins = stand_in_files(config)
    print(
        "# evaluation data: "
        + (
            "; ".join(f"{k} on OFFLINE STAND-INS ({len(v)} files)" for k, v in stand_ins.items())
            if stand_ins
            else "the real datasets (no offline stand-ins)"
        )
    )
    print(cells_section(config))
    print(render_plan(config, mfu, memory=not args.no_memory, plans=plans))
    print(roofline_section(config))
    return 0


def budget_section(config: dict, plans: list, download_mb_s: float | None) -> str:  # type: ignore[type-arg]
    """The study's budget (leviathan.cost.budget) from the plan's rows, and where any cell
    has run, the plan recalibrated from its measured pace (leviathan.cost.recalibrate)."""
    from leviathan.cost.budget import DOWNLOAD_MB_S, render_budget, study_budget
    from leviathan.cost.disk import study_disk
    from leviathan.cost.plan_eval import plan_evals
    from leviathan.cost.recalibrate import recalibrate, render_recalibration

    if download_mb_s is not None and not download_mb_s > 0:
        raise ValueError(f"--download-mb-s {download_mb_s}: give a positive bandwidth in MB/s")
    evals = {p.cell: plan_evals(config, p.cell, p.mfu) for p in plans}
    budget = study_budget(
        config, plans, evals, study_disk(config, plans), download_mb_s or DOWNLOAD_MB_S
    )
    return "\n".join(render_budget(budget) + render_recalibration(recalibrate(config, plans)))


def cells_section(config: dict) -> str:  # type: ignore[type-arg]
    """Each configured scale/vocab/variant: the built-in variant its model is built from and
    its recipe's differences from the scale's default (leviathan.study.sweep)."""

    lines = [
        "cells: variant (the built-in its model is built from) and recipe (its differences "
        "from the scale's default; blank: the default)"
    ]
    seen = set()
    for cell in config_cells(config):
        label = f"{cell.scale}/{cell.vocab}/{cell.variant}"
        if label in seen:
            continue
        seen.add(label)
        base = cell_variant(config, cell.variant).base
        lines.append(f"  {label:<40} {base:<13} {cell_recipe(config, cell)}".rstrip())
    return "\n".join(lines)


def roofline_section(config: dict) -> str:  # type: ignore[type-arg]
    """The roofline (`leviathan.cost.roofline`) of each scale/vocab/variant of the studies,
    with the optimizer step spread over one GPU's micro-batches."""
    from leviathan.cost.roofline import render

    rows = {}
    for cell in config_cells(config):
        label = f"{cell.scale}/{cell.vocab}/{cell.variant}"
        if label not in rows:
            tc = cell_train_config(config, cell)
            res = scale_resources(config, cell.scale)
            per_rank = tc.global_batch // max(1, int(res["gpus"]) * int(res["nodes"]))
            rows[label] = (label, tc.model_config(), tc.micro_batch, per_rank)
    return render(list(rows.values()))


def _cell_memory(config: dict, cell: Cell) -> dict:  # type: ignore[type-arg]
    """The cell's training and evaluation jobs' GPU memory (bytes; the GPU's beside)."""
    from leviathan.cost.plan import cell_memory

    out = {}
    for name, job in zip(("train", "eval"), cell_memory(config, cell), strict=True):
        if job is not None:
            out[f"{name}_gpu_memory"] = job.total
            out[f"{name}_gpu_memory_of"] = job.gpu.memory if job.gpu else None
    return out


def cell_settings(config: dict, cell: Cell, mfu: float | None, memory: bool = True) -> dict:  # type: ignore[type-arg]
    """One cell as the workflow trains it: train config, runtime, resources, command, plan."""
    from leviathan.cost.plan import plan_cell

    tc = cell_train_config(config, cell)
    plan = plan_cell(config, cell, mfu)
    tokens = layout.tokens_dir(config["corpus"]["name"], cell.vocab)
    run_dir = layout.run_dir(cell)
    return {
        "cell": cell.key,
        "run_dir": run_dir,
        "variant": {
            "name": cell.variant,
            "base": cell_variant(config, cell.variant).base,
            "recipe": cell_recipe(config, cell),
        },
        "train": {
            **tc.to_dict(),
            "max_steps": tc.max_steps,
            "warmup": tc.warmup,
            "tokens_per_step": tc.tokens_per_step,
        },
        "train_fingerprint": tc.fingerprint(),
        "runtime": asdict(workflow_runtime(config.get("runtime"))),
        "resources": resources(config, cell.scale),
        "command": shlex.split(train_command(cell, config, tokens, run_dir, python="python")),
        "command_env": launch_env(config, cell.scale),
        "plan": {
            "params": plan.params,
            "tokens": plan.tokens,
            "train_flops": plan.train_flops,
            "checkpoint_bytes": plan.checkpoint_bytes,
            "gpu_hours": plan.gpu_hours,
            "mfu": plan.mfu,
            "mfu_source": plan.mfu_source,
            "mfu_eager": plan.mfu_eager,
            "mfu_compiled": plan.mfu_compiled,
            **(_cell_memory(config, cell) if memory else {}),
        },
    }
