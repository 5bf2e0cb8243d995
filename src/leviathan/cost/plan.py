"""A study's plan before it runs: cells, tokens, disk per artifact, GPU-hours and GPU memory
per job. Its evaluation jobs are planned in `plan_eval`, the study's disk in `disk`, and the
budget summed from all of them in `budget`; `recalibrate` replaces the predicted step times
by measured ones once cells have run.

Every figure comes from the code's own counters: the cell's resolved training config
(tokens, steps), the parameter and FLOP counter of the model it trains (on the meta device,
so any scale is free), the vocabulary's token dtype, the GPU table (`leviathan.gpus`), the
roofline's predicted MFU of the cell on its GPU model (`leviathan.cost.roofline`: compiled
where runtime.compile is on, else eager; `--mfu` states one instead) and each job's memory
traced on FakeTensors (`leviathan.cost.memory`; an evaluation job's: `leviathan.cost.eval_memory`).
What is assumed is stated beside the figure: the roofline's efficiencies, the memory
allowances, and the bytes of raw text per token that size the corpus download.

Corpus size. The corpus is fetched once for every vocabulary of the configured cells; it must
hold, for each vocabulary, the largest token budget of its cells. The download is sized as
max over vocabularies of budget x corpus.bytes_per_token x (1 + corpus.size_margin) UTF-8
bytes of training text; `corpus.max_bytes: auto` applies it (config/paper.yaml).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from leviathan.cells import Cell, config_cells
from leviathan.checkpoint.files import checkpoint_bytes, kept_bytes
from leviathan.cost.eval_memory import eval_memory
from leviathan.cost.memory import JobMemory, largest_fitting, refusal, train_memory
from leviathan.cost.units import count_text, size_text
from leviathan.study.resolve import cell_train_config

DEFAULT_MFU = 0.40  # the best mature stacks publish for ~1B models on H100s: `--mfu 0.4`


@dataclass(frozen=True)
class CellPlan:
    cell: Cell
    params: int
    tokens: int  # steps x tokens per step (what the run trains on)
    steps: int
    train_flops: float  # whole run: train FLOPs per token x tokens
    checkpoint_bytes: int  # one checkpoint: weights + AdamW state
    checkpoints_on_disk: int  # runtime.checkpoint.keep_last step checkpoints + final
    gpus: int
    gpu_model: str | None
    gpu_hours: float | None  # at `mfu` on gpu_model's peak; None: peak unknown
    mfu: float | None = None  # the MFU the GPU-hours assume (None: a CPU or unknown GPU)
    mfu_source: str = ""  # "stated" (--mfu), "compiled" or "eager" (the roofline's)
    mfu_eager: float | None = None  # the roofline's, both ways (None: no GPU model)
    mfu_compiled: float | None = None
    kept_checkpoints: int = (
        0  # runtime.checkpoint.keep_at's steps of this run (weights only, kept for good)
    )

    @property
    def kept_bytes(self) -> int:
        """The kept checkpoints on disk: fp32 weights each (leviathan.checkpoint.kept)."""
        return self.kept_checkpoints * kept_bytes(self.params)


@dataclass(frozen=True)
class CellMFU:
    """The MFU a cell's GPU-hours assume, where it comes from, and the roofline's both ways."""

    mfu: float | None
    source: str
    eager: float | None
    compiled: float | None


def cell_mfu(config: Mapping[str, Any], cell: Cell, mfu: float | None = None) -> CellMFU:
    """`mfu` where stated; else the roofline's prediction for one GPU of the training job's
    `gpu_model` at the cell's micro-batch, compiled where runtime.compile is on."""
    from leviathan.gpus import gpu_model
    from leviathan.study.cluster import scale_resources
    from leviathan.train.config import workflow_runtime

    tc = cell_train_config(config, cell)
    res = scale_resources(config, cell.scale)
    gpus, model = int(res["gpus"]) * int(res["nodes"]), gpu_model(res["gpu_model"])
    if not gpus or model is None:
        return CellMFU(mfu, "stated" if mfu else "", None, None)
    eager, compiled = _roofline_mfu(
        tc.model_config(), tc.micro_batch, tc.global_batch // gpus, model.name
    )
    compile_on = workflow_runtime(config.get("runtime")).compile
    if mfu is not None:
        return CellMFU(mfu, "stated", eager, compiled)
    return CellMFU(
        compiled if compile_on else eager, "compiled" if compile_on else "eager", eager, compiled
    )


@cache
def _roofline_mfu(cfg: Any, micro: int, per_rank: int, gpu: str) -> tuple[float, float]:
    from leviathan.cost.roofline import roofline

    return tuple(roofline(cfg, micro, per_rank, fused=f).mfu(gpu) for f in (False, True))  # type: ignore[return-value]


