"""A study's plan before it runs: cells, tokens, disk per artifact, GPU-hours and GPU memory
per job. Its evaluation jobs are planned in `plan_eval`, the study's disk in `disk`, and the
budget summed from all of them in `budget`; `plan_text` prints them all; `recalibrate`
replaces the predicted step times by measured ones once cells have run.

Every figure comes from the code's own counters: the cell's resolved training config
(tokens, steps), the parameter and FLOP counter of the model it trains (on the meta device,
so any scale is free), the vocabulary's token dtype, the GPU table (`leviathan.gpus`), the
roofline's predicted MFU of the cell on its GPU model (`leviathan.cost.roofline`: compiled
where runtime.compile is on, else eager; `--mfu` states one instead) and each job's memory
traced on FakeTensors (`leviathan.cost.memory`; an evaluation job's: `leviathan.cost.eval_memory`).
What is assumed is stated beside the figure: the roofline's efficiencies, the memory
allowances, and the bytes of raw text per token that size the corpus download (the
corpus's size: `leviathan.study.corpus_size`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from leviathan.cells import Cell, config_cells
from leviathan.checkpoint.files import checkpoint_bytes, kept_bytes
from leviathan.cost.eval_memory import eval_memory
from leviathan.cost.memory import JobMemory, largest_fitting, refusal, train_memory
from leviathan.cost.roofline import roofline
from leviathan.device import peak_flops
from leviathan.eval.config import LmEvalConfig, ValConfig, WikitextConfig
from leviathan.gpus import gpu_model
from leviathan.model.accounting import account
from leviathan.study.cluster import eval_resources, scale_resources
from leviathan.study.resolve import cell_train_config
from leviathan.train.config import workflow_runtime
from leviathan.train.schedule import keep_steps

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

    return tuple(roofline(cfg, micro, per_rank, fused=f).mfu(gpu) for f in (False, True))  # type: ignore[return-value]


def plan_cell(config: Mapping[str, Any], cell: Cell, mfu: float | None = None) -> CellPlan:
    """A cell's plan; GPU-hours at `mfu` where stated, else at the roofline's (`cell_mfu`)."""

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


def memory_text(job: Any) -> str:
    """A job's GPU memory as the plan's tables print it (`-`: a CPU job)."""
    return "-" if job is None else job.cell()


def study_plans(config: Mapping[str, Any], mfu: float | None = None) -> list[CellPlan]:
    """plan_cell of every configured cell: the plan's training rows."""
    return [plan_cell(config, c, mfu) for c in config_cells(config)]


def eval_batch(config: Any) -> int:
    """The largest batch of the configured evaluations (windows of the full context: an
    upper bound for lm-eval's shorter requests); each section's default where unset."""

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
