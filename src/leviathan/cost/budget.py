"""The study's budget, summed from the plan's own rows (`leviathan.cost.plan`,
`plan_eval`, `disk`): GPU-hours and node-hours with the margin the predictions carry, peak
concurrent GPUs, the critical path's wall time, the data step's CPU-hours and download time,
the disk's peak. `leviathan config show` prints it first.

What it assumes is stated beside each figure: every ready job starts at once (the profile's
`jobs` limit and the cluster's free GPUs can only lengthen the path and lower the peak), no
queue waits, a stated download bandwidth and the rehearsal's slowest per-CPU tokenize rate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from leviathan import layout
from leviathan.cost.disk import StudyDisk
from leviathan.cost.plan import CellPlan
from leviathan.cost.plan_eval import EvalPlan
from leviathan.cost.units import size_text
from leviathan.study.cluster import rule_threads, scale_resources
from leviathan.study.corpus_size import corpus_bytes

# No GPU has run this code: the GPU figures are the roofline's predictions. The compile-level
# reading of the kernels (docs/gpu.md, "Compiled for the GPU" and LEV's "Uncertainty"; the
# plan rows of BENCHMARKS.md) expects them optimistic: the loss's tiles L2-bound at an
# unmeasured 5.5 TB/s, LEV's backward 1.3-2x its prediction, parts 15-25% slower. The budget
# asks for the prediction plus this share until the first steps are measured.
PREDICTION_MARGIN = 0.25
MARGIN_BASIS = (
    "no GPU has run this code; the compile-level reading of the kernels (docs/gpu.md) finds "
    "parts of the step 15-25% slower than the roofline predicts"
)
DOWNLOAD_MB_S = 50.0  # a stated sustained download from the Hub (`--download-mb-s`)
# the slowest per-CPU tokenize rate of the rehearsal (BENCHMARKS.md: gpt2, 3.53 MB/s at 2 GB)
TOKENIZE_MB_S_PER_CPU = 3.5
SLURM_PROFILE = "profiles/slurm/config.yaml"  # the shipped profile, whose `retries` the plan reads


@dataclass(frozen=True)
class Span:
    """One job on the budget's timeline (hours from the study's start)."""

    name: str
    gpus: int
    nodes: int
    start_h: float
    hours: float

    @property
    def end_h(self) -> float:
        return self.start_h + self.hours


@dataclass(frozen=True)
class Budget:
    """The study's budget; GPU figures None where a cell has no GPU prediction (a CPU cell)."""

    train_gpu_hours: float | None
    eval_gpu_hours: float | None
    node_hours: float | None
    peak_gpus: int | None
    critical_path_h: float | None
    data_cpu_hours: float
    data_wall_h: float
    download_bytes: int
    download_mb_s: float
    disk: StudyDisk
    from_hub: bool = True  # the corpus comes from the Hub (else local files, read not fetched)

    @property
    def gpu_hours(self) -> float | None:
        if self.train_gpu_hours is None or self.eval_gpu_hours is None:
            return None
        return self.train_gpu_hours + self.eval_gpu_hours

    @property
    def download_h(self) -> float:
        return self.download_bytes / (self.download_mb_s * 1e6) / 3600


def attempts_needed(wall_h: float, limit_h: float) -> int:
    """Attempts a training job of `wall_h` needs under a `limit_h` time limit: each attempt
    stopped at its limit resumes from its checkpoint in the next."""
    return max(1, math.ceil(wall_h / limit_h)) if limit_h > 0 else 1


def train_wall_h(plan: CellPlan) -> float | None:
    """A training job's predicted wall hours: its GPU-hours over its GPUs."""
    return None if plan.gpu_hours is None else plan.gpu_hours / max(1, plan.gpus)


def from_hub(config: Mapping[str, Any]) -> bool:
    """Whether the data step downloads the corpus from the Hub (corpus.kind hf or pile without
    a local_dir); embedded text and local files are read where they are."""
    corpus = config.get("corpus") or {}
    return corpus.get("kind") in ("hf", "pile") and not corpus.get("local_dir")


