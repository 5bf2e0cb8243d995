"""The paper's tables, from our evaluation outputs, beside the paper's reported figures.

Every table is a list of rows (an id such as `400m/o200k_base/leviathan`, text labels) and
numeric columns whose cells are declared as `CellSpec`s (leviathan.report.cellmap): the
value is computed from the fields of the files it names, and that declaration is saved in
the table's manifest (its cell map), so `leviathan audit` can trace and re-check any number.

Tables (the paper's, SPEC section 6): main, downstream, ablation, vocabulary, frequency,
cost, and paper_vs_ours (every reported figure beside ours, where we trained that scale).
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
# main-table column -> the paper's key for it under `main.<scale>.<variant>` (paper_reported.yaml)
MAIN_PAPER_FIGURES = {
    "val_loss": "val_loss",
    "val_ppl": "val_ppl",
    "val_ppl_change": "val_ppl_change",
    "wikitext_ppl_gain": "wikitext103_ppl_gain",
    "lambada_ppl_gain": "lambada_ppl_gain",
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


def _fmt(value: Any, kind: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    ci = kind.startswith("ci_")
    base = kind.removeprefix("ci_")
    fmt = CI_FORMAT[base] if ci else FORMATS[base]
    return fmt.format(100.0 * value if base == "pct" else value)


def stand_in_rows(frame: pd.DataFrame) -> list[set[str]]:
    """Per row: the columns computed on offline stand-in data."""
    col = frame[STAND_IN_COLUMN] if STAND_IN_COLUMN in frame else [""] * len(frame)
    return [set(str(v).split(";")) - {""} if isinstance(v, str) else set() for v in col]


def rendered(table: Table, frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as text for Markdown/LaTeX (the CSV keeps full precision); values computed on
    stand-in data carry STAND_IN_MARK."""
    out = frame.drop(columns=["row", STAND_IN_COLUMN], errors="ignore").copy().astype(object)
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


class PaperFigures:
    """config/paper_reported.yaml as table sources (it is recorded and hashed like any input)."""

    def __init__(self, path: str, docs: DocumentCache) -> None:
        self.path, self.doc = path, docs.get(path)

    def spec(self, *keys: str | int) -> CellSpec | None:
        node: Any = self.doc
        for k in keys:
            if isinstance(node, Mapping) and k in node:
                node = node[k]
            elif isinstance(node, list) and isinstance(k, int) and k < len(node):
                node = node[k]
            else:
                return None
        return CellSpec("mean", (Source(self.path, "/" + "/".join(str(k) for k in keys)),))

    def downstream_mean(self, scale: str, variant: str) -> CellSpec | None:
        """The mean of the paper's per-task accuracies (it states only the mean gain)."""
        per_task = [self.spec(_key("downstream", scale), variant, task) for task in PAPER_TASKS]
        if not all(per_task):
            return None
        return CellSpec("mean", tuple(s for spec in per_task for s in spec.sources))  # type: ignore[union-attr]


def _key(section: str, scale: str) -> str:
    """A scale-specific section of paper_reported.yaml, e.g. downstream_1_2b."""
    return f"{section}_{scale.replace('.', '_')}"


def variant_order() -> list[str]:
    """The variants in the registry's order (tied first); imported here, not at parse time of the workflow."""
    from leviathan.model.variants import VARIANTS

    return list(VARIANTS)


def _order(c: Cell) -> tuple[Any, ...]:
    from leviathan.model.presets import SCALES

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


def _seeded(groups: Mapping[tuple[str, str, str], list[Cell]]) -> bool:
    """Whether any configuration has 2 or more seeds: its tables then give 95% CIs."""
    return any(len(cells) >= 2 for cells in groups.values())


@dataclass(frozen=True)
class ReportInputs:
    studies: Mapping[str, Mapping[str, Any]]
    evals: Sequence[str]  # enabled evaluation kinds (val always)
    paper_path: str  # config/paper_reported.yaml as recorded

    def study(self, name: str) -> dict[tuple[str, str, str], list[Cell]]:
        return _groups(study_cells(self.studies[name])) if name in self.studies else {}

    def all_cells(self) -> dict[tuple[str, str, str], list[Cell]]:
        return _groups(c for s in self.studies.values() for c in study_cells(s))


# ---------------------------------------------------------------- the tables


def _lm_eval_tasks(inp: ReportInputs, docs: DocumentCache) -> dict[str, Any]:
    """The lm-eval tasks of the main study's (else any cell's) evaluations (task -> its metrics), {} if none ran."""
    groups = inp.study("main") or inp.all_cells()
    if "lm_eval" not in inp.evals or not groups:
        return {}
    first = next(iter(groups.values()))[0]
    tasks = docs.get(_eval(first, "lm_eval"))["results"]["tasks"]
    return {name: task.get("metrics", {}) for name, task in tasks.items()}


