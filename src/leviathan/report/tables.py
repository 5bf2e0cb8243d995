"""The paper's tables, from our evaluation outputs, beside the paper's reported figures.

Every table is a list of rows (an id such as `400m/o200k_base/leviathan`, text labels) and
numeric columns whose cells are declared as `CellSpec`s (leviathan.report.cellmap): the
value is computed from the fields of the files it names, and that declaration is saved in
the table's manifest (its cell map), so `leviathan audit` can trace and re-check any number.

Tables (the paper's, SPEC section 6): main, downstream, ablation, vocabulary, frequency,
cost, paper_vs_ours (every reported figure beside ours, where we trained that scale) and
metrics (per cell and seed). Each is declared once, in TABLES: its name, when the configured
studies yield it, how it is built, the files it is written to.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from leviathan import layout
from leviathan.paper import Paper
from leviathan.report.basis import (
    BASIS_COLUMNS,
    FULL,
    GAIN_CONVENTION,
    SMOKE,
    SmokePolicy,
    basis_labels,
)
from leviathan.report.cellmap import (
    CI_SUFFIX,
    CellSpec,
    DocumentCache,
    Source,
    cell_stand_ins,
    compute,
)
from leviathan.workflow.grid import Cell, study_cells

PAPER_TASKS = ["hellaswag", "arc_easy", "arc_challenge", "piqa", "winogrande", "lambada_openai"]
PAPER_MAIN_VOCAB = "o200k_base"  # the paper's main study and ablation use o200k
# WikiText-103 perplexity per word (lm-eval's wikitext metric): independent of the tokenizer,
# so vocabularies and the paper compare; token-level perplexity is in the evaluation JSON too
WIKITEXT_PPL = "/results/word_perplexity"
LOSS = "/results/overall/loss"
VAL_TARGETS = "/results/overall/targets"  # the validation tokens a loss rests on (its sample)
LAMBADA_PPL = "/results/tasks/lambada_openai/metrics/perplexity,none"
# main-table column -> the paper's key for it under `main.<scale>.<variant>` (paper_reported.yaml)
# and the op that gives our column's quantity: the paper states its val PPL change (negative =
# better); our val_ppl_gain is its negative (GAIN_CONVENTION: positive = better)
MAIN_PAPER_FIGURES = {
    "val_loss": ("val_loss", "mean"),
    "val_ppl": ("val_ppl", "mean"),
    "val_ppl_gain": ("val_ppl_change", "neg"),
    "wikitext_ppl_gain": ("wikitext103_ppl_gain", "mean"),
    "lambada_ppl_gain": ("lambada_ppl_gain", "mean"),
}

# column -> how it is shown in Markdown/LaTeX: "loss" 4 decimals, "pct" a fraction in %,
# "points" already in percent/points, "int" an integer count, "ppl" 2 decimals
FORMATS = {
    "loss": "{:.4f}",
    "ppl": "{:.2f}",
    "pct": "{:+.2f}%",
    "points": "{:.1f}",
    "dpoints": "{:+.1f}",
    "int": "{:,.0f}",
    "num": "{:.4g}",
}
# A column's 95% confidence half-width over seeds (`<column>_ci95`, Student t; paired by seed for a
# gain over tied) is shown as "±" in the column's own format.
CI_FORMAT = {
    "loss": "±{:.4f}",
    "ppl": "±{:.2f}",
    "pct": "±{:.2f}%",
    "points": "±{:.1f}",
    "dpoints": "±{:.1f}",
    "num": "±{:.4g}",
    "int": "±{:,.0f}",
}
# The label column naming, per row, the numeric columns computed on offline stand-in data; the
# Markdown and LaTeX renderings mark those values with STAND_IN_MARK and say why.
STAND_IN_COLUMN = "stand_in_data"
STAND_IN_MARK = "\u2020"
STAND_IN_NOTE = (
    f"{STAND_IN_MARK} computed on the offline stand-in data (workflow/resources/smoke/, a few "
    "hand-written examples that check the pipeline runs): not the benchmark, not comparable "
    "to the paper's figures."
)


@dataclass
class Table:
    name: str
    title: str
    label_columns: list[str]
    columns: dict[str, str]  # numeric column -> format kind (FORMATS)
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # row id -> labels
    smoke_note: str = ""  # what a row whose `evidence` is SMOKE means (SmokePolicy.note)
    cells: dict[tuple[str, str], CellSpec] = field(default_factory=dict)

    def add_row(self, row: str, **labels: Any) -> str:
        if "," in row:
            raise ValueError(
                f"row id {row!r} must not contain a comma (cells are addressed ROW,COL)"
            )
        self.rows[row] = labels
        return row

    def set(self, row: str, column: str, spec: CellSpec | None) -> None:
        """Declare a cell; where the table has `<column>_ci95`, its confidence interval too."""
        if column not in self.columns:
            raise KeyError(f"{self.name}: no column {column!r}")
        if spec is not None and spec.leaves():
            self.cells[row, column] = spec
            if column + CI_SUFFIX in self.columns and not spec.parts:
                self.cells[row, column + CI_SUFFIX] = CellSpec(spec.op + CI_SUFFIX, spec.sources)

    def with_ci(self, *columns: str) -> None:
        """Add `<column>_ci95` after each of `columns` (call before setting cells)."""
        out: dict[str, str] = {}
        for col, kind in self.columns.items():
            out[col] = kind
            if col in columns:
                out[col + CI_SUFFIX] = "ci_" + kind
        self.columns = out

    def frame(self, docs: DocumentCache) -> pd.DataFrame:
        records = []
        for row, labels in self.rows.items():
            rec: dict[str, Any] = {"row": row, **{c: labels.get(c) for c in self.label_columns}}
            stand_in = []
            for col in self.columns:
                spec = self.cells.get((row, col))
                rec[col] = compute(spec, docs) if spec is not None else math.nan
                if spec is not None and cell_stand_ins(spec, docs):
                    stand_in.append(col)
            rec[STAND_IN_COLUMN] = ";".join(stand_in)
            records.append(rec)
        return pd.DataFrame(
            records, columns=["row", *self.label_columns, STAND_IN_COLUMN, *self.columns]
        )

    def cell_map(self) -> list[dict[str, Any]]:
        return [{"row": r, "column": c, **spec.to_dict()} for (r, c), spec in self.cells.items()]

    def sources(self) -> list[str]:
        return sorted({s.path for spec in self.cells.values() for s in spec.leaves()})


def missing(value: Any) -> bool:
    """An empty cell (not applicable or not run): None or NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _fmt(value: Any, kind: str) -> str:
    if missing(value):
        return "-"
    ci = kind.startswith("ci_")
    base = kind.removeprefix("ci_")
    fmt = CI_FORMAT[base] if ci else FORMATS[base]
    return fmt.format(100.0 * value if base == "pct" else value)