def data_step(config: Mapping[str, Any], bandwidth_mb_s: float) -> tuple[float, float, int]:
    """(CPU-hours, wall hours, training-text bytes fetched) of the data step: the corpus text
    fetched once (at `bandwidth_mb_s` from the Hub), then each vocabulary's text tokenized at
    TOKENIZE_MB_S_PER_CPU on the tokenize job's CPUs (its vocabularies at once)."""

    need = corpus_bytes(config)
    download = max(need.values(), default=0)
    cpu_h = {v: n / (TOKENIZE_MB_S_PER_CPU * 1e6) / 3600 for v, n in need.items()}
    cpus = rule_threads(config, "tokenize")
    fetch_h = download / (bandwidth_mb_s * 1e6) / 3600 if from_hub(config) else 0.0
    return sum(cpu_h.values()), fetch_h + max(cpu_h.values(), default=0.0) / cpus, download


def spans(
    config: Mapping[str, Any],
    plans: Sequence[CellPlan],
    evals: Mapping[Any, Sequence[EvalPlan]],
    start_h: float,
) -> list[Span] | None:
    """Every GPU job on a timeline where each starts once its inputs exist: training after
    the data step (`start_h`), each evaluation (one GPU) after its cell's training. None
    where a training job has no GPU prediction (a CPU cell)."""

    out = []
    for p in plans:
        wall = train_wall_h(p)
        if wall is None:
            return None
        nodes = int(scale_resources(config, p.cell.scale)["nodes"])
        out.append(Span(f"train {p.cell.key}", p.gpus, nodes, start_h, wall))
        for e in evals[p.cell]:  # no GPU-hours (a CPU job, a split not yet tokenized): none held
            # one GPU per job; an entry of several jobs (along training: one per kept checkpoint)
            # holds them all at once, each for one job's hours
            gpus = 0 if e.gpu_hours is None else e.jobs
            hours = e.job_hours or 0.0
            out.append(Span(f"{e.evaluation} {p.cell.key}", gpus, gpus, start_h + wall, hours))
    return out


def peak_gpus(timeline: Sequence[Span]) -> int:
    """The most GPUs held at once: the sum over jobs running at some job's start."""
    return max(
        (sum(s.gpus for s in timeline if s.start_h <= t < s.end_h) for t in _starts(timeline)),
        default=0,
    )


def _starts(timeline: Sequence[Span]) -> list[float]:
    return sorted({s.start_h for s in timeline if s.hours > 0})


def study_budget(
    config: Mapping[str, Any],
    plans: Sequence[CellPlan],
    evals: Mapping[Any, Sequence[EvalPlan]],
    disk: StudyDisk,
    bandwidth_mb_s: float = DOWNLOAD_MB_S,
) -> Budget:
    """The budget of the plan's rows: `plans` (plan_cell), `evals` (plan_evals per cell),
    `disk` (study_disk)."""
    cpu_h, data_wall, download = data_step(config, bandwidth_mb_s)
    timeline = spans(config, plans, evals, data_wall)
    if timeline is None:
        return Budget(
            None,
            None,
            None,
            None,
            None,
            cpu_h,
            data_wall,
            download,
            bandwidth_mb_s,
            disk,
            from_hub(config),
        )
    return Budget(
        train_gpu_hours=sum(p.gpu_hours or 0.0 for p in plans),
        eval_gpu_hours=sum(e.gpu_hours or 0.0 for es in evals.values() for e in es),
        node_hours=sum(s.hours * s.nodes for s in timeline),
        peak_gpus=peak_gpus(timeline),
        critical_path_h=max((s.end_h for s in timeline), default=data_wall),
        data_cpu_hours=cpu_h,
        data_wall_h=data_wall,
        download_bytes=download,
        download_mb_s=bandwidth_mb_s,
        disk=disk,
        from_hub=from_hub(config),
    )


