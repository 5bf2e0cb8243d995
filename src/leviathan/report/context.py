"""What the report's tables are built from: the configured studies grouped into configurations,
the files read, the paper's reported numbers, and the tables built so far."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from leviathan.cells import Cell, study_cells
from leviathan.model.config import VARIANT_NAMES
from leviathan.report.baseline import BASELINE
from leviathan.report.cellmap import DocumentCache
from leviathan.report.evidence import EVIDENCE_COLUMNS, SmokePolicy, evidence_labels, recipe_label
from leviathan.report.paper import Paper, PaperNumber
from leviathan.report.table import Table
from leviathan.scales import SCALES

# (scale, vocab, variant) -> its cells, one per seed: a configuration, its seeds averaged
Configurations = dict[tuple[str, str, str], list[Cell]]
# the label columns of a row of one configuration (config_row)
CONFIG_LABELS = ["scale", "vocab", "variant", "seeds", BASELINE, *EVIDENCE_COLUMNS]


def variant_order() -> list[str]:
    """The built-in variants in the registry's order (tied first)."""
    return list(VARIANT_NAMES)


def _report_order(c: Cell) -> tuple[Any, ...]:
    scales, variants = list(SCALES), variant_order()
    return (
        scales.index(c.scale) if c.scale in scales else len(scales),
        c.scale,
        c.vocab,
        variants.index(c.variant) if c.variant in variants else len(variants),
        c.variant,
        c.seed,
    )


def configurations(cells: Iterable[Cell]) -> Configurations:
    """Cells by (scale, vocab, variant), tied first: seeds of one configuration are averaged."""
    out: dict[tuple[str, str, str], list[Cell]] = defaultdict(list)
    for c in sorted(set(cells), key=_report_order):
        out[c.scale, c.vocab, c.variant].append(c)
    return dict(out)


def seeded(groups: Configurations) -> bool:
    """Whether any configuration has 2 or more seeds: its tables then give 95% CIs."""
    return any(len(cells) >= 2 for cells in groups.values())


def tied_and_leviathan(groups: Configurations) -> list[tuple[str, str]]:
    """The (scale, vocab) of a study with both a leviathan and a tied configuration."""
    return sorted(
        {(s, v) for (s, v, var) in groups if var == "leviathan" and (s, v, "tied") in groups}
    )


@dataclass(frozen=True)
class ReportInputs:
    studies: Mapping[str, Mapping[str, Any]]
    results: str  # the study's results key (leviathan.layout.results_key)
    evals: Sequence[str]  # enabled evaluation kinds (val always)
    paper_path: str  # config/paper_reported.yaml as recorded
    smoke: SmokePolicy = field(default_factory=SmokePolicy.default)  # report.smoke_test
    train: Mapping[str, Any] = field(default_factory=dict)  # config.train: the scales' recipes
    along: bool = False  # config.evaluate.along: evaluations of the kept checkpoints
    # scale -> the device the plan assumes for its training job (report.throughput.plan_devices)
    plan_devices: Mapping[str, str] = field(default_factory=dict)

    def study(self, name: str) -> Configurations:
        return (
            configurations(study_cells(self.studies[name], self.results))
            if name in self.studies
            else {}
        )

    def all_cells(self) -> Configurations:
        return configurations(
            c for s in self.studies.values() for c in study_cells(s, self.results)
        )


@dataclass
class Context:
    """What a table is built from: the inputs, the files read, the paper's reported numbers, and
    the tables built before it (in the registry's order)."""

    inp: ReportInputs
    docs: DocumentCache
    paper: Paper
    paper_numbers: list[PaperNumber]
    tables: dict[str, Table] = field(default_factory=dict)

    def evidence(self, cells: Sequence[Cell]) -> dict[str, str]:
        """The EVIDENCE_COLUMNS labels of a row read from `cells`."""
        return evidence_labels(cells, self.docs, self.inp.smoke, self.inp.train)

    def recipe(self, cells: Sequence[Cell]) -> str:
        """The `recipe` label of a row read from `cells` (evidence.recipe_label)."""
        return recipe_label(cells, self.docs, self.inp.train)

    def set_paper(self, t: Table, row: str) -> None:
        """The paper's reported numbers for one of our rows, in its `paper_*` columns."""
        for number in self.paper_numbers:
            if (number.table, number.row) == (t.name, row):
                t.set(row, f"paper_{number.quantity}", number.spec)


def config_row(
    ctx: Context,
    t: Table,
    scale: str,
    vocab: str,
    variant: str,
    cells: Sequence[Cell],
    baseline: str = "",
) -> str:
    """The row of one configuration, its seeds averaged: `<scale>/<vocab>/<variant>`, with
    the tied configuration its gains are against (leviathan.report.baseline) and what its
    numbers rest on (training tokens, smoke test or not)."""
    return t.add_row(
        f"{scale}/{vocab}/{variant}",
        scale=scale,
        vocab=vocab,
        variant=variant,
        seeds=len(cells),
        baseline=baseline,
        **ctx.evidence(cells),
    )
