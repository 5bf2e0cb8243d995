"""The study's status, for the first page of the HTML report: what this run shows and what not.

Read from what the run produced (the report's metrics, paper_vs_ours, paper_check and throughput
CSVs, and each cell's final checkpoint, which also records the cell's kernel self-check), so it says
what was done, not what the config asked for. Written as reStructuredText
(`layout.status_file`), which `workflow/report/workflow.rst` includes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from leviathan import layout
from leviathan.cells import Cell
from leviathan.io import atomic_path
from leviathan.manifest import input_record, write_manifest
from leviathan.model import kernel_use
from leviathan.report.cellmap import DocumentCache
from leviathan.report.evidence import FULL, SmokePolicy, tokens_label
from leviathan.report.table import STAND_IN_COLUMN
from leviathan.report.throughput import measured_rows


@dataclass(frozen=True)
class ReportCsvs:
    """The report's CSVs the status reads."""

    metrics: str | os.PathLike[str]  # one row per cell
    paper_vs_ours: str | os.PathLike[str]  # the paper's reported point numbers beside ours
    paper_check: str | os.PathLike[str]  # the paper's reported numbers checked against each other
    throughput: str | os.PathLike[str] | None = None  # measured pace beside the roofline's

    def paths(self) -> list[str]:
        tables = (self.metrics, self.paper_vs_ours, self.paper_check, self.throughput)
        return [str(p) for p in tables if p is not None]


# the metrics table's columns of benchmark scores (WikiText-103, LAMBADA, the lm-eval tasks)
BENCHMARK_COLUMNS = ("wikitext_ppl", "lambada_ppl", "downstream_mean_acc")


@dataclass(frozen=True)
class StudyStatus:
    """Counts of what the study's run did, each from its outputs."""

    study: str
    scales: tuple[str, ...]  # the scales trained
    tokens: tuple[int, ...]  # each cell's training tokens, from its final checkpoint
    devices: tuple[str, ...]  # each cell's training device, from its final checkpoint
    full_cells: int  # cells at or above the smoke-test size (report.smoke_test)
    stand_in_cells: int  # cells with a number computed on offline stand-in data
    paper_numbers: int  # the paper's reported point numbers (paper_vs_ours rows)
    paper_numbers_ours: int  # of those, with ours at the same scale
    paper_numbers_full: int  # of those, with ours from full runs
    paper_checked: int  # the paper's reported numbers checked against each other (paper_check)
    paper_inconsistent: int  # of those, not following from the others
    smoke: SmokePolicy
    # each cell's kernel self-check, from its final checkpoint (env.kernel_check; None: the
    # cell records none): which fused kernels its last training process ran
    kernel_checks: tuple[Mapping[str, Any] | None, ...] = ()
    benchmark_cells: int = 0  # cells with a benchmark score (BENCHMARK_COLUMNS)
    # throughput rows with a measured step time, and of those measured on the device the plan
    # assumed for the scale (leviathan.report.throughput; None: no throughput table read)
    throughput: tuple[int, int] | None = None

    @property
    def cells(self) -> int:
        return len(self.tokens)

    def items(self) -> list[tuple[str, str]]:
        """(what, status) pairs, the headline first."""
        n = self.cells
        if self.paper_numbers_full:
            headline = (
                f"{self.paper_numbers_full} of the paper's {self.paper_numbers} reported figures "
                "have ours beside them from full runs at the same scale (``paper_vs_ours``)."
            )
        elif self.paper_numbers_ours:
            headline = (
                f"none of the paper's {self.paper_numbers} reported figures has ours from a full "
                "run at the same scale: no number of the paper is reproduced by this run "
                f"({self.paper_numbers_ours} have ours from smoke tests)."
            )
        else:
            headline = (
                f"none of the paper's {self.paper_numbers} reported figures has ours at the same "
                "scale (this run trains none of the paper's scales): no number of the paper is "
                "reproduced by this run."
            )
        smoke = n - self.full_cells
        evidence = (
            f"{smoke} of {n} cells are smoke tests, trained on fewer than "
            f"{self.smoke.below_tokens:,} tokens (report.smoke_test): {self.smoke.reason}."
            if smoke
            else f"all {n} cells are full runs (at least {self.smoke.below_tokens:,} tokens)."
        )
        gpu = [d for d in self.devices if d.startswith("cuda")]
        devices = ", ".join(f"{d} ({self.devices.count(d)})" for d in sorted(set(self.devices)))
        hardware = (
            f"{len(gpu)} of {n} cells trained on a GPU; by device: {devices}."
            if gpu
            else f"no cell trained on a GPU (by device: {devices}): the study's GPU figures "
            "(step time, MFU, memory, GPU-hours) are predictions, not measurements "
            "(``leviathan config show``, docs/gpu.md)."
        )
        benchmarks = self._benchmarks()
        paper = (
            f"{self.paper_inconsistent} of {self.paper_checked} of the paper's figures do not "
            "follow from its others (``paper_check``)."
        )
        return [
            ("Paper numbers", headline),
            (
                "Trained",
                f"{n} cells of study ``{self.study}`` (scales: {', '.join(self.scales)}; "
                f"{tokens_label(self.tokens)} tokens each).",
            ),
            ("Evidence", evidence),
            ("Hardware", hardware),
            *([("Throughput", self._throughput())] if self.throughput is not None else []),
            ("Benchmarks", benchmarks),
            ("Kernels", kernels_text(self.kernel_checks)),
            ("The paper itself", paper),
        ]

    def _benchmarks(self) -> str:
        n = self.cells
        if self.stand_in_cells:
            return (
                f"{self.stand_in_cells} of {n} cells have scores on the offline stand-ins of "
                "WikiText-103 and the lm-eval tasks (hand-written, in the official schemas): "
                "those scores mean nothing; the tables mark them."
            )
        if not self.benchmark_cells:
            return (
                "no benchmark (WikiText-103, LAMBADA, the lm-eval tasks) was scored: the "
                "study's scores are its own validation split's."
            )
        return f"{self.benchmark_cells} of {n} cells have benchmark scores, all on the benchmarks' own data."

    def _throughput(self) -> str:
        measured, on_plan = self.throughput or (0, 0)
        return (
            f"{on_plan} of {self.cells} cells had their throughput measured on the device the "
            f"plan assumes for their scale ({measured} measured at all); the others' step time, "
            "MFU and memory beside the roofline's are not the plan's (``throughput``)."
            if on_plan < self.cells
            else f"all {self.cells} cells had their throughput measured on the device the plan "
            "assumes for their scale (``throughput``; the roofline predicts GPUs only, so a "
            "CPU run's row says nothing was predicted for it)."
        )

    def rst(self) -> str:
        lines = [".. rubric:: Study status", ""]
        lines += [f"- **{what}**: {text}" for what, text in self.items()]
        return "\n".join(lines) + "\n"


