"""The study's plan as text: what `leviathan config show` prints after the config. Training
rows (`leviathan.cost.plan`), each job's GPU memory (`leviathan.cost.memory`), the corpus the
study fetches (`leviathan.study.corpus_size`), then the evaluation part (`plan_eval`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from leviathan.cells import Cell
from leviathan.cost import memory as m
from leviathan.cost.budget import profile_retries, train_wall_h, training_time_warnings
from leviathan.cost.plan import CellPlan, cell_memory, check_fits, memory_text, study_plans
from leviathan.cost.plan_eval import render_evaluation
from leviathan.cost.units import count_text, size_text
from leviathan.data import eval_data
from leviathan.data.tokenizers import token_dtype
from leviathan.study.corpus_size import corpus_bytes, fetch_max_bytes, vocab_budgets
from leviathan.vocab import get_vocab


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
    return (
        "GPU memory per job: peak per GPU of its step traced on FakeTensors (cost/step_count.py) "
        f"+ logsumexp's hidden chunk temporary + DDP's gradient buckets or FSDP's gathered groups (several GPUs; cost/memory.py), "
        f"x {1 + m.FRAGMENTATION:.2f} (allocator fragmentation) + {m.CUDA_CONTEXT_BYTES / 2**30:.0f} GB "
        f"CUDA context (+ {m.NCCL_BYTES / 2**30:.0f} GB NCCL on several GPUs); of the GPU model's memory"
    )


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
    lines += _corpus_lines(config)
    lines += eval_data.plan_lines(config)  # the evaluations' datasets the data step fetches
    lines += render_evaluation(
        config, plans, {c: j[1] for c, j in jobs.items()} if memory else None
    )
    return "\n".join(lines)


def _corpus_lines(config: Mapping[str, Any]) -> list[str]:
    """The corpus the study fetches: each vocabulary's training text and shard, the fetch limit."""
    corpus = config.get("corpus") or {}
    budgets = vocab_budgets(config)
    need = corpus_bytes(config, budgets)
    lines = [
        f"corpus {corpus.get('name')} ({corpus.get('kind')}): training text needed per vocabulary = largest "
        f"budget x {corpus['bytes_per_token']} bytes/token x (1 + {corpus['size_margin']})"
    ]
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
    return lines