def main_table(inp: ReportInputs, paper: PaperFigures, docs: DocumentCache) -> Table:
    cols = {"tokens": "int", "val_loss": "loss", "val_ppl": "ppl", "val_ppl_change": "pct"}
    if "wikitext" in inp.evals:
        cols |= {"wikitext_ppl": "ppl", "wikitext_ppl_gain": "pct"}
    if "perplexity,none" in _lm_eval_tasks(inp, docs).get("lambada_openai", {}):
        cols |= {"lambada_ppl": "ppl", "lambada_ppl_gain": "pct"}
    cols |= {f"paper_{col}": cols.get(col, "pct") for col in MAIN_PAPER_FIGURES}
    t = Table(
        "main",
        "Main results: validation loss and perplexity, zero-shot perplexity gains over tied",
        ["scale", "vocab", "variant", "seeds"],
        cols,
    )
    groups = inp.study("main")
    if _seeded(groups):
        t.with_ci(
            "val_loss",
            "val_ppl_change",
            "wikitext_ppl",
            "wikitext_ppl_gain",
            "lambada_ppl",
            "lambada_ppl_gain",
        )
    for (scale, vocab, variant), cells in groups.items():
        row = t.add_row(
            f"{scale}/{vocab}/{variant}",
            scale=scale,
            vocab=vocab,
            variant=variant,
            seeds=len(cells),
        )
        tied = groups.get((scale, vocab, "tied"))
        t.set(row, "tokens", CellSpec("mean", _src(cells, "val", "/checkpoint/tokens")))
        t.set(row, "val_loss", CellSpec("mean", _src(cells, "val", "/results/overall/loss")))
        t.set(row, "val_ppl", CellSpec("exp", _src(cells, "val", "/results/overall/loss")))
        lambada = "/results/tasks/lambada_openai/metrics/perplexity,none"
        if "wikitext_ppl" in cols:
            t.set(row, "wikitext_ppl", CellSpec("mean", _src(cells, "wikitext", WIKITEXT_PPL)))
        if "lambada_ppl" in cols:
            t.set(row, "lambada_ppl", CellSpec("mean", _src(cells, "lm_eval", lambada)))
        if tied and variant != "tied":
            t.set(
                row,
                "val_ppl_change",
                _pair("exp_change", tied, cells, "val", "/results/overall/loss"),
            )
            if "wikitext_ppl" in cols:
                t.set(
                    row, "wikitext_ppl_gain", _pair("gain", tied, cells, "wikitext", WIKITEXT_PPL)
                )
            if "lambada_ppl" in cols:
                t.set(row, "lambada_ppl_gain", _pair("gain", tied, cells, "lm_eval", lambada))
        if vocab != PAPER_MAIN_VOCAB:
            continue  # the paper's figures are for o200k
        for col, key in MAIN_PAPER_FIGURES.items():
            t.set(row, f"paper_{col}", paper.spec("main", scale, variant, key))
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


def downstream_table(inp: ReportInputs, paper: PaperFigures, docs: DocumentCache) -> Table | None:
    groups = inp.study("main")
    if "lm_eval" not in inp.evals or not groups:
        return None
    paper_tasks, tasks, averaged = _accuracy_tasks(inp, docs)
    metrics = _lm_eval_tasks(inp, docs)
    cols = {task: "points" for task in tasks} | {
        "mean": "points",
        "gain_points": "dpoints",
        "mean_norm": "points",
        "paper_mean": "points",
        "paper_gain_points": "dpoints",
    }
    over = ", ".join(averaged) or "no accuracy task (none of the tasks that ran reports acc)"
    t = Table(
        "downstream",
        f"Zero-shot accuracy (%, lm-eval's acc) per task; mean over {over} and its gain "
        "over tied (points); mean_norm: the same mean with acc_norm where a task has it",
        ["scale", "vocab", "variant", "seeds"],
        cols,
    )

    def norm(task: str) -> str:  # acc_norm where the task has it (HellaSwag, ARC, PIQA), else acc
        return "acc_norm,none" if "acc_norm,none" in metrics.get(task, {}) else "acc,none"

    for (scale, vocab, variant), cells in groups.items():
        row = t.add_row(
            f"{scale}/{vocab}/{variant}",
            scale=scale,
            vocab=vocab,
            variant=variant,
            seeds=len(cells),
        )
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
        if vocab != PAPER_MAIN_VOCAB or paper_tasks != PAPER_TASKS:
            continue  # the paper's mean is over its six tasks, on o200k
        t.set(row, "paper_mean", paper.downstream_mean(scale, variant))
        if variant == "leviathan":
            t.set(
                row, "paper_gain_points", paper.spec(_key("downstream", scale), "mean_gain_points")
            )
    return t


