"""`leviathan audit`: trace a reported number back to its data and code, re-verifying every hash.

A table's link sits above the provenance chain of leviathan.report.chain:

    table (.md/.tex/.json -> .csv)   manifest: the table's sha256, its inputs, the cell map
      -> evaluation JSON             sha256 recorded by the table; on down the chain

Checked here, each by its own method: a rendering is exactly its CSV rendered
(`check_rendering`); every number has a recorded source (`check_unmapped_numbers`); each
number, recomputed from its cell map (leviathan.report.cellmap), equals the table's
(`audit_number`); every number computed on offline stand-in data is labelled so
(`check_stand_in_labels`). Any mismatch is reported with the exact file and the exit status
is non-zero.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from leviathan import layout
from leviathan.io import read_json_object
from leviathan.layout import manifest_path
from leviathan.report.build import table_from_csv
from leviathan.report.cellmap import ValueSpec, compute, same_number, value_stand_ins
from leviathan.report.chain import ChainWalker, Finding, Status
from leviathan.report.formatting import render
from leviathan.report.table import STAND_IN_COLUMN, stand_in_rows

TABLE_ARTIFACT_TYPES = {"table", "table_rendering"}  # the manifest kinds of a table, its renderings


@dataclass(frozen=True)
class MappedValue:
    """One entry of a table's cell map: the value at (row, column) and how it is computed."""

    row: str
    column: str
    spec: ValueSpec