def plan_cell(config: Mapping[str, Any], cell: Cell, mfu: float | None = None) -> CellPlan:
    """A cell's plan; GPU-hours at `mfu` where stated, else at the roofline's (`cell_mfu`)."""
    from leviathan.device import peak_flops
    from leviathan.model.accounting import account
    from leviathan.study.cluster import scale_resources
    from leviathan.train.config import workflow_runtime

    tc = cell_train_config(config, cell)
    acc = account(tc.model_config(), tc.context)
    tokens = tc.max_steps * tc.tokens_per_step
    flops = float(acc.train_flops) * tokens
    res = scale_resources(config, cell.scale)  # the training job's, as the config asks for them
    gpus, model = int(res["gpus"]) * int(res["nodes"]), res["gpu_model"] or None
    peak = peak_flops(str(model)) if gpus and model else None
    util = cell_mfu(config, cell, mfu)
    hours = flops / (peak * util.mfu) / 3600 if peak and util.mfu else None
    runtime = workflow_runtime(config.get("runtime"))
    from leviathan.train.schedule import keep_steps

    return CellPlan(
        cell=cell,
        params=acc.total_params,
        tokens=tokens,
        steps=tc.max_steps,
        train_flops=flops,
        checkpoint_bytes=checkpoint_bytes(acc.total_params),
        checkpoints_on_disk=runtime.checkpoint.keep_last + 1,
        gpus=gpus,
        gpu_model=model,
        gpu_hours=hours,
        mfu=util.mfu if peak else None,
        mfu_source=util.source,
        mfu_eager=util.eager,
        mfu_compiled=util.compiled,
        kept_checkpoints=len(keep_steps(runtime.checkpoint.keep_at, tc.max_steps)),
    )


def vocab_budgets(config: Mapping[str, Any]) -> dict[str, int]:
    """The largest training-token budget of each vocabulary's cells (torch-free: the
    workflow sizes the download at parse time)."""
    out: dict[str, int] = {}
    for cell in config_cells(config):
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


def memory_text(job: Any) -> str:
    """A job's GPU memory as the plan's tables print it (`-`: a CPU job)."""
    return "-" if job is None else job.cell()


def _mfu(p: CellPlan) -> str:
    """`52% c` (the roofline's, compiled), `21% e` (eager) or `40% s` (stated)."""
    return "-" if p.mfu is None else f"{p.mfu:.0%} {p.mfu_source[:1]}"


def _job_memory(config: Mapping[str, Any], plans: list[CellPlan]) -> dict[Cell, Any]:
    """Each cell's (training, evaluation) JobMemory; a training micro-batch that does not
    fit its GPU refused in one line."""

    jobs = {p.cell: cell_memory(config, p.cell) for p in plans}
    for cell, (train, _) in jobs.items():
        check_fits(config, cell, train)
    return jobs


def _memory_note() -> str:
    from leviathan.cost import memory as m

    return (
        "GPU memory per job: peak per GPU of its step traced on FakeTensors (cost/step_count.py) "
        f"+ logsumexp's hidden chunk temporary + DDP's gradient buckets or FSDP's gathered groups (several GPUs; leviathan/memory.py), "
        f"x {1 + m.FRAGMENTATION:.2f} (allocator fragmentation) + {m.CUDA_CONTEXT_BYTES / 2**30:.0f} GB "
        f"CUDA context (+ {m.NCCL_BYTES / 2**30:.0f} GB NCCL on several GPUs); of the GPU model's memory"
    )


def study_plans(config: Mapping[str, Any], mfu: float | None = None) -> list[CellPlan]:
    """plan_cell of every configured cell: the plan's training rows."""
    return [plan_cell(config, c, mfu) for c in config_cells(config)]