def ablation_table(inp: ReportInputs, paper: PaperFigures) -> Table | None:
    groups = inp.study("ablation")
    if not groups:
        return None
    cols = {
        "params": "int",
        "val_loss": "loss",
        "gain": "pct",
        "paper_params": "int",
        "paper_val_loss": "loss",
        "paper_gain": "pct",
    }
    t = Table(
        "ablation",
        "Input-layer ablation: validation loss and relative gain over tied",
        ["scale", "vocab", "variant", "seeds"],
        cols,
    )
    if _seeded(groups):
        t.with_ci("val_loss", "gain")
    for (scale, vocab, variant), cells in groups.items():
        row = t.add_row(
            f"{scale}/{vocab}/{variant}",
            scale=scale,
            vocab=vocab,
            variant=variant,
            seeds=len(cells),
        )
        t.set(row, "params", CellSpec("params", _state(cells[:1])))
        t.set(row, "val_loss", CellSpec("mean", _src(cells, "val", "/results/overall/loss")))
        tied = groups.get((scale, vocab, "tied"))
        if tied:
            t.set(row, "gain", _pair("gain", tied, cells, "val", "/results/overall/loss"))
        if vocab != PAPER_MAIN_VOCAB:
            continue
        key = f"ablation_{scale}"
        t.set(row, "paper_params", paper.spec(key, variant, "params"))
        t.set(row, "paper_val_loss", paper.spec(key, variant, "val_loss"))
        t.set(row, "paper_gain", paper.spec(key, variant, "gain"))
    return t


def vocabulary_table(inp: ReportInputs, paper: PaperFigures) -> Table | None:
    from leviathan.vocab import get_vocab

    groups = inp.study("vocabulary")
    pairs = sorted(
        {(s, v) for (s, v, var) in groups if var == "leviathan" and (s, v, "tied") in groups},
        key=lambda sv: (sv[0], get_vocab(sv[1]).n_vocab),
    )
    if not pairs:
        return None
    cols = {
        "tied_loss": "loss",
        "leviathan_loss": "loss",
        "gain": "pct",
        "paper_gain_min": "pct",
        "paper_gain_max": "pct",
    }
    t = Table(
        "vocabulary",
        "Vocabulary study: relative loss gain of leviathan over tied",
        ["scale", "vocab", "n_vocab", "seeds"],
        cols,
    )
    if _seeded(groups):
        t.with_ci("tied_loss", "leviathan_loss", "gain")
    loss = "/results/overall/loss"
    for scale, vocab in pairs:
        tied, lev = groups[scale, vocab, "tied"], groups[scale, vocab, "leviathan"]
        row = t.add_row(
            f"{scale}/{vocab}",
            scale=scale,
            vocab=vocab,
            n_vocab=get_vocab(vocab).n_vocab,
            seeds=len(lev),
        )
        t.set(row, "tied_loss", CellSpec("mean", _src(tied, "val", loss)))
        t.set(row, "leviathan_loss", CellSpec("mean", _src(lev, "val", loss)))
        t.set(row, "gain", _pair("gain", tied, lev, "val", loss))
        t.set(row, "paper_gain_min", paper.spec("vocabulary", "gain_range", 0))
        t.set(row, "paper_gain_max", paper.spec("vocabulary", "gain_range", 1))
    return t


