"""A study's plan before it runs: cells, tokens, disk per artifact, GPU-hours per cell.

Every figure comes from the code's own counters: the cell's resolved training config
(tokens, steps), the parameter and FLOP counter of the model it trains (on the meta device,
so any scale is free), the vocabulary's token dtype, and the device peaks of the MFU counter
(leviathan.train.telemetry). What is assumed is stated beside the figure: the MFU, and the
bytes of raw text per token that size the corpus download.

Corpus size. The corpus is fetched once for every vocabulary of the configured cells; it must
hold, for each vocabulary, the largest token budget of its cells. The download is sized as
max over vocabularies of budget x corpus.bytes_per_token x (1 + corpus.size_margin) UTF-8
bytes of training text; `corpus.max_bytes: auto` applies it (config/paper.yaml).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from leviathan.workflow.grid import Cell, cells

DEFAULT_MFU = 0.40  # stated, not measured: `--mfu` changes it
OPTIMIZER_SLOTS = 2  # AdamW keeps exp_avg and exp_avg_sq: two fp32 tensors per parameter
WEIGHT_BYTES = 4  # checkpoints hold fp32 weights (model.safetensors)


@dataclass(frozen=True)
class CellPlan:
    cell: Cell
    params: int
    tokens: int  # steps x tokens per step (what the run trains on)
    steps: int
    train_flops: float  # whole run: train FLOPs per token x tokens
    checkpoint_bytes: int  # one checkpoint: weights + AdamW state
    checkpoints_on_disk: int  # runtime.keep_last step checkpoints + final
    gpus: int
    gpu_model: str | None
    gpu_hours: float | None  # at the stated MFU on gpu_model's peak; None: peak unknown


def cell_train_config(config: Mapping[str, Any], cell: Cell) -> Any:
    from leviathan.train.config import train_config
    from leviathan.workflow.steps import train_overrides

    return train_config(
        cell.scale, cell.vocab, cell.variant, seed=cell.seed, **train_overrides(config, cell)
    )


def checkpoint_bytes(total_params: int) -> int:
    """One checkpoint on disk: fp32 weights and AdamW's two fp32 moments per parameter."""
    return total_params * WEIGHT_BYTES * (1 + OPTIMIZER_SLOTS)


def cell_checkpoint_bytes(config: Mapping[str, Any], cell: Cell) -> int:
    from leviathan.model.accounting import account
    from leviathan.train.trainer import cell_model_config

    tc = cell_train_config(config, cell)
    return checkpoint_bytes(account(cell_model_config(tc), tc.context).total_params)


def plan_cell(config: Mapping[str, Any], cell: Cell, mfu: float = DEFAULT_MFU) -> CellPlan:
    from leviathan.model.accounting import account
    from leviathan.train.config import workflow_runtime
    from leviathan.train.telemetry import peak_flops
    from leviathan.train.trainer import cell_model_config
    from leviathan.workflow.steps import scale_resources

    tc = cell_train_config(config, cell)
    acc = account(cell_model_config(tc), tc.context)
    tokens = tc.max_steps * tc.tokens_per_step
    flops = float(acc.train_flops) * tokens
    res = scale_resources(config, cell.scale)  # the training job's, as the config asks for them
    gpus, model = int(res["gpus"]) * int(res["nodes"]), res["gpu_model"] or None
    peak = peak_flops(str(model).upper()) if gpus and model else None
    hours = flops / (peak * mfu) / 3600 if peak else None
    runtime = workflow_runtime(config.get("runtime"))
    return CellPlan(
        cell=cell,
        params=acc.total_params,
        tokens=tokens,
        steps=tc.max_steps,
        train_flops=flops,
        checkpoint_bytes=checkpoint_bytes(acc.total_params),
        checkpoints_on_disk=runtime.keep_last + 1,
        gpus=gpus,
        gpu_model=model,
        gpu_hours=hours,
    )


def vocab_budgets(config: Mapping[str, Any]) -> dict[str, int]:
    """The largest training-token budget of each vocabulary's cells (torch-free: the
    workflow sizes the download at parse time)."""
    out: dict[str, int] = {}
    for cell in cells(config["studies"]):
        tc = cell_train_config(config, cell)
        out[cell.vocab] = max(out.get(cell.vocab, 0), tc.max_steps * tc.tokens_per_step)
    return dict(sorted(out.items()))


