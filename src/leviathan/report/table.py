"""A report table: rows of labels and numeric columns whose values are declared, not typed in.

Each numeric value is a `ValueSpec` (leviathan.report.cellmap) addressed by (row, column): the
number is computed from the fields of the files it names, and that declaration is saved in the
table's manifest (its cell map), so `leviathan audit` can trace and re-check any number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from leviathan.report.cellmap import CI_SUFFIX, DocumentCache, ValueSpec, compute, value_stand_ins
from leviathan.report.evidence import FULL, SMOKE

# The label column naming, per row, the numeric columns computed on offline stand-in data.
STAND_IN_COLUMN = "stand_in_data"


@dataclass
class Table:
    name: str
    title: str
    label_columns: list[str]
    columns: dict[str, str]  # numeric column -> its format (leviathan.report.formatting.FORMATS)
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # row id -> labels
    smoke_note: str = ""  # what a row whose `evidence` is SMOKE means (SmokePolicy.note)
    source: str = "the evaluation outputs"  # what its values are read from (the Markdown's note)
    specs: dict[tuple[str, str], ValueSpec] = field(default_factory=dict)  # (row, column) -> value

    def add_row(self, row: str, **labels: Any) -> str:
        if "," in row:
            raise ValueError(
                f"row id {row!r} must not contain a comma (cells are addressed ROW,COL)"
            )
        self.rows[row] = labels
        return row

    def set(self, row: str, column: str, spec: ValueSpec | None) -> None:
        """Declare a value; where the table has `<column>_ci95`, its confidence interval too."""
        if column not in self.columns:
            raise KeyError(f"{self.name}: no column {column!r}")
        if spec is not None and spec.leaves():
            self.specs[row, column] = spec
            if column + CI_SUFFIX in self.columns and not spec.parts:
                self.specs[row, column + CI_SUFFIX] = ValueSpec(spec.op + CI_SUFFIX, spec.sources)

    def with_ci(self, *columns: str) -> None:
        """Add `<column>_ci95` after each of `columns` (call before setting values)."""
        out: dict[str, str] = {}
        for col, column_format in self.columns.items():
            out[col] = column_format
            if col in columns:
                out[col + CI_SUFFIX] = "ci_" + column_format
        self.columns = out

    def frame(self, docs: DocumentCache) -> pd.DataFrame:
        records = []
        for row, labels in self.rows.items():
            rec: dict[str, Any] = {"row": row, **{c: labels.get(c) for c in self.label_columns}}
            stand_in = []
            for col in self.columns:
                spec = self.specs.get((row, col))
                rec[col] = compute(spec, docs) if spec is not None else math.nan
                if spec is not None and value_stand_ins(spec, docs):
                    stand_in.append(col)
            rec[STAND_IN_COLUMN] = ";".join(stand_in)
            records.append(rec)
        return pd.DataFrame(
            records, columns=["row", *self.label_columns, STAND_IN_COLUMN, *self.columns]
        )

    def cell_map(self) -> list[dict[str, Any]]:
        return [{"row": r, "column": c, **spec.to_dict()} for (r, c), spec in self.specs.items()]

    def sources(self) -> list[str]:
        return sorted({s.path for spec in self.specs.values() for s in spec.leaves()})


def missing(value: Any) -> bool:
    """An empty value (not applicable or not run): None or NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def smoke_rows(frame: pd.DataFrame) -> list[bool]:
    """Per row: whether it rests on a smoke test (its `evidence` label; see leviathan.report.evidence)."""
    col = frame["evidence"] if "evidence" in frame else [FULL] * len(frame)
    return [v == SMOKE for v in col]


def stand_in_rows(frame: pd.DataFrame) -> list[set[str]]:
    """Per row: the columns computed on offline stand-in data."""
    col = frame[STAND_IN_COLUMN] if STAND_IN_COLUMN in frame else [""] * len(frame)
    return [set(str(v).split(";")) - {""} if isinstance(v, str) else set() for v in col]
