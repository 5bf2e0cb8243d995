"""A study's evaluation jobs before they run: tokens each scores, FLOPs, GPU-hours at a share
of the cell's training MFU, and each job's time limit (`leviathan config show` prints them
below the training plan, `leviathan.cost.plan`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from leviathan import layout
from leviathan.cells import Cell
from leviathan.cost.disk import study_disk
from leviathan.cost.plan import DEFAULT_MFU, CellPlan, cell_mfu, memory_text
from leviathan.cost.units import count_text
from leviathan.device import peak_flops
from leviathan.eval.config import PAPER_TASKS
from leviathan.eval.run import along_enabled
from leviathan.manifest import read_manifest
from leviathan.model.accounting import account
from leviathan.study.along import along_steps
from leviathan.study.cluster import eval_resources
from leviathan.study.resolve import cell_train_config
from leviathan.train.config import workflow_runtime

# Sizes of what the evaluation scores that no config states: lm-eval's official splits
# (documents: facts of the datasets) x requests per document (answer choices) x tokens per
# request (context + continuation, each request scored whole: an estimate, GPT-2-like BPE).
# Stated here, not measured; local JSONL files (offline stand-ins) count their own documents.
# WikiText-103's test split is 245,569 words (~1.2 tokens each), scored twice (lm-eval's
# rolling windows and the stream figure).
LM_EVAL_TASK_SIZES: dict[str, tuple[int, int, int]] = {
    "hellaswag": (10_042, 4, 100),
    "arc_easy": (2_376, 4, 25),
    "arc_challenge": (1_172, 4, 30),
    "piqa": (1_838, 2, 40),
    "winogrande": (1_267, 2, 25),
    "lambada_openai": (5_153, 1, 80),
}
WIKITEXT_TOKENS = 2 * 295_000
# inference runs smaller batches than training and lm-eval pads its requests: GPU-hours of
# evaluation are at half the stated training MFU (stated, not measured)
EVAL_MFU_SHARE = 0.5


@dataclass(frozen=True)
class EvalPlan:
    """One evaluation job of one cell: tokens through the model, FLOPs, GPU-hours, limit."""

    evaluation: str
    tokens: int | None  # None: unknown before the data exist (the whole val split)
    flops: float | None
    gpu_hours: float | None  # None on a CPU job or an unknown peak
    runtime_hours: float  # the job's time limit (config.eval_resources)
    jobs: int = 1  # jobs the figures are summed over (along: one per kept checkpoint)

    @property
    def job_hours(self) -> float | None:
        return None if self.gpu_hours is None else self.gpu_hours / max(self.jobs, 1)

    @property
    def fits(self) -> bool | None:
        if self.job_hours is None:
            return None
        return self.job_hours <= self.runtime_hours  # one GPU per evaluation job


def val_tokens(config: Mapping[str, Any], cell: Cell, context: int) -> int | None:
    """Targets of the `val` evaluation: max_windows x context, or the tokenized split's size
    where it exists (None for the whole split of data not yet tokenized)."""

    windows = ((config.get("evaluate") or {}).get("val") or {}).get("max_windows")
    val = layout.shards(layout.tokens_dir(config["corpus"]["name"], cell.vocab))["val"]
    try:
        split = int(read_manifest(val)["tokens"]) - 1
    except (FileNotFoundError, KeyError, ValueError):
        split = None
    if windows is None:
        return split
    return windows * context if split is None else min(windows * context, split)


def lm_eval_tokens(config: Mapping[str, Any]) -> int | None:
    """Tokens lm-eval's configured tasks send through the model (LM_EVAL_TASK_SIZES)."""
    section = (config.get("evaluate") or {}).get("lm_eval")
    if section is None:
        return 0

    limit = section.get("limit")
    data = section.get("data") or {}
    total = 0
    for task in section.get("tasks") or PAPER_TASKS:
        if task not in LM_EVAL_TASK_SIZES:
            return None
        docs, requests, tokens = LM_EVAL_TASK_SIZES[task]
        local = _jsonl_rows((data.get(task) or {}).get("data_files"))
        docs = docs if local is None else local
        total += min(docs, limit or docs) * requests * tokens
    return total


def _jsonl_rows(data_files: Mapping[str, Any] | None) -> int | None:
    """Documents of local JSONL task files (the largest split; None: not local JSONL)."""

    if not data_files:
        return None
    rows = []
    for files in data_files.values():
        paths = [files] if isinstance(files, str) else list(files)
        if not all(str(f).endswith(".jsonl") and Path(f).is_file() for f in paths):
            return None
        rows.append(sum(sum(1 for line in open(f) if line.strip()) for f in paths))
    return max(rows)


def wikitext_tokens(config: Mapping[str, Any]) -> int:
    """Tokens of the WikiText evaluation: WIKITEXT_TOKENS, or for local files their UTF-8
    bytes / corpus.bytes_per_token, scored twice."""

    section = (config.get("evaluate") or {}).get("wikitext")
    if section is None:
        return 0
    files = [
        Path(f)
        for fs in (section.get("data_files") or {}).values()
        for f in ([fs] if isinstance(fs, str) else fs)
    ]
    if not files or not all(f.is_file() for f in files):
        return WIKITEXT_TOKENS
    per_token = float(config["corpus"]["bytes_per_token"])
    return 2 * math.ceil(sum(f.stat().st_size for f in files) / per_token)


