"""Write the report: every table as CSV + Markdown + LaTeX, and the figures, each with a manifest.

A table's CSV keeps full precision and its manifest carries the cell map (where every number
comes from) and the sha256 of every file the numbers were read from; the Markdown and LaTeX
files are renderings of it (their manifests name the CSV as their one input).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from leviathan import layout
from leviathan.anchor import check_report_input
from leviathan.eval.config import enabled_evals
from leviathan.eval.run import along_enabled
from leviathan.io import atomic_path
from leviathan.layout import CAPTION_FORMAT, PLAIN_TABLE_FORMATS, dvc_metrics_file, table_files
from leviathan.manifest import display_path, input_record, read_manifest, write_manifest
from leviathan.report.cellmap import DocumentCache
from leviathan.report.context import ReportInputs
from leviathan.report.evidence import SmokePolicy, recipe_label
from leviathan.report.formatting import caption_rst, dvc_metrics, render
from leviathan.report.paper import reported_path
from leviathan.report.paper_consistency import CHANGE_SIGN, PERCENT, consistency_checks
from leviathan.report.registry import build_tables, table_paths
from leviathan.report.status_page import ReportCsvs, study_status, write_status
from leviathan.report.table import STAND_IN_COLUMN, Table
from leviathan.report.throughput import plan_devices

PAPER_CHECK = "paper_check"  # the paper's own consistency (CSV + Markdown + caption)
PAPER_CHECK_TITLE = "The paper's figures checked against each other"
PAPER_CHECK_NOTE = (
    "Each derived figure (PPL = exp(loss), relative changes and gains, the mean downstream gain) "
    "is recomputed from the figures it comes from; those that differ beyond their rounding are "
    "flagged (`leviathan report paper-check` prints the same)."
)


def report_inputs(
    config: Mapping[str, Any], paper_path: str | os.PathLike[str] | None = None
) -> ReportInputs:
    """What the report reads, from the workflow config (studies, enabled evaluations)."""
    scales = {str(s) for study in config["studies"].values() for s in study["scales"]}
    return ReportInputs(
        studies=config["studies"],
        results=layout.config_results_key(config),
        evals=enabled_evals(config),
        paper_path=display_path(paper_path or reported_path()),
        smoke=SmokePolicy.from_config(config) if "report" in config else SmokePolicy.default(),
        train={k: v for k, v in (config.get("train") or {}).items() if "/" not in str(k)},
        along=along_enabled(config),
        plan_devices=plan_devices(config, sorted(scales)),
    )


def table_from_csv(
    csv: str | os.PathLike[str], manifest: Mapping[str, Any]
) -> tuple[Table, pd.DataFrame]:
    """A table's layout (from its manifest) and values (from its CSV): what the renderings show."""
    config = manifest["config"]
    frame = pd.read_csv(csv, dtype={"row": str, STAND_IN_COLUMN: str})
    labels = [
        c for c in frame.columns if c not in ("row", STAND_IN_COLUMN) and c not in config["columns"]
    ]
    table = Table(config["table"], config["title"], labels, dict(config["columns"]))
    table.smoke_note = config.get("smoke_note", "")
    table.source = config.get("source", table.source)
    return table, frame


def write_table(
    table: Table,
    docs: DocumentCache,
    out_dir: str | os.PathLike[str],
    started: _dt.datetime | None = None,
) -> dict[str, Path]:
    """Write one table's CSV, Markdown and LaTeX files with their manifests."""
    paths = table_paths(out_dir, table.name)
    frame = table.frame(docs)
    with atomic_path(paths["csv"]) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.17g")
    write_manifest(
        paths["csv"],
        artifact_type="table",
        inputs=[input_record(docs.path(p)) for p in table.sources()],
        config={
            "table": table.name,
            "title": table.title,
            "columns": table.columns,
            "smoke_note": table.smoke_note,
            "source": table.source,  # what the renderings say the values are read from
        },
        fields={"table": table.name, "cells": table.cell_map(), "row_column": "row"},
        started=started,
    )
    for fmt in (f for f in paths if f != "csv"):
        content = render(table, frame, fmt)
        with atomic_path(paths[fmt]) as tmp:
            tmp.write_text(content)
        write_manifest(
            paths[fmt],
            artifact_type="table_rendering",
            inputs=[input_record(paths["csv"])],
            fields={"table": table.name, "rendering_of": display_path(paths["csv"])},
        )
    return paths


def write_dvc_metrics(table: Table, csv: Path, out_dir: str | os.PathLike[str]) -> list[Path]:
    """The per-cell DVC metrics files of the metrics table (renderings of its CSV; the manifest of
    the CSV traces their numbers) in the study's own `out_dir`; files there of cells no longer in
    the study are removed (another study's, in their own directory, are not touched)."""
    written = []
    for row, doc in dvc_metrics(table, table_from_csv(csv, read_manifest(csv))[1]).items():
        path = dvc_metrics_file(out_dir, row)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(doc, indent=2) + "\n")
        written.append(path)
    for stale in set(Path(out_dir).rglob("*.json")) - set(written):
        stale.unlink()
    return written


