"""A study's plan before it runs: cells, tokens, disk per artifact, GPU-hours and GPU memory
per job.

Every figure comes from the code's own counters: the cell's resolved training config
(tokens, steps), the parameter and FLOP counter of the model it trains (on the meta device,
so any scale is free), the vocabulary's token dtype, the GPU table (`leviathan.gpus`), the
roofline's predicted MFU of the cell on its GPU model (`leviathan.model.roofline`: compiled
where runtime.compile is on, else eager; `--mfu` states one instead) and each job's memory
traced on FakeTensors (`leviathan.model.memory`; an evaluation job's: `leviathan.eval.memory`).
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
from pathlib import Path
from typing import Any

from leviathan import layout
from leviathan.cells import Cell, config_cells
from leviathan.eval.memory import eval_memory
from leviathan.model.memory import JobMemory, largest_fitting, refusal, train_memory
from leviathan.workflow.resolve import WEIGHT_BYTES, cell_train_config, checkpoint_bytes

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
        """The kept checkpoints on disk: fp32 weights each (train/kept.py)."""
        return self.kept_checkpoints * self.params * WEIGHT_BYTES


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
    from leviathan.train.config import workflow_runtime
    from leviathan.workflow.cluster import scale_resources

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
    from leviathan.model.roofline import roofline

    return tuple(roofline(cfg, micro, per_rank, fused=f).mfu(gpu) for f in (False, True))  # type: ignore[return-value]


def plan_cell(config: Mapping[str, Any], cell: Cell, mfu: float | None = None) -> CellPlan:
    """A cell's plan; GPU-hours at `mfu` where stated, else at the roofline's (`cell_mfu`)."""
    from leviathan.device import peak_flops
    from leviathan.model.accounting import account
    from leviathan.train.config import workflow_runtime
    from leviathan.workflow.cluster import scale_resources

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


# ---------------------------------------------------------------- evaluation

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
    from leviathan import layout
    from leviathan.manifest import read_manifest

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
    from leviathan.eval.config import PAPER_TASKS

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
    from pathlib import Path

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
    from pathlib import Path

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
    from leviathan.device import peak_flops
    from leviathan.model.accounting import account
    from leviathan.workflow.cluster import eval_resources

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
    from leviathan.workflow.along import along_evals

    return out + along_evals(config, cell, out)


@dataclass(frozen=True)
class StudyDisk:
    """Bytes on disk of a study at its peak (every cell trained, its evaluation done, each
    cell's step checkpoints still there) and once every cell is final."""

    corpus_text: int  # training text fetched (UTF-8; stored zstd-compressed: an upper bound)
    shards: int  # train.bin of every vocabulary (val.bin and counts are small beside them)
    step_checkpoints: int  # runtime.checkpoint.keep_last step checkpoints per cell, at most
    final_checkpoints: int  # checkpoints/final/ of every cell (weights + AdamW state)
    dvc_cache: int  # DVC's copy of data/, the final and kept checkpoints (0 where it links)
    steps_dropped_at_final: bool = False  # runtime.checkpoint.drop_steps_at_final
    set_aside: int = 0  # set-aside folders already in the study's run folders (kept, not planned)
    kept_checkpoints: int = (
        0  # checkpoints/kept/ of every cell (runtime.checkpoint.keep_at: weights only)
    )

    @property
    def total(self) -> int:
        """The peak: a cell holds its step checkpoints until its final one is written, and
        cells may train at once, so every cell's step checkpoints may be on disk together."""
        return (
            self.corpus_text
            + self.shards
            + self.step_checkpoints
            + self.final_checkpoints
            + self.dvc_cache
            + self.set_aside
            + self.kept_checkpoints
        )

    @property
    def at_end(self) -> int:
        """Once every cell is final: the step checkpoints gone where the config drops them."""
        return self.total - (self.step_checkpoints if self.steps_dropped_at_final else 0)

    def line(self) -> str:
        """One line for a plan or a rehearsal: the peak, each part, and the end state."""
        steps = (
            "removed as each cell is final: runtime.checkpoint.drop_steps_at_final"
            if self.steps_dropped_at_final
            else "kept after each cell is final: runtime.checkpoint.drop_steps_at_final is off"
        )
        return (
            f"disk at most {_size(self.total)} (peak), {_size(self.at_end)} once every cell is "
            f"final: corpus text {_size(self.corpus_text)}, shards {_size(self.shards)}, step "
            f"checkpoints {_size(self.step_checkpoints)} ({steps}), final checkpoints "
            f"{_size(self.final_checkpoints)}, "
            + (
                f"kept checkpoints {_size(self.kept_checkpoints)} (runtime.checkpoint.keep_at, versioned "
                "with the runs), "
                if self.kept_checkpoints
                else ""
            )
            + f"DVC cache {_size(self.dvc_cache)} "
            + (
                "(a copy of data/ and the final and kept checkpoints: .dvc/config's cache.type "
                "copies)"
                if self.dvc_cache
                else "(linked into the workspace, no second copy: .dvc/config's cache.type)"
            )
            + (
                f", set aside {_size(self.set_aside)} (checkpoints of other configs or damaged "
                "ones, kept in the run folders: remove them when no longer needed)"
                if self.set_aside
                else ""
            )
        )


def study_disk(
    config: Mapping[str, Any], plans: list[CellPlan] | None = None, mfu: float | None = None
) -> StudyDisk:
    """The disk a study needs, from the same counters as its plan (`plans`: plan_cell of
    every cell, where the caller has them). Callable by any script that checks a machine
    before a study runs (e.g. a rehearsal)."""
    from leviathan.data.tokenizers import token_dtype
    from leviathan.train.config import workflow_runtime
    from leviathan.vocab import get_vocab

    plans = (
        plans if plans is not None else [plan_cell(config, c, mfu) for c in config_cells(config)]
    )
    budgets = vocab_budgets(config)
    margin = 1 + float((config.get("corpus") or {})["size_margin"])
    text = max(corpus_bytes(config, budgets).values())  # fetched once for every vocabulary
    shards = sum(
        math.ceil(b * margin) * token_dtype(get_vocab(v).n_vocab).itemsize
        for v, b in budgets.items()
    )
    steps = sum(p.checkpoint_bytes * (p.checkpoints_on_disk - 1) for p in plans)
    final = sum(p.checkpoint_bytes for p in plans)
    kept = sum(p.kept_bytes for p in plans)
    cache = text + shards + final + kept if dvc_cache_copies() else 0
    dropped = workflow_runtime(config.get("runtime")).checkpoint.drop_steps_at_final
    aside = sum(set_aside_bytes(Path(layout.run_dir(p.cell))) for p in plans)
    return StudyDisk(text, shards, steps, final, cache, dropped, aside, kept)


# what a run sets aside and keeps (train/checkpoint.py, train/telemetry.py)
SET_ASIDE_GLOBS = ("*.stale-*", f"{layout.CHECKPOINTS}/*.damaged-*", "metrics.torn-*")


def set_aside_bytes(run_dir: Path) -> int:
    """Bytes of what a run folder holds set aside (checkpoints of another config or data,
    damaged checkpoints, torn metrics lines): on disk, outside the plan's own figures."""
    files = (
        f
        for pattern in SET_ASIDE_GLOBS
        for found in run_dir.glob(pattern)
        for f in ([found] if found.is_file() else found.rglob("*"))
    )
    return sum(f.stat().st_size for f in files if f.is_file())


def dvc_cache_copies(dvc_config: Path | None = None) -> bool:
    """Whether DVC may copy outputs into its cache (a second copy on disk): its `cache.type`
    (default the project's .dvc/config) is unset (DVC's default `reflink,copy`: a copy where
    the filesystem has no reflinks) or names `copy`. Links (hardlink, symlink) never copy."""
    import configparser

    parser = configparser.ConfigParser()
    parser.read(dvc_config or layout.repo_root() / ".dvc" / "config")
    cache_types = parser.get("cache", "type", fallback="reflink,copy").strip('"').split(",")
    return "copy" in {t.strip() for t in cache_types}


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
    from leviathan.workflow.along import along_note

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
            f"{_count(e.tokens) if e.tokens is not None else 'split':>12}" for e in evals
        )
        flops = sum(e.flops or 0.0 for e in evals)
        limit = evals[0].runtime_hours if evals else 0.0
        mem = "" if memory is None else f" {_memory(memory.get(p.cell)):>13}"
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