def render_budget(budget: Budget) -> list[str]:
    """The budget as the lines `leviathan config show` prints first."""
    m = 1 + PREDICTION_MARGIN
    lines = [
        f"budget (every figure summed from the plan's rows below; margin +{PREDICTION_MARGIN:.0%}: {MARGIN_BASIS})"
    ]
    if budget.gpu_hours is None or budget.node_hours is None:
        lines.append(
            "  GPU-hours, node-hours, peak GPUs, critical path: - (CPU cells: no GPU prediction)"
        )
    else:
        lines += [
            f"  GPU-hours {budget.gpu_hours:,.1f} (training {budget.train_gpu_hours:,.1f} + evaluation "
            f"{budget.eval_gpu_hours:,.1f}), with the margin {budget.gpu_hours * m:,.1f}",
            f"  node-hours {budget.node_hours:,.1f}, with the margin {budget.node_hours * m:,.1f} "
            "(each job's wall time x its nodes, config.resources.<scale>.nodes; an evaluation "
            "job or a job on part of a node counts one whole node)",
            f"  peak concurrent GPUs {budget.peak_gpus} (every ready job started at once; the "
            "profile's jobs limit and the cluster's free GPUs can only lower it)",
            f"  critical path {budget.critical_path_h:,.1f} h wall, with the margin "
            f"{budget.data_wall_h + (budget.critical_path_h - budget.data_wall_h) * m:,.1f} h "
            "(data step, then the longest training job and its evaluation; no queue waits, "
            "no time lost to restarts)",
        ]
    lines += [
        f"  data step {budget.data_cpu_hours:,.1f} CPU-hours (tokenize at {TOKENIZE_MB_S_PER_CPU} "
        "MB/s per CPU, the rehearsal's slowest rate: BENCHMARKS.md), "
        f"{budget.data_wall_h:,.1f} h wall with the fetch",
        (
            f"  download {size_text(budget.download_bytes)} of training text from the Hub in "
            f"{budget.download_h:,.1f} h at {budget.download_mb_s:g} MB/s (stated: "
            "--download-mb-s), and the validation split; the Hub serves compressed files, so "
            "fewer bytes cross the network"
            if budget.from_hub
            else f"  no download: {size_text(budget.download_bytes)} of corpus text read from "
            "where it is (corpus.kind embedded or text, or corpus.local_dir)"
        ),
        f"  disk peak {size_text(budget.disk.total)}, {size_text(budget.disk.at_end)} once every "
        "cell is final (the study's disk line below)",
    ]
    return lines


def profile_retries(profile: Path | None = None) -> int:
    """The `retries` of a Snakemake profile (default: the shipped SLURM profile of this
    checkout); 0 where it has none."""

    path = profile or layout.repo_root() / SLURM_PROFILE
    if not path.is_file():
        return 0
    return int((yaml.safe_load(path.read_text()) or {}).get("retries") or 0)


def job_limit_h(config: Mapping[str, Any], scale: str) -> float:
    """A training job's time limit in hours (config.resources.<scale>.runtime, minutes)."""

    return float(scale_resources(config, scale)["runtime"]) / 60


def training_attempts(config: Mapping[str, Any], plan: CellPlan) -> tuple[float, float, int]:
    """(predicted wall hours, the job's time limit in hours, attempts needed)."""
    limit = job_limit_h(config, plan.cell.scale)
    wall = train_wall_h(plan) or 0.0
    return wall, limit, attempts_needed(wall, limit)


def training_time_warnings(
    config: Mapping[str, Any], plans: Sequence[CellPlan], retries: int
) -> list[str]:
    """One line per training cell whose predicted wall time exceeds its job's time limit: the
    attempts it needs, a WARNING where they exceed the profile's retries + 1."""
    out = []
    for p in plans:
        if p.gpu_hours is None:
            continue
        wall, limit, attempts = training_attempts(config, p)
        if attempts == 1:
            continue
        key = f"resources.{p.cell.scale}.runtime"
        line = (
            f"{p.cell.key} trains ~{wall:,.1f} h against its {limit:,.1f} h limit ({key}): "
            f"{attempts} attempts, each resuming from the last checkpoint"
        )
        if attempts > retries + 1:
            out.append(
                f"WARNING: {line}, more than the profile's retries ({retries}) + 1: raise {key} "
                "(or the profile's retries), or the cell stops unfinished"
            )
        else:
            out.append(f"note: {line} (within the profile's retries, {retries})")
    return out