def corpus_bytes(
    config: Mapping[str, Any], budgets: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Training-text bytes each vocabulary needs (budget x bytes/token x (1 + margin));
    `budgets`: vocab_budgets(config), where the caller has them already."""
    corpus = config.get("corpus") or {}
    per_token, margin = float(corpus["bytes_per_token"]), float(corpus["size_margin"])
    budgets = vocab_budgets(config) if budgets is None else budgets
    return {v: math.ceil(b * per_token * (1 + margin)) for v, b in budgets.items()}


def fetch_max_bytes(config: Mapping[str, Any]) -> int | None:
    """corpus.max_bytes as the fetch applies it (`auto`: sized from the studies' budgets)."""
    value = (config.get("corpus") or {}).get("max_bytes")
    if value == "auto":
        return max(corpus_bytes(config).values())
    return value  # type: ignore[no-any-return]


def _count(n: float) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:,.2f}{unit}"
    return f"{n:,.0f}"


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    raise AssertionError


def render_plan(config: Mapping[str, Any], mfu: float = DEFAULT_MFU) -> str:
    """The study's plan as text (what `leviathan config show` prints after the config)."""
    from leviathan.data.tokenizers import token_dtype
    from leviathan.vocab import get_vocab

    plans = [plan_cell(config, c, mfu) for c in cells(config["studies"])]
    lines = [
        f"plan: {len(plans)} cells (each trained once, whichever studies share it); "
        f"GPU-hours at MFU {mfu:.0%} of the GPU model's dense bf16 peak"
    ]
    lines.append(
        f"{'cell':<40} {'params':>10} {'tokens':>10} {'steps':>8} {'train PFLOP':>12} "
        f"{'ckpt each':>10} {'GPUs':>9} {'GPU-hours':>10} {'wall h':>7}"
    )
    total_hours, total_ckpt = 0.0, 0
    for p in plans:
        gpus = f"{p.gpus} x {p.gpu_model}" if p.gpus else "cpu"
        hours = f"{p.gpu_hours:,.1f}" if p.gpu_hours is not None else "-"
        wall = f"{p.gpu_hours / p.gpus:,.1f}" if p.gpu_hours is not None else "-"
        total_hours += p.gpu_hours or 0.0
        total_ckpt += p.checkpoint_bytes * p.checkpoints_on_disk
        lines.append(
            f"{p.cell.key:<40} {_count(p.params):>10} {_count(p.tokens):>10} {p.steps:>8,} "
            f"{p.train_flops / 1e15:>12,.1f} {_size(p.checkpoint_bytes):>10} {gpus:>9} {hours:>10} {wall:>7}"
        )
    lines.append(
        f"total GPU-hours {total_hours:,.1f}; checkpoints on disk at most {_size(total_ckpt)} "
        f"(keep_last step checkpoints + final per cell)"
    )
    corpus = config.get("corpus") or {}
    budgets = vocab_budgets(config)
    need = corpus_bytes(config, budgets)
    lines.append(
        f"corpus {corpus.get('name')} ({corpus.get('kind')}): training text needed per vocabulary = largest "
        f"budget x {corpus['bytes_per_token']} bytes/token x (1 + {corpus['size_margin']})"
    )
    for vocab, n in need.items():
        itemsize = token_dtype(get_vocab(vocab).n_vocab).itemsize
        shard = budgets[vocab] * (1 + float(corpus["size_margin"])) * itemsize
        lines.append(
            f"  {vocab:<12} budget {_count(budgets[vocab])} tokens -> text {_size(n)}, "
            f"train.bin about {_size(shard)} (uint{8 * itemsize})"
        )
    limit = fetch_max_bytes(config)
    lines.append(
        f"  fetch limit (corpus.max_bytes={corpus.get('max_bytes')!r}): "
        + (f"{_size(limit)} per split" if limit else "none: the whole corpus is streamed")
    )
    return "\n".join(lines)
