"""The throughput table: each cell's measured speed and memory beside the plan's prediction.

One row per trained cell, read from the run's own metrics log (`metrics.jsonl`): the device and
device count of its last start record, and from its train records tokens/s, step time, MFU
(the median of the last `STEADY_RECORDS` records of a process, each process's first record left
out: it holds the compile and warm-up), the peak allocated memory and the compile seconds.
Beside each, the roofline's prediction (leviathan.cost.roofline, the plan's model of a step)
for the device the run ran on, and measured/predicted; the roofline predicts known GPUs only,
so a CPU run's row says that nothing was predicted for it. Last, each variant's step time over
the tied and the untied cell's of the same scale, vocabulary and seed on the same device (LEV's
cost as the paper's v1 reported it), measured and predicted.

Every value is a declared `ValueSpec` (leviathan.report.cellmap): the predictions are computed by
the `predicted_*` ops (leviathan.report.predicted) from the final checkpoint's recorded model and training config and the
start record's device, so `leviathan audit` recomputes them as it recomputes the rest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from leviathan import layout
from leviathan.cells import Cell
from leviathan.gpus import gpu_model
from leviathan.report.cellmap import DocumentCache, Source, ValueSpec
from leviathan.report.context import Context
from leviathan.report.evidence import EVIDENCE_COLUMNS
from leviathan.report.predicted import PREDICTED
from leviathan.report.table import Table
from leviathan.study.cluster import scale_resources
from leviathan.train.log_anchor import verify_log

THROUGHPUT = "throughput"
STEADY_RECORDS = 32  # of a run's steady train records, the last this many are its pace
NO_PREDICTION = "none: the roofline predicts known GPUs only"
# measured column -> (how the measurement is read from the train records, its format)
MEASURED = {
    "tokens_per_s": ("median", "int"),
    "step_s": ("median", "num"),
    "mfu": ("median", "share"),
    "peak_memory": ("max", "gb"),
    "compile_s": ("sum", "num"),
}
# the step-time ratios of every other variant over these baselines (same scale, vocab, seed)
RATIO_BASELINES = ("tied", "untied")


def _columns() -> dict[str, str]:
    cols: dict[str, str] = {}
    for name, (_, fmt) in MEASURED.items():
        cols[name] = fmt
        if name in PREDICTED:
            cols[f"predicted_{name}"] = fmt
            cols[f"{name}_ratio"] = "num"
    for base in RATIO_BASELINES:
        cols[f"step_s_vs_{base}"] = "num"
        cols[f"predicted_step_s_vs_{base}"] = "num"
    return cols


def log_path(cell: Cell) -> str:
    return str(layout.metrics_file(layout.run_dir(cell)))


def _processes(records: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """The indices of the train records of each training process (a start record opens one)."""
    out: list[list[int]] = []
    for i, rec in enumerate(records):
        if rec.get("kind") == "start" or not out:
            out.append([])
        if rec.get("kind") == "train":
            out[-1].append(i)
    return [p for p in out if p]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def measured_specs(path: str, records: Sequence[Mapping[str, Any]]) -> dict[str, ValueSpec]:
    """The measured columns' values of one run's log, each from the train records that hold it
    as a number (a column none holds is left out: a CPU's MFU, an older log's memory)."""
    out = {}
    for name, (op, _) in MEASURED.items():
        procs = [[i for i in p if _number(records[i].get(name))] for p in _processes(records)]
        procs = [p for p in procs if p]
        if not procs:
            continue
        steady = [i for p in procs for i in p[1:]][-STEADY_RECORDS:] or [procs[-1][-1]]
        rows = {
            "median": steady,
            "max": [i for p in procs for i in p],
            "sum": [p[-1] for p in procs],  # each process's compile seconds so far, at its end
        }[op]
        out[name] = ValueSpec(op, tuple(Source(path, f"/{i}/{name}") for i in rows))
    return out


def _start(records: Sequence[Mapping[str, Any]]) -> tuple[int, Mapping[str, Any]] | None:
    starts = [(i, r) for i, r in enumerate(records) if r.get("kind") == "start"]
    return starts[-1] if starts else None


def predicted_specs(
    cell: Cell, path: str, start: tuple[int, Mapping[str, Any]]
) -> dict[str, ValueSpec]:
    """The roofline's predictions for the run's device: from the final checkpoint's recorded
    model and training config (group a) and the start record's device, device count and
    compile flag (group b)."""
    i, rec = start
    state = layout.final_marker(cell)
    fields = [f for f in ("device", "world_size", "compile") if f in rec]
    sources = (
        Source(state, "/model_config"),
        Source(state, "/train_config"),
        *(Source(path, f"/{i}/{f}", "b") for f in fields),
    )
    return {name: ValueSpec(f"predicted_{name}", sources) for name in PREDICTED}


def throughput_table(ctx: Context, name: str) -> Table:
    t = Table(
        name,
        "Throughput per cell from its run's metrics log (the median of its last "
        f"{STEADY_RECORDS} train records, each process's first left out; peak_memory: the most "
        "bytes allocated in tensors, GPU only; compile_s: seconds spent compiling) beside the "
        "roofline's prediction for the device it ran on (leviathan.cost.roofline; memory: the "
        "traced live tensors of leviathan.cost.memory, without the CUDA context) and "
        "measured/predicted (*_ratio); step_s_vs_tied/untied: its step time over that cell's of "
        "the same scale, vocabulary and seed on the same device (> 1 = slower; LEV's cost as "
        "the paper's v1 reported it, 23-51% slower, its v2 none). plan_device: "
        "the device the plan assumes for the scale (config.resources)",
        ["scale", "vocab", "variant", "seed", "device", "devices", "plan_device", "prediction"]
        + list(EVIDENCE_COLUMNS),
        _columns(),
        source="each run's metrics log and final checkpoint, and the roofline on them",
    )
    steps: dict[tuple[str, str, int, str], tuple[str, str, ValueSpec | None, ValueSpec | None]] = {}
    groups = ctx.inp.all_cells()
    check_logs([c for cells in groups.values() for c in cells], ctx.docs)
    for (scale, vocab, variant), cells in groups.items():
        for cell in cells:
            row, device, measured, predicted = _cell_row(ctx, t, cell)
            key = (scale, vocab, cell.seed, variant)
            steps[key] = (row, device, measured.get("step_s"), predicted.get("step_s"))
    _ratios(t, steps)
    return t


def _cell_row(
    ctx: Context, t: Table, cell: Cell
) -> tuple[str, str, dict[str, ValueSpec], dict[str, ValueSpec]]:
    path = log_path(cell)
    records = ctx.docs.get(path) if ctx.docs.path(path).is_file() else []
    start = _start(records)
    device = str(start[1].get("device", "unknown")) if start else "unknown"
    count = int(start[1].get("world_size", 1)) if start else 0
    # a prediction needs the run's GPU model and device count (every start record has both)
    model = gpu_model(device) if start and "world_size" in start[1] else None
    compiled = bool(start and start[1].get("compile"))
    row = t.add_row(
        cell.key,
        scale=cell.scale,
        vocab=cell.vocab,
        variant=cell.variant,
        seed=cell.seed,
        device=device,
        devices=count,
        plan_device=ctx.inp.plan_devices.get(cell.scale) or "not stated",
        prediction=(
            f"roofline, {model.name}, {'compiled' if compiled else 'eager'}"
            if model and start
            else f"{NO_PREDICTION} (this run: {device})"
        ),
        **ctx.evidence([cell]),
    )
    measured = measured_specs(path, records)
    predicted = predicted_specs(cell, path, start) if model and start else {}
    for col, spec in measured.items():
        t.set(row, col, spec)
        if col in predicted:
            t.set(row, f"predicted_{col}", predicted[col])
            t.set(row, f"{col}_ratio", ValueSpec("ratio_of", parts=(predicted[col], spec)))
    return row, f"{device} x{count}", measured, predicted


def _ratios(t: Table, steps: Mapping[tuple[str, str, int, str], tuple[str, str, Any, Any]]) -> None:
    """Each variant's step time over its baselines' on the same device, measured and predicted."""
    for (scale, vocab, seed, variant), (row, device, step, pred) in steps.items():
        for base in RATIO_BASELINES:
            other = steps.get((scale, vocab, seed, base))
            if variant in RATIO_BASELINES or other is None or other[1] != device:
                continue
            if step is not None and other[2] is not None:
                t.set(row, f"step_s_vs_{base}", ValueSpec("ratio_of", parts=(other[2], step)))
            if pred is not None and other[3] is not None:
                t.set(
                    row,
                    f"predicted_step_s_vs_{base}",
                    ValueSpec("ratio_of", parts=(other[3], pred)),
                )


def plan_devices(config: Mapping[str, Any], scales: Sequence[str]) -> dict[str, str]:
    """The device the plan assumes for each scale's training job (config.resources):
    `H100 x8`, or `cpu`."""
    out = {}
    for scale in scales:
        res = scale_resources(config, scale)
        gpus = int(res["gpus"]) * int(res["nodes"])
        model = gpu_model(res["gpu_model"]) if gpus else None
        out[scale] = (
            f"{model.name if model else res['gpu_model'] or 'GPU'} x{gpus}" if gpus else "cpu"
        )
    return out


def on_plan_device(device: str, count: Any, plan: str) -> bool:
    """Whether a row's measured device and count are those the plan assumed (its `plan_device`)."""
    if plan == "cpu" or not plan:
        return device == "cpu" and plan == "cpu"
    name, _, n = plan.rpartition(" x")
    model = gpu_model(device)
    return model is not None and model.name == name and str(count) == n


def measured_rows(csv: str | Path) -> list[bool]:
    """Per row of a throughput CSV: whether it was measured on the device the plan assumed."""
    frame = pd.read_csv(csv, dtype={"device": str, "plan_device": str})
    return [
        on_plan_device(str(d), c, str(p) if isinstance(p, str) else "") and _number(s)
        for d, c, p, s in zip(
            frame["device"], frame["devices"], frame["plan_device"], frame["step_s"], strict=True
        )
    ]


def check_logs(cells: Sequence[Cell], docs: DocumentCache) -> None:
    """Refuse a run's log that is not as training wrote it (leviathan.train.log_anchor)."""
    for cell in cells:
        if docs.path(log_path(cell)).is_file():
            verify_log(Path(layout.run_dir(cell)))