def write_paper_check(out_dir: str | os.PathLike[str], paper_path: str) -> list[Path]:
    """The paper's own consistency (leviathan.report.paper_consistency) as CSV + Markdown: what
    does not add up (relative changes as fractions in the CSV, in % in the Markdown)."""
    frame = pd.DataFrame([c.to_dict() for c in consistency_checks()])
    numbers = ["reported", "recomputed", "difference", "tolerance"]
    frame = frame[["what", *numbers, "unit", "ok"]]
    files = table_files(out_dir, PAPER_CHECK, PLAIN_TABLE_FORMATS)
    with atomic_path(files["csv"]) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.17g")
    shown = frame.copy()
    shown.loc[shown["unit"] == PERCENT, numbers] *= 100.0
    bad = shown[~shown["ok"]]
    shown = shown.assign(status=["ok" if ok else "DOES NOT ADD UP" for ok in shown["ok"]]).drop(
        columns=["ok"]
    )
    text = (
        f"# {PAPER_CHECK_TITLE}\n\n{PAPER_CHECK_NOTE} {CHANGE_SIGN}\n\n{len(bad)} of "
        f"{len(frame)} reported figures do not follow from the others (beyond their rounding):\n\n"
        + "".join(
            f"- {w}: reported {r:g}{u if u == PERCENT else ''}, recomputed {c:.4g}"
            f"{u if u == PERCENT else ''}\n"
            for w, r, c, u in zip(
                bad["what"], bad["reported"], bad["recomputed"], bad["unit"], strict=True
            )
        )
        + f"\n{shown.to_markdown(index=False, floatfmt='.4g')}\n"
    )
    caption = caption_rst([f"{PAPER_CHECK_TITLE}.", PAPER_CHECK_NOTE, CHANGE_SIGN])
    for fmt, content in (("md", text), (CAPTION_FORMAT, caption)):
        with atomic_path(files[fmt]) as tmp:
            tmp.write_text(content)
    for path in files.values():
        write_manifest(path, artifact_type=PAPER_CHECK, inputs=[input_record(paper_path)])
    return list(files.values())


def _write_status(
    inp: ReportInputs,
    cells: Sequence[Any],
    csvs: Mapping[str, Path],
    docs: DocumentCache,
    tables_dir: str | os.PathLike[str],
    out: str | os.PathLike[str] | None,
) -> Path:
    tables = ReportCsvs(
        csvs["metrics"], csvs["paper_vs_ours"], csvs[PAPER_CHECK], csvs.get("throughput")
    )
    found = study_status(inp.results, cells, tables, inp.smoke, docs)
    inputs = tables.paths() + [layout.final_marker(c) for c in cells]
    # default: beside the tables directory, as layout.status_file places it beside the study's
    return write_status(found, out or Path(tables_dir).parent / layout.STATUS_FILE, inputs)


def write_report(
    config: Mapping[str, Any],
    tables_dir: str | os.PathLike[str],
    figures_dir: str | os.PathLike[str] | None,
    sample_efficiency: Sequence[str | os.PathLike[str]] = (),
    metrics_dir: str | os.PathLike[str] | None = None,
    along: Sequence[str | os.PathLike[str]] = (),
    status_file: str | os.PathLike[str] | None = None,
) -> list[Path]:
    """Every table (and, unless figures_dir is None, every figure) of the configured studies,
    the per-cell DVC metrics files (default: the study's, `layout.dvc_metrics_dir_of`) and the
    study's status (leviathan.report.status_page; default: beside tables_dir)."""
    started = _dt.datetime.now(_dt.UTC)
    inp = report_inputs(config)
    docs = DocumentCache(check=check_report_input)  # nothing read that is not as written
    tables = build_tables(inp, docs)
    written: list[Path] = []
    csvs: dict[str, Path] = {}
    for table in tables.values():
        paths = write_table(table, docs, tables_dir, started)
        csvs[table.name] = paths["csv"]
        written.extend(paths.values())
    metrics_dir = metrics_dir or layout.dvc_metrics_dir_of(inp.results)
    written.extend(write_dvc_metrics(tables["metrics"], csvs["metrics"], metrics_dir))
    paper_check = write_paper_check(tables_dir, inp.paper_path)
    written.extend(paper_check)
    cells = [c for group in inp.all_cells().values() for c in group]
    csvs[PAPER_CHECK] = paper_check[0]
    written.append(_write_status(inp, cells, csvs, docs, tables_dir, status_file))
    if figures_dir is not None:
        # imported here: the figures import matplotlib, and the workflow's parse imports this
        # module
        from leviathan.report.figures import write_figures

        written.extend(
            write_figures(
                csvs,
                [Path(p) for p in sample_efficiency],
                figures_dir,
                inp.smoke,
                cells,
                [Path(p) for p in along],
                {c.key: recipe_label([c], docs, inp.train) for c in cells},
            )
        )
    return written
