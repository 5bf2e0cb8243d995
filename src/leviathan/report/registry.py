"""The registry of the report's tables: each declared once (`TableDef`), with when the configured
studies yield it, how it is built and the files it is written to. The report rule's outputs
and the report itself both read it.

Tables (the paper's: config/paper_reported.yaml): main, downstream, ablation, vocabulary, frequency,
sample_efficiency, cost, paper_vs_ours (every reported number beside ours, where we trained
that scale) and metrics (per cell and seed); ours alone: throughput (measured beside the
roofline's prediction: leviathan.report.throughput), recon (LEV's reconstruction choices,
where the config has a study named `recon`: leviathan.report.recon).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from leviathan import layout
from leviathan.report.along_table import ALONG_TABLE, along_applies, along_table
from leviathan.report.builders import (
    ablation_table,
    cost_table,
    downstream_table,
    frequency_table,
    main_table,
    metrics_table,
    paper_vs_ours,
    vocabulary_table,
)
from leviathan.report.cellmap import DocumentCache
from leviathan.report.context import Context, ReportInputs, tied_and_leviathan
from leviathan.report.efficiency import sample_efficiency_table, seed_paired_variants
from leviathan.report.paper import Paper, paper_numbers
from leviathan.report.recon import recon_groups, recon_table
from leviathan.report.table import Table
from leviathan.report.throughput import THROUGHPUT, throughput_table


@dataclass(frozen=True)
class TableDef:
    """A report table: when the configured studies yield it, how it is built, its files."""

    name: str
    applies: Callable[[ReportInputs], bool]
    build: Callable[[Context, str], Table]
    formats: tuple[str, ...] = layout.TABLE_FORMATS  # the CSV and its renderings


def _always(inp: ReportInputs) -> bool:
    return True


# every table, in report order (a table is built after those it reads, paper_vs_ours last but one)
TABLES: dict[str, TableDef] = {
    d.name: d
    for d in [
        TableDef("main", lambda inp: bool(inp.study("main")), main_table),
        TableDef(
            "downstream",
            lambda inp: bool(inp.study("main")) and "lm_eval" in inp.evals,
            downstream_table,
        ),
        TableDef("ablation", lambda inp: bool(inp.study("ablation")), ablation_table),
        TableDef(
            "vocabulary",
            lambda inp: bool(tied_and_leviathan(inp.study("vocabulary"))),
            vocabulary_table,
        ),
        # does the result depend on LEV's reconstruction? (the study named `recon`)
        TableDef("recon", lambda inp: bool(recon_groups(inp)), recon_table),
        TableDef(
            "frequency", lambda inp: bool(tied_and_leviathan(inp.all_cells())), frequency_table
        ),
        TableDef(
            "sample_efficiency",
            lambda inp: bool(seed_paired_variants(inp)),
            sample_efficiency_table,
        ),
        TableDef(ALONG_TABLE, along_applies, along_table),  # config.evaluate.along
        TableDef("cost", _always, cost_table),
        TableDef(THROUGHPUT, _always, throughput_table),  # measured beside the roofline's
        TableDef("paper_vs_ours", _always, paper_vs_ours),
        # per cell and seed, flat; also JSON for DVC's `metrics:` (leviathan.report.formatting.render)
        TableDef("metrics", _always, metrics_table, (*layout.TABLE_FORMATS, "json")),
    ]
}


def table_names(inp: ReportInputs) -> list[str]:
    """The tables a config yields (the report rule declares exactly these as outputs)."""
    return [name for name, d in TABLES.items() if d.applies(inp)]


def build_tables(inp: ReportInputs, docs: DocumentCache) -> dict[str, Table]:
    """Every table the configured studies yield, in report order."""
    paper = Paper(docs.get(inp.paper_path), inp.paper_path)
    ctx = Context(inp, docs, paper, paper_numbers(paper))
    for name in table_names(inp):
        ctx.tables[name] = TABLES[name].build(ctx, name)
        ctx.tables[name].smoke_note = inp.smoke.note()
    return ctx.tables


def table_paths(out_dir: str | os.PathLike[str], name: str) -> dict[str, Path]:
    """A table's files: the CSV and its renderings (its TableDef's formats)."""
    formats = TABLES[name].formats if name in TABLES else TableDef.formats
    return layout.table_files(out_dir, name, formats)


def table_caption(paths: Mapping[str, str | os.PathLike[str]]) -> str:
    """Where Snakemake's report() reads a table's caption: the caption the report writes with
    the table (of its files by format, `table_paths`), as an absolute path (report() reads a
    relative one beside the rule file)."""
    return os.path.abspath(paths[layout.CAPTION_FORMAT])