def kernels_text(checks: Sequence[Mapping[str, Any] | None]) -> str:
    """What the cells' kernel self-checks say: the fused kernels that ran, and any that failed
    (their cells ran the plain torch path instead)."""
    n, recorded = len(checks), [c for c in checks if c is not None]
    if not recorded:
        return f"none of the {n} cells records a kernel self-check (trained before it existed)."
    ran: dict[str, int] = {}
    failed: dict[str, list[str]] = {}
    for check in recorded:
        for kernel, status in check["kernels"].items():
            if status == kernel_use.OK:
                ran[kernel] = ran.get(kernel, 0) + 1
            elif kernel_use.failed(status):
                failed.setdefault(kernel, []).append(status)
    text = "fused kernels that passed their self-check and ran: " + (
        ", ".join(f"{k} ({ran[k]} of {n} cells)" for k in kernel_use.KERNELS if k in ran) or "none"
    )
    text += "; " + (
        "; ".join(
            f"{k} failed its self-check in {len(s)} of {n} cells, which ran the plain torch "
            f"path instead (first: ``{_literal(s[0])}``)"
            for k, s in failed.items()
        )
        or "none failed"
    )
    if len(recorded) < n:
        text += f"; {n - len(recorded)} of {n} cells record no check (trained before it existed)"
    return text + " (``env.kernel_check`` of each cell's final checkpoint)."


def _literal(text: str) -> str:
    """`text` as it may stand inside a reStructuredText literal (no backquotes)."""
    return text.replace("`", "'")


def study_status(
    study: str,
    cells: Sequence[Cell],
    tables: ReportCsvs,
    smoke: SmokePolicy,
    docs: DocumentCache | None = None,
) -> StudyStatus:
    """The status of a study's run from its cells' final checkpoints and its report's CSVs."""
    docs = docs or DocumentCache()
    states = [docs.get(layout.final_marker(c)) for c in cells]
    metrics = pd.read_csv(tables.metrics, dtype={STAND_IN_COLUMN: str})
    paper = pd.read_csv(tables.paper_vs_ours)
    check = pd.read_csv(tables.paper_check)
    ours = paper[paper["ours"].notna()]
    scored = [c for c in BENCHMARK_COLUMNS if c in metrics]
    return StudyStatus(
        study=study,
        scales=tuple(dict.fromkeys(str(c.scale) for c in cells)),
        tokens=tuple(int(s["tokens"]) for s in states),
        devices=tuple(str((s.get("env") or {}).get("device") or "unknown") for s in states),
        full_cells=sum(not smoke.is_smoke([int(s["tokens"])]) for s in states),
        stand_in_cells=int(metrics[STAND_IN_COLUMN].fillna("").astype(bool).sum())
        if STAND_IN_COLUMN in metrics
        else 0,
        paper_numbers=len(paper),
        paper_numbers_ours=len(ours),
        paper_numbers_full=int((ours["evidence"] == FULL).sum()),
        paper_checked=len(check),
        paper_inconsistent=int((~check["ok"].astype(bool)).sum()),
        smoke=smoke,
        kernel_checks=tuple((s.get("env") or {}).get("kernel_check") for s in states),
        benchmark_cells=int(metrics[scored].notna().any(axis=1).sum()) if scored else 0,
        throughput=_throughput_counts(tables.throughput),
    )


def _throughput_counts(csv: str | os.PathLike[str] | None) -> tuple[int, int] | None:
    """(rows with a measured step time, of those measured on the plan's device)."""
    if csv is None:
        return None
    frame = pd.read_csv(csv)
    measured = int(sum(isinstance(v, float) and math.isfinite(v) for v in frame["step_s"]))
    return measured, sum(measured_rows(csv))


def write_status(status: StudyStatus, out: str | os.PathLike[str], inputs: Sequence[str]) -> Path:
    """`status` as reStructuredText at `out`, with a manifest naming what it was read from."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        tmp.write_text(status.rst())
    write_manifest(out, artifact_type="study_status", inputs=[input_record(p) for p in inputs])
    return out