class Auditor(ChainWalker):
    """The audit of a table (its renderings, every number, the chain behind each) or of any
    other artifact with a manifest (its chain)."""

    def audit(self, p: str | os.PathLike[str], at: tuple[str, str] | None = None) -> str:
        """Audit a report table (any of its renderings: CSV, Markdown, LaTeX, the metrics JSON)
        or another artifact with a manifest, chosen by its manifest's kind; return which
        ("table" or "artifact"). A path that does not exist raises FileNotFoundError."""
        path = self.path(p)
        if not path.exists():
            raise FileNotFoundError(f"{p}: no such file (relative to {self.root})")
        mpath = manifest_path(path)
        artifact_type = (
            read_json_object(mpath).get("kind") if path.is_file() and mpath.is_file() else None
        )
        suffixes = tuple(f".{fmt}" for fmt in layout.TABLE_FORMATS)
        if (
            at is not None
            or artifact_type in TABLE_ARTIFACT_TYPES
            or (artifact_type is None and path.suffix in suffixes)
        ):
            self.audit_table(p, at)
            return "table"
        self.audit_artifact(p)
        return "artifact"

    # ------------------------------------------------------------ tables
    def audit_table(self, table: str | os.PathLike[str], at: tuple[str, str] | None = None) -> None:
        """Every number of a table (or the one `at` (row, column)) and the chain behind it."""
        found = self.table_csv(table)
        if found is None:
            return
        path, manifest = found
        self.check_unchanged(path, manifest, 0, "the table")
        self.check_commit(manifest.get("code"), self.show(manifest_path(path)), 1)
        recorded_inputs = {i["path"]: i.get("sha256") for i in manifest.get("inputs", [])}
        frame = pd.read_csv(path, dtype={"row": str}).set_index("row")
        mapped = [
            MappedValue(c["row"], c["column"], ValueSpec.from_dict(c))
            for c in manifest.get("cells", [])
        ]
        if at is not None:
            picked = [m for m in mapped if (m.row, m.column) == at]
            if not picked:
                self.check_empty_number(path, frame, at)
                return
            mapped = picked
        else:
            self.check_unmapped_numbers(path, frame, manifest, mapped)
        for m in mapped:
            self.audit_number(path, frame, m.row, m.column, m.spec, recorded_inputs)
        if at is None:
            self.check_stand_in_labels(path, frame, mapped)

    def table_csv(self, table: str | os.PathLike[str]) -> tuple[Path, Mapping[str, Any]] | None:
        """The CSV behind a table file and its manifest (a rendering checked against the CSV on
        the way); None, with a failure recorded, where there is no table's manifest."""
        path = self.path(table)
        mpath = manifest_path(path)
        if not mpath.is_file():
            self.failed(
                0, str(table), f"no manifest {mpath.name}: not a report table (or not finished)"
            )
            return None
        manifest = read_json_object(mpath)
        if manifest.get("kind") == "table_rendering":
            found = self.rendered_csv(path, manifest)
            if found is None:
                return None
            path, manifest = found
        if manifest.get("kind") != "table":
            self.failed(
                0, str(table), f"{mpath.name} is a {manifest.get('kind')!r} manifest, not a table's"
            )
            return None
        return path, manifest

    def rendered_csv(
        self, rendering: Path, manifest: Mapping[str, Any]
    ) -> tuple[Path, Mapping[str, Any]] | None:
        """The CSV a rendering (Markdown, LaTeX, JSON) was written from and that CSV's manifest,
        after checking the rendering is unchanged and exactly the CSV rendered."""
        self.check_unchanged(rendering, manifest, 0, "the rendering")
        csv = manifest["inputs"][0]
        path = self.path(csv["path"])
        if not manifest_path(path).is_file():
            self.failed(
                0,
                self.show(path),
                f"the table {self.show(manifest_path(rendering))} was rendered from has no manifest",
            )
            return None
        csv_manifest = read_json_object(manifest_path(path))
        self.check_rendering(rendering, path, csv_manifest)
        if csv_manifest["artifact"]["sha256"] != csv["sha256"]:
            self.failed(
                0,
                self.show(path),
                f"is not the table {self.show(manifest_path(rendering))} was rendered from",
            )
        return path, csv_manifest

    def check_unchanged(
        self, path: Path, manifest: Mapping[str, Any], depth: int, what: str
    ) -> None:
        """A report file is what the report step wrote (the sha256 of its own manifest)."""
        where = self.show(manifest_path(path))
        if not self.check_hash(path, manifest["artifact"]["sha256"], where, depth):
            self.failed(
                depth,
                self.show(path),
                f"{what} differs from what the report step wrote (hand-edited?)",
            )

    def check_empty_number(self, path: Path, frame: pd.DataFrame, at: tuple[str, str]) -> None:
        """A table position asked for that has no recorded source: fine where it is empty, else a
        failure."""
        row, column = at
        empty = row in frame.index and column in frame.columns and pd.isna(frame.loc[row, column])
        status = Status.OK if empty else Status.FAIL
        self.record(status, 0, f"{path.name} [{row}, {column}]", _no_number(frame, at))

    def check_unmapped_numbers(
        self,
        path: Path,
        frame: pd.DataFrame,
        manifest: Mapping[str, Any],
        mapped: list[MappedValue],
    ) -> None:
        """A number written into a cell that has no source ("-": not applicable, not run)."""
        sourced = {(m.row, m.column) for m in mapped}
        for column in (manifest.get("config") or {}).get("columns", {}):
            for row in frame.index[frame[column].notna()] if column in frame.columns else []:
                if (row, column) not in sourced:
                    self.failed(
                        0,
                        f"{path.name} [{row}, {column}]",
                        f"holds {frame.loc[row, column]} but has no recorded source: "
                        f"{self.show(path)} was edited",
                    )

    def check_stand_in_labels(
        self, path: Path, frame: pd.DataFrame, mapped: list[MappedValue]
    ) -> None:
        """Every number computed on offline stand-in data must be labelled so in its row."""
        expected: dict[str, set[str]] = {row: set() for row in frame.index}
        unread: set[str] = set()  # rows with a missing source: failed above, not judged here
        for m in mapped:
            if not all(self.path(p).is_file() for p in _unique_paths(m.spec)):
                unread.add(m.row)
            elif value_stand_ins(m.spec, self.docs):
                expected.setdefault(m.row, set()).add(m.column)
        labelled = dict(zip(frame.index, stand_in_rows(frame.reset_index()), strict=True))
        wrong = sorted(
            r for r in expected if r not in unread and expected[r] != labelled.get(r, set())
        )
        what = f"{path.name} [{STAND_IN_COLUMN}]"
        if wrong:
            self.failed(
                0,
                what,
                f"rows {wrong[:5]} do not label their stand-in numbers as the evaluations record them",
            )
        else:
            self.passed(0, what, "stand-in labels match the evaluations' stand_in_data")

    def check_rendering(self, rendering: Path, csv: Path, manifest: Mapping[str, Any]) -> None:
        """A Markdown/LaTeX table must be exactly its CSV rendered (numbers edited there show here)."""
        table, frame = table_from_csv(csv, manifest)
        if rendering.read_text() != render(table, frame, rendering.suffix.lstrip(".")):
            self.failed(0, self.show(rendering), f"is not {self.show(csv)} rendered: it was edited")

    def audit_number(
        self,
        table: Path,
        frame: pd.DataFrame,
        row: str,
        column: str,
        spec: ValueSpec,
        recorded_inputs: Mapping[str, str | None],
    ) -> None:
        """One number: the files it reads (and their chains), then it recomputed from them."""
        label = f"{table.name} [{row}, {column}]"
        at = len(self.findings)  # the verdict goes above the chain it rests on
        files_ok = True
        for src in _unique_paths(spec):
            if self.check_hash(src, recorded_inputs.get(src), self.show(manifest_path(table)), 1):
                self.walk(src, 1, recorded_inputs.get(src))
            else:
                files_ok = False
        if files_ok:
            verdict = self._recomputed(table, _shown(frame, row, column), spec, label)
        else:
            verdict = Finding(
                Status.FAIL, 0, label, "not recomputed: a source file is missing or changed"
            )
        self.findings.insert(at, verdict)

    def _recomputed(self, table: Path, shown: float, spec: ValueSpec, label: str) -> Finding:
        """The verdict on a number: its sources give the value the table shows?"""
        value = compute(spec, self.docs)
        ops = spec.op if not spec.parts else f"{spec.op}({', '.join(p.op for p in spec.parts)})"
        if same_number(shown, value):
            detail = f"= {shown:.6g} ({ops} of {len(spec.leaves())} recorded field(s))"
            return Finding(Status.OK, 0, label, detail)
        detail = f"the table says {shown:.6g} but its sources give {value:.6g} ({ops}): {table} was edited"
        return Finding(Status.FAIL, 0, label, detail)


def _shown(frame: pd.DataFrame, row: str, column: str) -> float:
    """The number a table's CSV shows at (row, column); NaN where it has none."""
    try:
        return (
            float(frame.loc[row, column])
            if row in frame.index and column in frame.columns
            else math.nan
        )
    except (TypeError, ValueError):
        return math.nan


def _unique_paths(spec: ValueSpec) -> Iterator[str]:
    seen: set[str] = set()
    for s in spec.leaves():
        if s.path not in seen:
            seen.add(s.path)
            yield s.path


def _no_number(frame: pd.DataFrame, at: tuple[str, str]) -> str:
    row, col = at
    if row not in frame.index:
        return f"no row {row!r} (rows: {', '.join(map(str, frame.index[:8]))}{', ...' if len(frame) > 8 else ''})"
    if col not in frame.columns:
        return f"no column {col!r} (columns: {', '.join(frame.columns)})"
    return "empty: not applicable or not run, nothing to verify"