def _memory(job: Any) -> str:
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
    from leviathan.model import memory as m

    return (
        "GPU memory per job: peak per GPU of its step traced on FakeTensors (model/step_count.py) "
        f"+ logsumexp's hidden chunk temporary + DDP's gradient buckets or FSDP's gathered groups (several GPUs; leviathan/memory.py), "
        f"x {1 + m.FRAGMENTATION:.2f} (allocator fragmentation) + {m.CUDA_CONTEXT_BYTES / 2**30:.0f} GB "
        f"CUDA context (+ {m.NCCL_BYTES / 2**30:.0f} GB NCCL on several GPUs); of the GPU model's memory"
    )


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


SLURM_PROFILE = "profiles/slurm/config.yaml"  # the shipped profile, whose `retries` the plan reads


def profile_retries(profile: Path | None = None) -> int:
    """The `retries` of a Snakemake profile (default: the shipped SLURM profile of this
    checkout); 0 where it has none."""
    import yaml

    path = profile or layout.repo_root() / SLURM_PROFILE
    if not path.is_file():
        return 0
    return int((yaml.safe_load(path.read_text()) or {}).get("retries") or 0)


def training_attempts(config: Mapping[str, Any], plan: CellPlan) -> tuple[float, float, int]:
    """(predicted wall hours, the job's time limit in hours, attempts needed): a training job
    stopped at its limit resumes from its checkpoint in the next attempt."""
    from leviathan.workflow.cluster import scale_resources

    limit = float(scale_resources(config, plan.cell.scale)["runtime"]) / 60
    wall = (plan.gpu_hours or 0.0) / max(1, plan.gpus)
    return wall, limit, max(1, math.ceil(wall / limit)) if limit > 0 else 1