def plan_evals(config: Mapping[str, Any], cell: Cell, mfu: float | None = None) -> list[EvalPlan]:
    """The cell's evaluation jobs: forward FLOPs per token (the code's counter, the input
    table materialised: no per-token input cost) x tokens, on one GPU of the job's model, at
    EVAL_MFU_SHARE of the training MFU (`mfu` where stated, else the cell's roofline's)."""

    tc = cell_train_config(config, cell)
    acc = account(tc.model_config(), tc.context)
    per_token = acc.forward_flops - acc.input_flops
    res = eval_resources(config, cell.scale)
    model = res["gpu_model"] if res["gpu"] else None
    peak = peak_flops(str(model)) if model else None
    train_mfu = mfu if mfu is not None else cell_mfu(config, cell).mfu or DEFAULT_MFU
    tokens = {
        "val": val_tokens(config, cell, tc.context),
        "wikitext": wikitext_tokens(config),
        "lm_eval": lm_eval_tokens(config),
    }
    out = []
    for evaluation, n in tokens.items():
        if n == 0:
            continue
        flops = None if n is None else float(per_token) * n
        hours = flops / (peak * train_mfu * EVAL_MFU_SHARE) / 3600 if peak and flops else None
        out.append(EvalPlan(evaluation, n, flops, hours, res["runtime"] / 60))
    return out + along_evals(config, cell, out)


def render_evaluation(
    config: Mapping[str, Any], plans: list[CellPlan], memory: dict[Cell, Any] | None = None
) -> list[str]:
    """The plan's evaluation part: per cell and job, tokens, FLOPs, GPU-hours, the job's
    time limit and (`memory`: the cells' evaluation JobMemory) its GPU memory; then training
    + evaluation totals and the study's disk."""
    lines = [
        "evaluation: one job per cell and evaluation (config.eval_resources); GPU-hours at "
        f"{EVAL_MFU_SHARE:.0%} of the cell's training MFU (smaller, padded batches)"
    ]
    lines += along_note(config, plans)
    evaluations = (
        [e.evaluation for e in plan_evals(config, plans[0].cell, plans[0].mfu)] if plans else []
    )
    lines.append(
        f"{'cell':<40} "
        + " ".join(f"{k + ' tok':>12}" for k in evaluations)
        + f" {'PFLOP':>8} {'GPU-hours':>10} {'longest job h':>13} {'limit h':>8}"
        + (f" {'GPU memory':>13}" if memory is not None else "")
    )
    total_eval, unknown, over = 0.0, False, []
    for p in plans:
        evals = plan_evals(config, p.cell, p.mfu)
        hours = [e.gpu_hours for e in evals if e.gpu_hours is not None]
        longest = [e.job_hours for e in evals if e.job_hours is not None]
        total_eval += sum(hours)
        unknown |= any(e.tokens is None for e in evals)
        over += [f"{p.cell.key} {e.evaluation}" for e in evals if e.fits is False]
        toks = " ".join(
            f"{count_text(e.tokens) if e.tokens is not None else 'split':>12}" for e in evals
        )
        flops = sum(e.flops or 0.0 for e in evals)
        limit = evals[0].runtime_hours if evals else 0.0
        mem = "" if memory is None else f" {memory_text(memory.get(p.cell)):>13}"
        lines.append(
            f"{p.cell.key:<40} {toks} {flops / 1e15:>8,.2f} "
            f"{f'{sum(hours):,.3f}' if hours else 'cpu':>10} "
            f"{f'{max(longest):,.3f}' if longest else '-':>13} {limit:>8,.1f}{mem}"
        )
    if over:
        lines.append(
            f"WARNING: {len(over)} evaluation job(s) would exceed their time limit "
            f"({', '.join(over[:3])}): raise eval_resources.<scale>.runtime or lower evaluate.val.max_windows"
        )
    train = sum(p.gpu_hours or 0.0 for p in plans)
    lines.append(
        f"total GPU-hours: training {train:,.1f} + evaluation {total_eval:,.1f} = "
        f"{train + total_eval:,.1f}"
        + (" (val on a whole split not yet tokenized is not counted)" if unknown else "")
    )
    lines.append(study_disk(config, plans).line())
    return lines


def along_evals(config: Mapping[str, Any], cell: Cell, evals: Sequence[EvalPlan]) -> list[EvalPlan]:
    """The cell's evaluations along training as one plan entry, `along`: its kept checkpoints'
    val jobs (each the cell's `val` job among `evals`: the same sample, model and GPU), their
    tokens, FLOPs and GPU-hours summed; none when off or where the cell has no val job."""
    val = next((e for e in evals if e.evaluation == "val"), None)
    if val is None or not along_enabled(config):
        return []
    n = len(along_steps(config, cell))

    def times(x: float | None) -> float | None:
        return None if x is None else x * n

    tokens = None if val.tokens is None else val.tokens * n
    return [
        replace(
            val,
            evaluation="along",
            tokens=tokens,
            flops=times(val.flops),
            gpu_hours=times(val.gpu_hours),
            jobs=n,
        )
    ]


def along_note(config: Mapping[str, Any], plans: Sequence[CellPlan]) -> list[str]:
    """The plan's line on the evaluations along training: how many val jobs, on which steps."""
    if not along_enabled(config) or not plans:
        return []
    spec = workflow_runtime(config.get("runtime")).checkpoint.keep_at
    counts = {p.cell.key: len(along_steps(config, p.cell)) for p in plans}
    return [
        f"along (evaluate.along): the val job of each kept checkpoint (runtime.checkpoint.keep_at "
        f"{spec!r}: {min(counts.values())}-{max(counts.values())} per cell, "
        f"{sum(counts.values()):,} jobs); their weights are in the disk line's kept checkpoints"
    ]