def smoke_rows(frame: pd.DataFrame) -> list[bool]:
    """Per row: whether it rests on a smoke test (its `evidence` label; see leviathan.report.basis)."""
    col = frame["evidence"] if "evidence" in frame else [FULL] * len(frame)
    return [v == SMOKE for v in col]


def _label(value: Any) -> Any:
    if missing(value):
        return "-"
    return int(value) if isinstance(value, float) and value.is_integer() else value


def stand_in_rows(frame: pd.DataFrame) -> list[set[str]]:
    """Per row: the columns computed on offline stand-in data."""
    col = frame[STAND_IN_COLUMN] if STAND_IN_COLUMN in frame else [""] * len(frame)
    return [set(str(v).split(";")) - {""} if isinstance(v, str) else set() for v in col]


def rendered(table: Table, frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as text for Markdown/LaTeX (the CSV keeps full precision); values computed on
    stand-in data carry STAND_IN_MARK."""
    out = frame.drop(columns=["row", STAND_IN_COLUMN], errors="ignore").copy().astype(object)
    for col in table.label_columns:  # an empty label (e.g. the paper's row) as "-", counts as ints
        out[col] = [_label(v) for v in out[col]]
    marked = stand_in_rows(frame)
    for col, kind in table.columns.items():
        out[col] = [
            _fmt(v, kind) + (STAND_IN_MARK if col in m and _fmt(v, kind) != "-" else "")
            for v, m in zip(frame[col], marked, strict=True)
        ]
    return out


# ---------------------------------------------------------------- building blocks


def _eval(c: Cell, kind: str) -> str:
    return layout.eval_output(c, kind)


def _src(cells: Iterable[Cell], kind: str, pointer: str, group: str = "a") -> tuple[Source, ...]:
    return tuple(Source(_eval(c, kind), pointer, group) for c in cells)


def _pair(op: str, ref: Iterable[Cell], cmp: Iterable[Cell], kind: str, pointer: str) -> CellSpec:
    return CellSpec(op, _src(ref, kind, pointer, "a") + _src(cmp, kind, pointer, "b"))


def _state(cells: Iterable[Cell], group: str = "a") -> tuple[Source, ...]:
    return tuple(Source(layout.final_marker(c), "/model_config", group) for c in cells)


def variant_order() -> list[str]:
    """The variants in the registry's order (tied first); imported here, not at parse time of the workflow."""
    from leviathan.model.variants import VARIANTS

    return list(VARIANTS)


def _order(c: Cell) -> tuple[Any, ...]:
    from leviathan.scales import SCALES

    scales, variants = list(SCALES), variant_order()
    return (
        scales.index(c.scale) if c.scale in scales else len(scales),
        c.scale,
        c.vocab,
        variants.index(c.variant) if c.variant in variants else len(variants),
        c.variant,
        c.seed,
    )


def _groups(cells: Iterable[Cell]) -> dict[tuple[str, str, str], list[Cell]]:
    """Cells by (scale, vocab, variant), tied first: seeds of one configuration are averaged."""
    out: dict[tuple[str, str, str], list[Cell]] = defaultdict(list)
    for c in sorted(set(cells), key=_order):
        out[c.scale, c.vocab, c.variant].append(c)
    return dict(out)


CONFIG_LABELS = ["scale", "vocab", "variant", "seeds", *BASIS_COLUMNS]


def _config_row(
    ctx: Context, t: Table, scale: str, vocab: str, variant: str, cells: Sequence[Cell]
) -> str:
    """The row of one configuration, its seeds averaged: `<scale>/<vocab>/<variant>`, with
    what its numbers rest on (training tokens, smoke test or not)."""
    return t.add_row(
        f"{scale}/{vocab}/{variant}",
        scale=scale,
        vocab=vocab,
        variant=variant,
        seeds=len(cells),
        **ctx.basis(cells),
    )


def _seeded(groups: Mapping[tuple[str, str, str], list[Cell]]) -> bool:
    """Whether any configuration has 2 or more seeds: its tables then give 95% CIs."""
    return any(len(cells) >= 2 for cells in groups.values())


@dataclass(frozen=True)
class ReportInputs:
    studies: Mapping[str, Mapping[str, Any]]
    evals: Sequence[str]  # enabled evaluation kinds (val always)
    paper_path: str  # config/paper_reported.yaml as recorded
    smoke: SmokePolicy = field(default_factory=SmokePolicy.default)  # report.smoke_test

    def study(self, name: str) -> dict[tuple[str, str, str], list[Cell]]:
        return _groups(study_cells(self.studies[name])) if name in self.studies else {}

    def all_cells(self) -> dict[tuple[str, str, str], list[Cell]]:
        return _groups(c for s in self.studies.values() for c in study_cells(s))


# ---------------------------------------------------------------- the paper's figures


def _paper_cell(paper: Paper, *keys: str | int, op: str = "mean") -> CellSpec | None:
    """A reported figure as a cell (config/paper_reported.yaml is recorded and hashed like any
    input); None where the paper does not report it."""
    pointer = paper.pointer(*keys)
    return CellSpec(op, (Source(paper.path, pointer),)) if pointer else None


@dataclass(frozen=True)
class PaperFigure:
    """A point figure of the paper and where it sits in our tables: column `paper_<quantity>`
    of row `<scale>/o200k_base/<key>` of `table` (key: a variant, or a frequency bucket)."""

    table: str
    scale: str
    key: str
    quantity: str
    spec: CellSpec

    @property
    def row(self) -> str:
        return f"{self.scale}/{PAPER_MAIN_VOCAB}/{self.key}"


# the paper's frequency figures -> (our bucket label, column); its "> 1M" is our ">=1000000"
FREQUENCY_PAPER_FIGURES = {
    "bucket_1_9_ppl_gain": ("1-9", "ppl_gain"),
    "bucket_1_9_loss_gain_nats": ("1-9", "loss_gain_nats"),
    "bucket_over_1m_gain": (">=1000000", "ppl_gain"),
}
# the paper's cost figures of a scale (leviathan vs tied) -> cost-table column
COST_PAPER_FIGURES = {"param_overhead": "params_overhead", "flop_overhead": "flops_overhead"}
ABLATION_PAPER_FIGURES = ("val_loss", "gain", "params")


def paper_figures(paper: Paper) -> list[PaperFigure]:
    """Every point figure of the paper beside the cell of ours it compares with: the tables'
    `paper_*` cells and the rows of paper_vs_ours. A table's figures are the section of the
    same name in config/paper_reported.yaml. (Its vocabulary study is a range over
    vocabularies, not a point: the vocabulary table shows it on every row.)"""
    out: list[PaperFigure] = []

    def add(table: str, scale: str, key: str, quantity: str, *path: str, op: str = "mean") -> None:
        spec = _paper_cell(paper, table, scale, *path, op=op)
        if spec is not None:
            out.append(PaperFigure(table, scale, key, quantity, spec))

    for scale in paper.scales("main"):
        for variant, figs in paper.main(scale).items():
            if not isinstance(figs, Mapping):
                continue  # the scale's training tokens
            for col, (key, op) in MAIN_PAPER_FIGURES.items():
                add("main", scale, variant, col, variant, key, op=op)
    for scale in paper.scales("ablation"):
        for variant in paper.ablation(scale):
            for col in ABLATION_PAPER_FIGURES:
                add("ablation", scale, variant, col, variant, col)
    for scale in paper.scales("downstream"):
        for variant, accuracies in paper.downstream(scale).items():
            if not isinstance(accuracies, Mapping):
                continue  # the mean of the per-task accuracies (it states only the mean gain)
            tasks = [_paper_cell(paper, "downstream", scale, variant, t) for t in PAPER_TASKS]
            if all(tasks):
                sources = tuple(s for spec in tasks for s in spec.sources)  # type: ignore[union-attr]
                out.append(
                    PaperFigure("downstream", scale, variant, "mean", CellSpec("mean", sources))
                )
        add("downstream", scale, "leviathan", "gain_points", "mean_gain_points")
    for scale in paper.scales("frequency"):
        for key, (bucket, col) in FREQUENCY_PAPER_FIGURES.items():
            add("frequency", scale, bucket, col, key)
    for scale in paper.scales("cost"):
        for key, col in COST_PAPER_FIGURES.items():
            add("cost", scale, "leviathan", col, key)
    for scale in paper.scales("sample_efficiency"):
        add("sample_efficiency", scale, "leviathan", "tokens_ratio", "tokens_ratio")
    return out


@dataclass
class Context:
    """What a table is built from: the inputs, the files read, the paper's figures, and the
    tables built before it (in TABLES' order)."""

    inp: ReportInputs
    docs: DocumentCache
    paper: Paper
    figures: list[PaperFigure]
    tables: dict[str, Table] = field(default_factory=dict)

    def basis(self, cells: Sequence[Cell]) -> dict[str, str]:
        """The BASIS_COLUMNS labels of a row read from `cells`."""
        return basis_labels(cells, self.docs, self.inp.smoke)

    def set_paper(self, t: Table, row: str) -> None:
        """The paper's figures for one of our rows, in its `paper_*` columns."""
        for fig in self.figures:
            if (fig.table, fig.row) == (t.name, row):
                t.set(row, f"paper_{fig.quantity}", fig.spec)


# ---------------------------------------------------------------- the tables


def _lm_eval_tasks(inp: ReportInputs, docs: DocumentCache) -> dict[str, Any]:
    """The lm-eval tasks of the main study's (else any cell's) evaluations (task -> its metrics), {} if none ran."""
    groups = inp.study("main") or inp.all_cells()
    if "lm_eval" not in inp.evals or not groups:
        return {}
    first = next(iter(groups.values()))[0]
    tasks = docs.get(_eval(first, "lm_eval"))["results"]["tasks"]
    return {name: task.get("metrics", {}) for name, task in tasks.items()}


def _has_lambada_ppl(tasks: Mapping[str, Any]) -> bool:
    return "perplexity,none" in tasks.get("lambada_openai", {})


def main_table(ctx: Context, name: str) -> Table:
    inp = ctx.inp
    cols = {"val_loss": "loss", "val_ppl": "ppl", "val_targets": "int", "val_ppl_gain": "pct"}
    if "wikitext" in inp.evals:
        cols |= {"wikitext_ppl": "ppl", "wikitext_ppl_gain": "pct"}
    if _has_lambada_ppl(_lm_eval_tasks(inp, ctx.docs)):
        cols |= {"lambada_ppl": "ppl", "lambada_ppl_gain": "pct"}
    cols |= {f"paper_{col}": cols.get(col, "pct") for col in MAIN_PAPER_FIGURES}
    t = Table(
        name,
        "Main results: validation loss (the evaluation's, over its configured sample of the "
        "held-out split: val_targets tokens) and perplexity, zero-shot perplexity gains over "
        f"tied; {GAIN_CONVENTION}",
        CONFIG_LABELS,
        cols,
    )
    groups = inp.study("main")
    if _seeded(groups):
        t.with_ci(
            "val_loss",
            "val_ppl_gain",
            "wikitext_ppl",
            "wikitext_ppl_gain",
            "lambada_ppl",
            "lambada_ppl_gain",
        )
    for (scale, vocab, variant), cells in groups.items():
        row = _config_row(ctx, t, scale, vocab, variant, cells)
        tied = groups.get((scale, vocab, "tied"))
        t.set(row, "val_loss", CellSpec("mean", _src(cells, "val", LOSS)))
        t.set(row, "val_ppl", CellSpec("exp", _src(cells, "val", LOSS)))
        t.set(row, "val_targets", CellSpec("mean", _src(cells, "val", VAL_TARGETS)))
        if "wikitext_ppl" in cols:
            t.set(row, "wikitext_ppl", CellSpec("mean", _src(cells, "wikitext", WIKITEXT_PPL)))
        if "lambada_ppl" in cols:
            t.set(row, "lambada_ppl", CellSpec("mean", _src(cells, "lm_eval", LAMBADA_PPL)))
        if tied and variant != "tied":
            t.set(row, "val_ppl_gain", _pair("exp_gain", tied, cells, "val", LOSS))
            if "wikitext_ppl" in cols:
                t.set(
                    row, "wikitext_ppl_gain", _pair("gain", tied, cells, "wikitext", WIKITEXT_PPL)
                )
            if "lambada_ppl" in cols:
                t.set(row, "lambada_ppl_gain", _pair("gain", tied, cells, "lm_eval", LAMBADA_PPL))
        ctx.set_paper(t, row)
    return t


def _accuracy_tasks(
    inp: ReportInputs, docs: DocumentCache
) -> tuple[list[str], list[str], list[str]]:
    """(the paper's tasks that ran, every task that reports acc, the tasks the mean averages:
    the paper's that ran, or all of them if none did)."""
    tasks_run = {
        name for name, metrics in _lm_eval_tasks(inp, docs).items() if "acc,none" in metrics
    }
    paper_tasks = [t for t in PAPER_TASKS if t in tasks_run]
    tasks = paper_tasks + sorted(tasks_run - set(PAPER_TASKS))
    return paper_tasks, tasks, paper_tasks or tasks


def _acc(
    cells: Iterable[Cell],
    tasks: Iterable[str],
    group: str = "a",
    metric: Callable[[str], str] = lambda task: "acc,none",
) -> tuple[Source, ...]:
    cells = list(cells)
    return tuple(
        s
        for task in tasks
        for s in _src(cells, "lm_eval", f"/results/tasks/{task}/metrics/{metric(task)}", group)
    )


def downstream_table(ctx: Context, name: str) -> Table:
    groups = ctx.inp.study("main")
    paper_tasks, tasks, averaged = _accuracy_tasks(ctx.inp, ctx.docs)
    metrics = _lm_eval_tasks(ctx.inp, ctx.docs)
    cols = {task: "points" for task in tasks} | {
        "mean": "points",
        "gain_points": "dpoints",
        "mean_norm": "points",
        "paper_mean": "points",
        "paper_gain_points": "dpoints",
    }
    over = ", ".join(averaged) or "no accuracy task (none of the tasks that ran reports acc)"
    t = Table(
        name,
        f"Zero-shot accuracy (%, lm-eval's acc) per task; mean over {over} and its gain "
        "over tied (points); mean_norm: the same mean with acc_norm where a task has it; "
        + GAIN_CONVENTION,
        CONFIG_LABELS,
        cols,
    )

    def norm(task: str) -> str:  # acc_norm where the task has it (HellaSwag, ARC, PIQA), else acc
        return "acc_norm,none" if "acc_norm,none" in metrics.get(task, {}) else "acc,none"

    for (scale, vocab, variant), cells in groups.items():
        row = _config_row(ctx, t, scale, vocab, variant, cells)
        for task in tasks:
            t.set(
                row,
                task,
                CellSpec("pct", _src(cells, "lm_eval", f"/results/tasks/{task}/metrics/acc,none")),
            )
        t.set(row, "mean", CellSpec("pct", _acc(cells, averaged)))
        t.set(row, "mean_norm", CellSpec("pct", _acc(cells, averaged, metric=norm)))
        tied = groups.get((scale, vocab, "tied"))
        if tied and variant != "tied":
            t.set(
                row,
                "gain_points",
                CellSpec("diff_pct", _acc(tied, averaged, "a") + _acc(cells, averaged, "b")),
            )
        if paper_tasks == PAPER_TASKS:  # the paper's mean is over its six tasks
            ctx.set_paper(t, row)
    return t


def ablation_table(ctx: Context, name: str) -> Table:
    groups = ctx.inp.study("ablation")
    cols = {
        "params": "int",
        "val_loss": "loss",
        "gain": "pct",
        "paper_params": "int",
        "paper_val_loss": "loss",
        "paper_gain": "pct",
    }
    t = Table(
        name,
        "Input-layer ablation: validation loss (the evaluation's) and relative gain over tied; "
        + GAIN_CONVENTION,
        CONFIG_LABELS,
        cols,
    )
    if _seeded(groups):
        t.with_ci("val_loss", "gain")
    for (scale, vocab, variant), cells in groups.items():
        row = _config_row(ctx, t, scale, vocab, variant, cells)
        t.set(row, "params", CellSpec("params", _state(cells[:1])))
        t.set(row, "val_loss", CellSpec("mean", _src(cells, "val", LOSS)))
        tied = groups.get((scale, vocab, "tied"))
        if tied:
            t.set(row, "gain", _pair("gain", tied, cells, "val", LOSS))
        ctx.set_paper(t, row)
    return t


def _pairs(groups: Mapping[tuple[str, str, str], list[Cell]]) -> list[tuple[str, str]]:
    """The (scale, vocab) of a study with both a leviathan and a tied configuration."""
    return sorted(
        {(s, v) for (s, v, var) in groups if var == "leviathan" and (s, v, "tied") in groups}
    )


def vocabulary_table(ctx: Context, name: str) -> Table:
    from leviathan.vocab import get_vocab

    groups = ctx.inp.study("vocabulary")
    pairs = sorted(_pairs(groups), key=lambda sv: (sv[0], get_vocab(sv[1]).n_vocab))
    cols = {
        "tied_loss": "loss",
        "leviathan_loss": "loss",
        "gain": "pct",
        "gain_min": "pct",
        "gain_max": "pct",
    }
    t = Table(
        name,
        "Vocabulary study: relative loss gain of leviathan over tied (the evaluation's validation "
        f"loss); {GAIN_CONVENTION}. The paper's row (a range over its vocabularies, at a scale "
        "it does not state) is its own, not beside any of ours",
        ["source", "scale", "vocab", "n_vocab", "seeds", *BASIS_COLUMNS],
        cols,
    )
    if _seeded(groups):
        t.with_ci("tied_loss", "leviathan_loss", "gain")
    for scale, vocab in pairs:
        tied, lev = groups[scale, vocab, "tied"], groups[scale, vocab, "leviathan"]
        row = t.add_row(
            f"{scale}/{vocab}",
            source="ours",
            scale=scale,
            vocab=vocab,
            n_vocab=get_vocab(vocab).n_vocab,
            seeds=len(lev),
            **ctx.basis([*tied, *lev]),
        )
        t.set(row, "tied_loss", CellSpec("mean", _src(tied, "val", LOSS)))
        t.set(row, "leviathan_loss", CellSpec("mean", _src(lev, "val", LOSS)))
        t.set(row, "gain", _pair("gain", tied, lev, "val", LOSS))
    if pairs:
        row = t.add_row(
            "paper",
            source="paper",
            scale="not stated",
            vocab=";".join(ctx.paper.doc.get("vocabulary", {}).get("vocabs", [])),
        )
        t.set(row, "gain_min", _paper_cell(ctx.paper, "vocabulary", "gain_range", 0))
        t.set(row, "gain_max", _paper_cell(ctx.paper, "vocabulary", "gain_range", 1))
    return t


# frequency levels: the val evaluation's result key -> the table's `level` label and row-id part
FREQUENCY_LEVELS = {"frequency_tokens": ("token", ""), "frequency_words": ("word", "words/")}


def frequency_table(ctx: Context, name: str) -> Table:
    """Every (scale, vocabulary) of the studies with tied and leviathan, token-level buckets (the
    target id's training count) and, where the evaluation counted words, word-level buckets
    (the word's training count; its loss the sum over its tokens)."""
    groups = ctx.inp.all_cells()
    cols = {
        "targets": "int",
        "tied_loss": "loss",
        "leviathan_loss": "loss",
        "loss_gain_nats": "loss",
        "tied_ppl": "ppl",
        "leviathan_ppl": "ppl",
        "ppl_gain": "pct",
        "paper_ppl_gain": "pct",
        "paper_loss_gain_nats": "loss",
    }
    t = Table(
        name,
        "Validation loss (the evaluation's) by training-set frequency of the target token "
        "(level token) or word (level word), tied vs leviathan, every vocabulary of the "
        f"studies; targets: evaluated tokens (words) in the bucket; {GAIN_CONVENTION}",
        ["scale", "vocab", "seeds", *BASIS_COLUMNS, "level", "bucket"],
        cols,
    )
    for scale, vocab in _pairs(groups):
        tied, lev = groups[scale, vocab, "tied"], groups[scale, vocab, "leviathan"]
        basis = {"seeds": len(lev), **ctx.basis([*tied, *lev])}
        results = ctx.docs.get(_eval(tied[0], "val"))["results"]
        for key, (level, part) in FREQUENCY_LEVELS.items():
            for i, bucket in enumerate(results.get(key, {}).get("log10", [])):
                label = bucket["label"]
                row = t.add_row(
                    f"{scale}/{vocab}/{part}{label}",
                    scale=scale,
                    vocab=vocab,
                    **basis,
                    level=level,
                    bucket=label,
                )
                _frequency_row(ctx, t, row, tied, lev, f"/results/{key}/log10/{i}", bucket)
    return t


def _frequency_row(
    ctx: Context,
    t: Table,
    row: str,
    tied: Sequence[Cell],
    lev: Sequence[Cell],
    ptr: str,
    bucket: Mapping[str, Any],
) -> None:
    """One bucket's cells (an empty bucket: its count only)."""
    t.set(row, "targets", CellSpec("mean", _src(tied[:1], "val", f"{ptr}/n")))
    if not bucket["n"]:
        return
    t.set(row, "tied_loss", CellSpec("mean", _src(tied, "val", f"{ptr}/mean_loss")))
    t.set(row, "leviathan_loss", CellSpec("mean", _src(lev, "val", f"{ptr}/mean_loss")))
    t.set(row, "loss_gain_nats", _pair("reduction", tied, lev, "val", f"{ptr}/mean_loss"))
    t.set(row, "tied_ppl", CellSpec("exp", _src(tied, "val", f"{ptr}/mean_loss")))
    t.set(row, "leviathan_ppl", CellSpec("exp", _src(lev, "val", f"{ptr}/mean_loss")))
    t.set(row, "ppl_gain", _pair("exp_gain", tied, lev, "val", f"{ptr}/mean_loss"))
    ctx.set_paper(t, row)


def cost_table(ctx: Context, name: str) -> Table:
    cols = {
        "params": "int",
        "forward_flops_per_token": "int",
        "params_overhead": "pct",
        "flops_overhead": "pct",
        "paper_params_overhead": "pct",
        "paper_flops_overhead": "pct",
    }
    t = Table(
        name,
        "Cost by the model's own counter (from the model config alone, no training): parameters, "
        "forward FLOPs per token, overhead vs tied (positive = more than tied)",
        ["scale", "vocab", "variant"],
        cols,
    )
    groups = ctx.inp.all_cells()
    for (scale, vocab, variant), cells in groups.items():
        row = t.add_row(f"{scale}/{vocab}/{variant}", scale=scale, vocab=vocab, variant=variant)
        t.set(row, "params", CellSpec("params", _state(cells[:1])))
        t.set(row, "forward_flops_per_token", CellSpec("flops", _state(cells[:1])))
        tied = groups.get((scale, vocab, "tied"))
        if tied and variant != "tied":
            both = _state(tied[:1], "a") + _state(cells[:1], "b")
            t.set(row, "params_overhead", CellSpec("params_overhead", both))
            t.set(row, "flops_overhead", CellSpec("flops_overhead", both))
        ctx.set_paper(t, row)
    return t


def _se_pairs(
    inp: ReportInputs,
) -> list[tuple[str, str, str, list[Cell], list[Cell]]]:
    """(scale, vocab, variant, its cells, tied's cells of the same seeds) for every variant other
    than tied with a tied baseline: the groups the sample-efficiency evaluation compares."""
    groups = inp.all_cells()
    out = []
    for (scale, vocab, variant), cells in groups.items():
        tied = {c.seed: c for c in groups.get((scale, vocab, "tied"), [])}
        paired = [c for c in cells if c.seed in tied]
        if variant != "tied" and paired:
            out.append((scale, vocab, variant, paired, [tied[c.seed] for c in paired]))
    return out


def _se_sources(docs: DocumentCache, cells: Sequence[Cell], field_: str) -> tuple[Source, ...]:
    """A field of each seed's run record in its sample-efficiency output (`baseline/...` for the
    tied baseline's); none where that output was not made (the workflow always makes it; a report
    built by hand from runs without periodic validation has none: its cells stay empty)."""
    out = []
    for c in cells:
        path = layout.sample_efficiency_path(c.scale, c.vocab, c.seed)
        if not docs.path(path).is_file():
            return ()
        if field_.startswith("baseline/"):
            out.append(Source(path, f"/results/{field_}"))
            continue
        runs = docs.get(path)["results"]["runs"]
        i = next((i for i, r in enumerate(runs) if r.get("variant") == c.variant), None)
        if i is None:
            raise ValueError(
                f"{path}: has no {c.variant} run: rerun its sample_efficiency rule "
                "(`snakemake --forcerun sample_efficiency all`)"
            )
        out.append(Source(path, f"/results/runs/{i}/{field_}"))
    return tuple(out)


def sample_efficiency_table(ctx: Context, name: str) -> Table:
    """Ours: per variant, the training tokens at which its periodic in-training validation loss
    first reaches tied's final one (interpolated between evaluations), and tied's tokens over
    those (the paper's "2.1x fewer tokens"); empty where it never does (reached < 1: not in
    every seed)."""
    cols = {
        "tied_tokens": "int",
        "target_periodic_loss": "loss",
        "final_periodic_loss": "loss",
        "reached": "num",
        "tokens_to_target": "int",
        "tokens_ratio": "num",
        "paper_tokens_ratio": "num",
    }
    t = Table(
        name,
        "Sample efficiency: training tokens to reach tied's final periodic validation loss (the "
        "in-training evaluation on a fixed subset of validation windows, not the evaluation's "
        "val_loss); reached: fraction of seeds that reach it; tokens_ratio: tied's tokens over "
        "the variant's (> 1 = fewer tokens than tied, better)",
        CONFIG_LABELS,
        cols,
    )
    for scale, vocab, variant, cells, tied in _se_pairs(ctx.inp):
        row = t.add_row(
            f"{scale}/{vocab}/{variant}",
            scale=scale,
            vocab=vocab,
            variant=variant,
            seeds=len(cells),
            **ctx.basis([*tied, *cells]),
        )
        for col, field_ in (
            ("tied_tokens", "baseline/tokens"),
            ("target_periodic_loss", "baseline/target_val_loss"),
            ("final_periodic_loss", "final_val_loss"),
            ("reached", "reached"),
            ("tokens_to_target", "tokens_interpolated"),
            ("tokens_ratio", "ratio_interpolated"),
        ):
            t.set(row, col, CellSpec("mean", _se_sources(ctx.docs, cells, field_)))
        ctx.set_paper(t, row)
    return t


def paper_vs_ours(ctx: Context, name: str) -> Table:
    """The paper's point figures (the tables' `paper_*` cells, for every scale it reports)
    beside ours: the same table's cell, empty where that scale was not run."""
    t = Table(
        name,
        "The paper's reported figures beside ours at the same scale (ours empty where that scale "
        f"was not trained); train_tokens and evidence: what ours rests on; {GAIN_CONVENTION}",
        ["table", "scale", "variant", "quantity", *BASIS_COLUMNS],
        {"paper": "num", "ours": "num", "difference": "num"},
    )
    for fig in ctx.figures:
        ours, basis = None, {}
        if fig.table in ctx.tables and fig.row in ctx.tables[fig.table].rows:
            ours = ctx.tables[fig.table].cells.get((fig.row, fig.quantity))
            basis = {c: ctx.tables[fig.table].rows[fig.row].get(c) for c in BASIS_COLUMNS}
        row = t.add_row(
            f"{fig.table}/{fig.scale}/{fig.key}/{fig.quantity}",
            table=fig.table,
            scale=fig.scale,
            variant=fig.key,
            quantity=fig.quantity,
            **(basis if ours is not None else {}),
        )
        t.set(row, "paper", fig.spec)
        t.set(row, "ours", ours)
        if ours is not None:
            t.set(row, "difference", CellSpec("diff_of", parts=(fig.spec, ours)))
    return t


def metrics_table(ctx: Context, name: str) -> Table:
    """The flat per-cell metrics of the study (DVC's `metrics:` file, rendered as JSON too).

    One row per trained cell (scale/vocab/variant/seed<k>, seeds not averaged): validation
    loss, perplexity and bits per byte, WikiText-103 and LAMBADA perplexity, mean downstream
    accuracy, and the gains over the tied cell of the same scale, vocabulary and seed."""
    inp = ctx.inp
    tasks = _lm_eval_tasks(inp, ctx.docs)
    wikitext = "wikitext" in inp.evals
    lambada = _has_lambada_ppl(tasks)
    averaged = _accuracy_tasks(inp, ctx.docs)[2] if tasks else []
    cols = {"val_loss": "loss", "val_ppl": "ppl", "val_bpb": "loss", "val_targets": "int"}
    cols |= {"wikitext_ppl": "ppl"} if wikitext else {}
    cols |= {"lambada_ppl": "ppl"} if lambada else {}
    cols |= {"downstream_mean_acc": "points"} if averaged else {}
    cols |= {"val_loss_gain": "pct", "val_ppl_gain": "pct"}
    cols |= {"wikitext_ppl_gain": "pct"} if wikitext else {}
    cols |= {"lambada_ppl_gain": "pct"} if lambada else {}
    cols |= {"downstream_gain_points": "dpoints"} if averaged else {}
    t = Table(
        name,
        "Per-cell metrics (DVC metrics): evaluation results and gains over the tied cell of the same "
        f"scale, vocabulary and seed; {GAIN_CONVENTION}",
        ["scale", "vocab", "variant", "seed", *BASIS_COLUMNS],
        cols,
    )
    groups = inp.all_cells()
    for (scale, vocab, variant), cells in groups.items():
        tied_by_seed = {c.seed: c for c in groups.get((scale, vocab, "tied"), [])}
        for cell in cells:
            one = [cell]
            row = t.add_row(
                cell.key,
                scale=scale,
                vocab=vocab,
                variant=variant,
                seed=cell.seed,
                **ctx.basis(one),
            )
            t.set(row, "val_loss", CellSpec("mean", _src(one, "val", LOSS)))
            t.set(row, "val_ppl", CellSpec("exp", _src(one, "val", LOSS)))
            t.set(row, "val_targets", CellSpec("mean", _src(one, "val", VAL_TARGETS)))
            t.set(
                row, "val_bpb", CellSpec("mean", _src(one, "val", "/results/overall/bits_per_byte"))
            )
            if wikitext:
                t.set(row, "wikitext_ppl", CellSpec("mean", _src(one, "wikitext", WIKITEXT_PPL)))
            if lambada:
                t.set(row, "lambada_ppl", CellSpec("mean", _src(one, "lm_eval", LAMBADA_PPL)))
            if averaged:
                t.set(row, "downstream_mean_acc", CellSpec("pct", _acc(one, averaged)))
            tied = tied_by_seed.get(cell.seed)
            if tied is None or variant == "tied":
                continue
            t.set(row, "val_loss_gain", _pair("gain", [tied], one, "val", LOSS))
            t.set(row, "val_ppl_gain", _pair("exp_gain", [tied], one, "val", LOSS))
            if wikitext:
                t.set(
                    row, "wikitext_ppl_gain", _pair("gain", [tied], one, "wikitext", WIKITEXT_PPL)
                )
            if lambada:
                t.set(row, "lambada_ppl_gain", _pair("gain", [tied], one, "lm_eval", LAMBADA_PPL))
            if averaged:
                t.set(
                    row,
                    "downstream_gain_points",
                    CellSpec("diff_pct", _acc([tied], averaged, "a") + _acc(one, averaged, "b")),
                )
    return t


# ---------------------------------------------------------------- the registry


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
        TableDef("vocabulary", lambda inp: bool(_pairs(inp.study("vocabulary"))), vocabulary_table),
        TableDef("frequency", lambda inp: bool(_pairs(inp.all_cells())), frequency_table),
        TableDef("sample_efficiency", lambda inp: bool(_se_pairs(inp)), sample_efficiency_table),
        TableDef("cost", _always, cost_table),
        TableDef("paper_vs_ours", _always, paper_vs_ours),
        # per cell and seed, flat; also JSON for DVC's `metrics:` (leviathan.report.build.render)
        TableDef("metrics", _always, metrics_table, (*layout.TABLE_FORMATS, "json")),
    ]
}


def table_names(inp: ReportInputs) -> list[str]:
    """The tables a config yields (the report rule declares exactly these as outputs)."""
    return [name for name, d in TABLES.items() if d.applies(inp)]


def build_tables(inp: ReportInputs, docs: DocumentCache) -> dict[str, Table]:
    """Every table the configured studies yield, in report order."""
    paper = Paper(docs.get(inp.paper_path), inp.paper_path)
    ctx = Context(inp, docs, paper, paper_figures(paper))
    for name in table_names(inp):
        ctx.tables[name] = TABLES[name].build(ctx, name)
        ctx.tables[name].smoke_note = inp.smoke.note()
    return ctx.tables


def table_paths(out_dir: str | os.PathLike[str], name: str) -> dict[str, Path]:
    """A table's files: the CSV and its renderings (its TableDef's formats)."""
    formats = TABLES[name].formats if name in TABLES else TableDef.formats
    return layout.table_files(out_dir, name, formats)