def training_time_warnings(
    config: Mapping[str, Any], plans: list[CellPlan], retries: int
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


def render_plan(config: Mapping[str, Any], mfu: float | None = None, memory: bool = True) -> str:
    """The study's plan as text (what `leviathan config show` prints after the config):
    GPU-hours at `mfu` where stated, else at each cell's roofline MFU; with `memory`, each
    job's GPU memory (`leviathan.model.memory`), a training micro-batch that does not fit
    refused (ValueError)."""
    from leviathan.data.tokenizers import token_dtype
    from leviathan.vocab import get_vocab

    plans = [plan_cell(config, c, mfu) for c in config_cells(config)]
    jobs = _job_memory(config, plans) if memory else {}
    source = (
        f"MFU {mfu:.0%} as stated (--mfu)"
        if mfu is not None
        else "the roofline's predicted MFU of each cell on its GPU model (model/roofline.py: "
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
        wall = f"{p.gpu_hours / p.gpus:,.1f}" if p.gpu_hours is not None else "-"
        total_hours += p.gpu_hours or 0.0
        mem = f" {_memory(jobs[p.cell][0]):>13}" if memory else ""
        lines.append(
            f"{p.cell.key:<40} {_count(p.params):>10} {_count(p.tokens):>10} {p.steps:>8,} "
            f"{p.train_flops / 1e15:>12,.1f} {_size(p.checkpoint_bytes):>10} {gpus:>9} "
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
            f"  {vocab:<12} budget {_count(budgets[vocab])} tokens -> text {_size(n)}, "
            f"train.bin about {_size(shard)} (uint{8 * itemsize})"
        )
    limit = fetch_max_bytes(config)
    lines.append(
        f"  fetch limit (corpus.max_bytes={corpus.get('max_bytes')!r}): "
        + (f"{_size(limit)} per split" if limit else "none: the whole corpus is streamed")
    )
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
    from leviathan.workflow.cluster import eval_resources, scale_resources

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
    from leviathan.workflow.cluster import scale_resources

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