def frequency_table(inp: ReportInputs, paper: PaperFigures, docs: DocumentCache) -> Table | None:
    groups = inp.study("main")
    pairs = sorted(
        {(s, v) for (s, v, var) in groups if var == "leviathan" and (s, v, "tied") in groups}
    )
    if not pairs:
        return None
    cols = {
        "tokens": "int",
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
        "frequency",
        "Validation loss by training-set frequency of the target token (tied vs leviathan)",
        ["scale", "vocab", "bucket"],
        cols,
    )
    for scale, vocab in pairs:
        tied, lev = groups[scale, vocab, "tied"], groups[scale, vocab, "leviathan"]
        buckets = docs.get(_eval(tied[0], "val"))["results"]["frequency_tokens"]["log10"]
        for i, bucket in enumerate(buckets):
            label = bucket["label"]
            row = t.add_row(f"{scale}/{vocab}/{label}", scale=scale, vocab=vocab, bucket=label)
            ptr = f"/results/frequency_tokens/log10/{i}"
            t.set(row, "tokens", CellSpec("mean", _src(tied[:1], "val", f"{ptr}/n")))
            if not bucket["n"]:
                continue
            t.set(row, "tied_loss", CellSpec("mean", _src(tied, "val", f"{ptr}/mean_loss")))
            t.set(row, "leviathan_loss", CellSpec("mean", _src(lev, "val", f"{ptr}/mean_loss")))
            t.set(row, "loss_gain_nats", _pair("reduction", tied, lev, "val", f"{ptr}/mean_loss"))
            t.set(row, "tied_ppl", CellSpec("exp", _src(tied, "val", f"{ptr}/mean_loss")))
            t.set(row, "leviathan_ppl", CellSpec("exp", _src(lev, "val", f"{ptr}/mean_loss")))
            t.set(row, "ppl_gain", _pair("exp_gain", tied, lev, "val", f"{ptr}/mean_loss"))
            if vocab != PAPER_MAIN_VOCAB:
                continue
            key = _key("frequency", scale)
            if (bucket.get("count_lo"), bucket.get("count_hi")) == (1, 9):
                t.set(row, "paper_ppl_gain", paper.spec(key, "bucket_1_9_ppl_gain"))
                t.set(row, "paper_loss_gain_nats", paper.spec(key, "bucket_1_9_loss_gain_nats"))
            elif (bucket.get("count_lo"), bucket.get("count_hi")) == (
                10**6,
                None,
            ):  # the paper's "> 1M"
                t.set(row, "paper_ppl_gain", paper.spec(key, "bucket_over_1m_gain"))
    return t


def cost_table(inp: ReportInputs, paper: PaperFigures) -> Table:
    cols = {
        "params": "int",
        "forward_flops_per_token": "int",
        "params_overhead": "pct",
        "flops_overhead": "pct",
        "paper_params_overhead": "pct",
        "paper_flops_overhead": "pct",
    }
    t = Table(
        "cost",
        "Cost by the model's own counter: parameters, forward FLOPs per token, overhead vs tied",
        ["scale", "vocab", "variant"],
        cols,
    )
    groups = inp.all_cells()
    for (scale, vocab, variant), cells in groups.items():
        row = t.add_row(f"{scale}/{vocab}/{variant}", scale=scale, vocab=vocab, variant=variant)
        t.set(row, "params", CellSpec("params", _state(cells[:1])))
        t.set(row, "forward_flops_per_token", CellSpec("flops", _state(cells[:1])))
        tied = groups.get((scale, vocab, "tied"))
        if tied and variant != "tied":
            both = _state(tied[:1], "a") + _state(cells[:1], "b")
            t.set(row, "params_overhead", CellSpec("params_overhead", both))
            t.set(row, "flops_overhead", CellSpec("flops_overhead", both))
        if variant == "leviathan" and vocab == PAPER_MAIN_VOCAB:
            t.set(row, "paper_params_overhead", paper.spec("cost", _key("param_overhead", scale)))
            t.set(row, "paper_flops_overhead", paper.spec("cost", _key("flop_overhead", scale)))
    return t


def _sample_efficiency_spec(inp: ReportInputs, docs: DocumentCache, scale: str) -> CellSpec | None:
    """Ours: the tokens ratio at which leviathan reaches tied's final loss (mean over seeds)."""
    lev = inp.all_cells().get((scale, PAPER_MAIN_VOCAB, "leviathan"), [])
    tied = {c.seed for c in inp.all_cells().get((scale, PAPER_MAIN_VOCAB, "tied"), [])}
    sources = []
    for c in lev:
        if c.seed not in tied:
            continue
        path = layout.sample_efficiency_path(scale, PAPER_MAIN_VOCAB, c.seed)
        runs = docs.get(path)["results"]["runs"]
        i = next((i for i, r in enumerate(runs) if r.get("variant") == "leviathan"), None)
        if i is None:
            raise ValueError(
                f"{path}: has no leviathan run (was its metrics.jsonl written by the trainer?)"
            )
        sources.append(Source(path, f"/results/runs/{i}/ratio_interpolated"))
    return CellSpec("mean", tuple(sources)) if sources else None