def render_plan(
    config: Mapping[str, Any],
    mfu: float | None = None,
    memory: bool = True,
    plans: list[CellPlan] | None = None,
) -> str:
    """The study's plan as text (what `leviathan config show` prints after the config):
    GPU-hours at `mfu` where stated, else at each cell's roofline MFU (`plans`: study_plans,
    where the caller has them); with `memory`, each job's GPU memory
    (`leviathan.cost.memory`), a training micro-batch that does not fit refused
    (ValueError)."""
    from leviathan.cost.budget import profile_retries, train_wall_h, training_time_warnings
    from leviathan.cost.plan_eval import render_evaluation
    from leviathan.data.tokenizers import token_dtype
    from leviathan.vocab import get_vocab

    plans = study_plans(config, mfu) if plans is None else plans
    jobs = _job_memory(config, plans) if memory else {}
    source = (
        f"MFU {mfu:.0%} as stated (--mfu)"
        if mfu is not None
        else "the roofline's predicted MFU of each cell on its GPU model (cost/roofline.py: "
        "c compiled, as runtime.compile; eager and compiled both in the roofline below; "
        "--mfu 0.4 states one instead)"
    )
    lines = [
        f"plan: {len(plans)} cells (each trained once, whichever studies share it); "
        f"GPU-hours at {source}, of the GPU model's dense bf16 peak"
    ]
    if memory:
        lines.append(_memory_note())
    lines.append(
        f"{'cell':<40} {'params':>10} {'tokens':>10} {'steps':>8} {'train PFLOP':>12} "
        f"{'ckpt each':>10} {'GPUs':>9} {'MFU':>6} {'GPU-hours':>10} {'wall h':>7}"
        + (f" {'GPU memory':>13}" if memory else "")
    )
    total_hours = 0.0
    for p in plans:
        gpus = f"{p.gpus} x {p.gpu_model}" if p.gpus else "cpu"
        hours = f"{p.gpu_hours:,.1f}" if p.gpu_hours is not None else "-"
        wall = f"{train_wall_h(p):,.1f}" if p.gpu_hours is not None else "-"
        total_hours += p.gpu_hours or 0.0
        mem = f" {memory_text(jobs[p.cell][0]):>13}" if memory else ""
        lines.append(
            f"{p.cell.key:<40} {count_text(p.params):>10} {count_text(p.tokens):>10} {p.steps:>8,} "
            f"{p.train_flops / 1e15:>12,.1f} {size_text(p.checkpoint_bytes):>10} {gpus:>9} "
            f"{_mfu(p):>6} {hours:>10} {wall:>7}{mem}"
        )
    # the checkpoints' disk is part of the study's disk line (study_disk), printed below
    lines.append(f"total training GPU-hours {total_hours:,.1f}")
    lines += training_time_warnings(config, plans, profile_retries())
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
            f"  {vocab:<12} budget {count_text(budgets[vocab])} tokens -> text {size_text(n)}, "
            f"train.bin about {size_text(shard)} (uint{8 * itemsize})"
        )
    limit = fetch_max_bytes(config)
    lines.append(
        f"  fetch limit (corpus.max_bytes={corpus.get('max_bytes')!r}): "
        + (f"{size_text(limit)} per split" if limit else "none: the whole corpus is streamed")
    )
    from leviathan.data import eval_data  # off the import path of the GPU image's scripts

    lines += eval_data.plan_lines(config)  # the evaluations' datasets the data step fetches
    lines += render_evaluation(
        config, plans, {c: j[1] for c, j in jobs.items()} if memory else None
    )
    return "\n".join(lines)


def eval_batch(config: Any) -> int:
    """The largest batch of the configured evaluations (windows of the full context: an
    upper bound for lm-eval's shorter requests); each section's default where unset."""
    from leviathan.eval.config import LmEvalConfig, ValConfig, WikitextConfig

    defaults = {"val": ValConfig, "wikitext": WikitextConfig, "lm_eval": LmEvalConfig}
    sections = config.get("evaluate") or {}
    batches = [
        int((sections.get(k) or {}).get("batch_size") or cls.batch_size)
        for k, cls in defaults.items()
        if k in sections
    ]
    return max(batches, default=ValConfig.batch_size)


def cell_memory(config: Any, cell: Any) -> tuple[JobMemory | None, JobMemory | None]:
    """(the training job's, the evaluation job's) peak per GPU; None for a CPU job."""
    from leviathan.study.cluster import eval_resources, scale_resources

    tc = cell_train_config(config, cell)
    cfg = tc.model_config()
    res, eres = scale_resources(config, cell.scale), eval_resources(config, cell.scale)
    gpus = int(res["gpus"]) * int(res["nodes"])
    train = (
        train_memory(cfg, tc.micro_batch, gpus, res["gpu_model"], res["parallel"]) if gpus else None
    )
    evaluation = eval_memory(cfg, eval_batch(config), eres["gpu_model"]) if eres["gpu"] else None
    return train, evaluation


def check_fits(config: Any, cell: Any, train: JobMemory | None) -> None:
    """Refuse (ValueError, one line) a training micro-batch that does not fit its GPU."""
    if train is None or train.fits is not False:
        return
    from leviathan.study.cluster import scale_resources

    tc = cell_train_config(config, cell)
    res = scale_resources(config, cell.scale)
    gpus = int(res["gpus"]) * int(res["nodes"])
    largest = largest_fitting(
        tc.model_config(),
        tc.global_batch // gpus,
        tc.micro_batch,
        gpus,
        res["gpu_model"],
        res["parallel"],
    )
    raise ValueError(refusal(cell.scale, tc.micro_batch, train, largest))