def paper_vs_ours(
    tables: Mapping[str, Table],
    paper: PaperFigures,
    extra: Mapping[tuple[str, str, str, str], tuple[CellSpec | None, CellSpec | None]]
    | None = None,
) -> Table:
    """The paper's point figures beside ours (empty where that scale was not run). Its
    vocabulary study is a range over vocabularies: that sits in the vocabulary table."""
    t = Table(
        "paper_vs_ours",
        "The paper's reported figures beside ours (ours empty where not trained)",
        ["table", "scale", "variant", "quantity"],
        {"paper": "num", "ours": "num", "difference": "num"},
    )

    def add(
        table_name: str,
        scale: str,
        variant: str,
        quantity: str,
        paper_spec: CellSpec | None,
        ours: CellSpec | None = None,
    ) -> None:
        if ours is None and table_name in tables:  # ours: the same number in our table's row
            ours = tables[table_name].cells.get((f"{scale}/{PAPER_MAIN_VOCAB}/{variant}", quantity))
        row = t.add_row(
            f"{table_name}/{scale}/{variant}/{quantity}",
            table=table_name,
            scale=scale,
            variant=variant,
            quantity=quantity,
        )
        t.set(row, "paper", paper_spec)
        t.set(row, "ours", ours)
        if ours is not None and paper_spec is not None:
            t.set(row, "difference", CellSpec("diff_of", parts=(paper_spec, ours)))

    for scale, row in paper.doc.get("main", {}).items():
        for variant, figs in row.items():
            if isinstance(figs, Mapping):
                for col, key in MAIN_PAPER_FIGURES.items():
                    if key in figs:
                        add("main", scale, variant, col, paper.spec("main", scale, variant, key))
    for variant in paper.doc.get("ablation_400m", {}):
        for quantity in ("val_loss", "gain"):
            add(
                "ablation",
                "400m",
                variant,
                quantity,
                paper.spec("ablation_400m", variant, quantity),
            )
    for variant in ("tied", "leviathan"):
        add("downstream", "1.2b", variant, "mean", paper.downstream_mean("1.2b", variant))
    add(
        "downstream",
        "1.2b",
        "leviathan",
        "gain_points",
        paper.spec("downstream_1_2b", "mean_gain_points"),
    )
    add("frequency", "1.2b", "1-9", "ppl_gain", paper.spec("frequency_1_2b", "bucket_1_9_ppl_gain"))
    add(
        "frequency",
        "1.2b",
        "1-9",
        "loss_gain_nats",
        paper.spec("frequency_1_2b", "bucket_1_9_loss_gain_nats"),
    )
    add(
        "frequency",
        "1.2b",
        ">=1000000",
        "ppl_gain",
        paper.spec("frequency_1_2b", "bucket_over_1m_gain"),
    )
    add("cost", "1.2b", "leviathan", "params_overhead", paper.spec("cost", "param_overhead_1_2b"))
    add("cost", "1.2b", "leviathan", "flops_overhead", paper.spec("cost", "flop_overhead_1_2b"))
    for (table_name, scale, variant, quantity), (paper_spec, ours) in (extra or {}).items():
        add(table_name, scale, variant, quantity, paper_spec, ours)
    return t


def build_tables(inp: ReportInputs, docs: DocumentCache) -> dict[str, Table]:
    """Every table the configured studies support, in report order."""
    paper = PaperFigures(inp.paper_path, docs)
    built: list[Table | None] = [
        main_table(inp, paper, docs) if "main" in inp.studies else None,
        downstream_table(inp, paper, docs),
        ablation_table(inp, paper),
        vocabulary_table(inp, paper),
        frequency_table(inp, paper, docs),
        cost_table(inp, paper),
    ]
    tables = {t.name: t for t in built if t is not None}
    extra = {
        ("sample_efficiency", "1.2b", "leviathan", "tokens_ratio"): (
            paper.spec("sample_efficiency", "tokens_ratio_1_2b"),
            _sample_efficiency_spec(inp, docs, "1.2b"),
        )
    }
    tables["paper_vs_ours"] = paper_vs_ours(tables, paper, extra)
    from leviathan.report.metrics import metrics_table

    tables[METRICS_TABLE] = metrics_table(inp, docs)
    return tables


METRICS_TABLE = (
    "metrics"  # per cell and seed, flat; also rendered as JSON for DVC (leviathan.report.metrics)
)
TABLE_NAMES = [
    "main",
    "downstream",
    "ablation",
    "vocabulary",
    "frequency",
    "cost",
    "paper_vs_ours",
    METRICS_TABLE,
]


def table_paths(out_dir: str | os.PathLike[str], name: str) -> dict[str, Path]:
    """A table's files: the CSV and its renderings (Markdown, LaTeX; JSON for the metrics table)."""
    extra = ("json",) if name == METRICS_TABLE else ()
    return layout.table_files(out_dir, name, layout.TABLE_FORMATS + extra)
