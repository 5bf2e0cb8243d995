"""`leviathan audit`: trace a reported number back to its data and code, re-verifying every hash.

The chain, each link checked against the hash its consumer recorded:

    table (.md/.tex -> .csv)     manifest: the table's sha256, its inputs, the cell map
      -> evaluation JSON         sha256 recorded by the table; it records the checkpoint's
                                 weights and state sha256 and its data inputs
        -> checkpoint            model.safetensors.json: weights sha256, train/val shards
          -> token shards        train.bin.json: shard sha256, raw corpus, vocabulary file
            -> raw corpus        train.jsonl.zst.json
            -> vocabulary file   the BPE file's sha256 (checked where it is in the cache here)

An export (`leviathan export`, results/export/<cell>/) is audited the same way from its
manifest model.safetensors.json: every file of the directory, then the checkpoint it came
from and on down the chain.

Every recorded git commit must exist in this checkout's history. A number itself is
recomputed from its cell map (leviathan.report.cellmap) and compared with the table.
Any mismatch is reported with the exact file and the exit status is non-zero.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from leviathan import layout
from leviathan.io import read_json, sha256_file
from leviathan.layout import STATE, WEIGHTS, manifest_path
from leviathan.provenance import git
from leviathan.report.cellmap import CellSpec, DocumentCache, compute, same_number

EVAL_KINDS = {"val", "wikitext", "lm_eval", "sample_efficiency", "word_counts"}
TABLE_KINDS = {"table", "table_rendering"}  # manifest kinds of a table and its renderings


@dataclass(frozen=True)
class Finding:
    ok: bool
    depth: int
    what: str
    detail: str = ""
    unverified: bool = False  # nothing wrong found, but it could not be checked here

    def line(self) -> str:
        status = "FAIL" if not self.ok else "n/v " if self.unverified else "ok  "
        return f"{status} {'  ' * self.depth}{self.what}" + (
            f"  {self.detail}" if self.detail else ""
        )


@dataclass
class Auditor:
    root: Path = field(default_factory=Path.cwd)
    findings: list[Finding] = field(default_factory=list)
    _sha: dict[Path, str] = field(default_factory=dict)
    _walked: set[Path] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.docs = DocumentCache(self.root)  # recorded paths resolve against the audit root

    # ------------------------------------------------------------ primitives
    def path(self, p: str | os.PathLike[str]) -> Path:
        return self.docs.path(p)

    def show(self, p: str | os.PathLike[str]) -> str:
        """A path as printed: relative to the audit root where it lies inside it."""
        path = self.path(p)
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def note(
        self, ok: bool, depth: int, what: str, detail: str = "", unverified: bool = False
    ) -> bool:
        self.findings.append(Finding(ok, depth, what, detail, unverified))
        return ok

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if not f.ok]

    @property
    def unverified(self) -> list[Finding]:
        return [f for f in self.findings if f.ok and f.unverified]

    def sha(self, p: Path) -> str:
        if p not in self._sha:
            self._sha[p] = sha256_file(p)
        return self._sha[p]

    def check_hash(
        self, p: str | os.PathLike[str], recorded: str | None, where: str, depth: int
    ) -> bool:
        """Is the file's content the one `where` recorded?"""
        path, shown = self.path(p), self.show(p)
        if not path.is_file():
            return self.note(False, depth, shown, f"missing (recorded in {where})")
        if not recorded:
            return self.note(False, depth, shown, f"no sha256 recorded in {where}")
        actual = self.sha(path)
        if actual != recorded:
            return self.note(
                False,
                depth,
                shown,
                f"sha256 {actual[:12]} != {recorded[:12]} recorded in {where}: the file changed",
            )
        return self.note(True, depth, shown, f"sha256 {actual[:12]}")

    def check_commit(self, code: Mapping[str, Any] | None, where: str, depth: int) -> None:
        commit = (code or {}).get("git_commit")
        if not commit:
            self.note(
                True,
                depth,
                f"code of {where}",
                "no git commit recorded (not run from a git checkout)",
                True,
            )
            return
        exists = _commit_exists(commit)
        if exists is None:
            self.note(
                True, depth, f"code {commit[:12]}", "not verifiable here (no git checkout)", True
            )
        elif not exists:
            hint = " (this is a shallow clone: git fetch --unshallow)" if _shallow() else ""
            self.note(
                False,
                depth,
                f"code {commit[:12]}",
                f"recorded in {where}: no such commit in this repository{hint}",
            )
        elif (code or {}).get("git_dirty"):
            self.note(
                True,
                depth,
                f"code {commit[:12]}",
                "commit exists, but the run had uncommitted changes",
                True,
            )
        else:
            self.note(True, depth, f"code {commit[:12]}", "commit exists")

    # ------------------------------------------------------------ the chain
    def walk(self, p: str | os.PathLike[str], depth: int, verified: str | None = None) -> None:
        """Verify what `p` records about its own inputs (`verified`: the sha256 its consumer
        recorded and that was just checked; the file's own manifest must agree with it)."""
        path = self.path(p)
        if path in self._walked:
            return
        self._walked.add(path)
        mpath = manifest_path(path)
        if mpath.is_file():
            self.walk_manifest(path, read_json(mpath), depth, verified)
        elif path.name == STATE:
            self.walk_checkpoint_dir(path.parent, depth)
        elif path.suffix == ".json":
            doc = read_json(path)
            if isinstance(doc, Mapping) and doc.get("kind") in EVAL_KINDS and "inputs" in doc:
                self.walk_eval(path, doc, depth)

    def walk_manifest(
        self, path: Path, manifest: Mapping[str, Any], depth: int, verified: str | None = None
    ) -> None:
        mpath = self.show(manifest_path(path))
        recorded = manifest.get("artifact", {}).get("sha256")
        if verified is None or recorded != verified:  # else: the line above already says it
            self.check_hash(path, recorded, f"its manifest {mpath}", depth)
        self.check_commit(manifest.get("code"), mpath, depth + 1)
        for name, sha in (
            manifest.get("files") or {}
        ).items():  # the other files of a directory artifact
            self.check_hash(path.parent / name, sha, f"its manifest {mpath}", depth + 1)
        vocab = manifest.get("vocab")
        if vocab and vocab.get("bpe_file"):
            self.check_vocab_file(vocab, mpath, depth + 1)
        for inp in manifest.get("inputs", []):
            if self.check_hash(inp["path"], inp.get("sha256"), mpath, depth + 1):
                self.walk(inp["path"], depth + 1, inp.get("sha256"))

    def walk_checkpoint_dir(self, ckpt_dir: Path, depth: int, verified: str | None = None) -> None:
        weights = ckpt_dir / WEIGHTS
        mpath = manifest_path(weights)
        if mpath.is_file():
            manifest = read_json(mpath)
            state = ckpt_dir / STATE  # the configs the tables' params/FLOPs read
            if self.check_hash(state, manifest.get("state_sha256"), self.show(mpath), depth) and (
                read_json(state).get("model_config") != manifest.get("model_config")
            ):
                self.note(
                    False, depth, self.show(state), f"model_config differs from {self.show(mpath)}"
                )
            self.walk(weights, depth, verified)
        else:
            self.note(
                False,
                depth,
                self.show(weights),
                f"the checkpoint has no manifest {manifest_path(weights).name} "
                "(written by the trainer since provenance v2: retrain the cell to record it)",
            )

    def walk_eval(self, path: Path, doc: Mapping[str, Any], depth: int) -> None:
        depth, where = depth + 1, self.show(path)
        self.check_commit(doc.get("code"), where, depth)
        ckpt = doc.get("checkpoint")
        if ckpt:
            self.check_cell_identity(path, ckpt, depth)
            ckpt_dir = self.path(ckpt["path"])
            self.check_hash(ckpt_dir / STATE, ckpt.get("state_sha256"), where, depth)
            if ckpt.get("manifest"):  # the checkpoint's manifest as it was when evaluated
                self.check_hash(ckpt["manifest"], ckpt.get("manifest_sha256"), where, depth)
            elif "manifest" in ckpt:
                self.note(
                    False,
                    depth,
                    self.show(ckpt_dir),
                    f"{self.show(path)} evaluated a checkpoint without a manifest",
                )
            if self.check_hash(ckpt_dir / WEIGHTS, ckpt.get("sha256"), where, depth):
                self.walk_checkpoint_dir(ckpt_dir, depth, ckpt.get("sha256"))
        for inp in doc.get("inputs", []):
            if self.check_hash(inp["path"], inp.get("sha256"), where, depth):
                self.walk(inp["path"], depth, inp.get("sha256"))
            if inp.get(
                "checkpoint_sha256"
            ):  # a run's metrics (sample efficiency): its final checkpoint
                final = layout.final_dir(self.path(inp["path"]).parent)
                if self.check_hash(final / WEIGHTS, inp["checkpoint_sha256"], where, depth):
                    self.walk_checkpoint_dir(final, depth + 1, inp["checkpoint_sha256"])

    def check_cell_identity(self, path: Path, ckpt: Mapping[str, Any], depth: int) -> None:
        """An evaluation under results/eval/<scale>/<vocab>/<variant>/seed<k>/ must be of that cell."""
        sits_in = layout.eval_cell_key(path)
        if sits_in is None:
            return
        recorded = layout.record_cell_key(ckpt)
        if sits_in != recorded:
            self.note(
                False,
                depth,
                self.show(path),
                f"evaluates the checkpoint of cell {recorded} "
                f"but sits in {sits_in}'s directory (a copied or swapped evaluation)",
            )

    def check_vocab_file(self, vocab: Mapping[str, Any], where: str, depth: int) -> None:
        from leviathan.data.tokenizers import cache_dir

        bpe = cache_dir() / vocab["bpe_file"]
        what = f"vocabulary {vocab.get('name')} ({vocab['bpe_file']})"
        if not bpe.is_file():
            self.note(
                True,
                depth,
                what,
                f"not in this machine's cache ({bpe.parent}); recorded sha256 "
                f"{str(vocab.get('bpe_sha256'))[:12]}",
                True,
            )
        elif self.sha(bpe) != vocab.get("bpe_sha256"):
            self.note(
                False,
                depth,
                what,
                f"{bpe}: sha256 {self.sha(bpe)[:12]} != {str(vocab.get('bpe_sha256'))[:12]} recorded in {where}",
            )
        else:
            self.note(True, depth, what, f"sha256 {self.sha(bpe)[:12]}")

    # ------------------------------------------------------------ entry
    def audit(self, p: str | os.PathLike[str], cell: tuple[str, str] | None = None) -> str:
        """Audit a report table (any of its renderings: CSV, Markdown, LaTeX, the metrics JSON)
        or another artifact with a manifest, chosen by its manifest's kind; return which
        ("table" or "artifact"). A path that does not exist raises FileNotFoundError."""
        path = self.path(p)
        if not path.exists():
            raise FileNotFoundError(f"{p}: no such file (relative to {self.root})")
        mpath = manifest_path(path)
        kind = read_json(mpath).get("kind") if path.is_file() and mpath.is_file() else None
        suffixes = tuple(f".{fmt}" for fmt in layout.TABLE_FORMATS)
        if cell is not None or kind in TABLE_KINDS or (kind is None and path.suffix in suffixes):
            self.audit_table(p, cell)
            return "table"
        self.audit_artifact(p)
        return "artifact"

    # ------------------------------------------------------------ artifacts
    def audit_artifact(self, p: str | os.PathLike[str]) -> None:
        """The chain behind one artifact with a manifest (a directory means its
        model.safetensors: a checkpoint or a `leviathan export` directory)."""
        path = self.path(p)
        if path.is_dir():
            path = path / WEIGHTS
        if not manifest_path(path).is_file():
            self.note(
                False,
                0,
                self.show(path),
                f"no manifest {manifest_path(path).name}: not a pipeline artifact (or not finished)",
            )
            return
        self.walk(path, 0)

    # ------------------------------------------------------------ tables
    def audit_table(
        self, table: str | os.PathLike[str], cell: tuple[str, str] | None = None
    ) -> None:
        path = self.path(table)
        mpath = manifest_path(path)
        if not mpath.is_file():
            self.note(
                False,
                0,
                str(table),
                f"no manifest {mpath.name}: not a report table (or not finished)",
            )
            return
        manifest = read_json(mpath)
        rendering = path
        if manifest.get("kind") == "table_rendering":
            if not self.check_hash(path, manifest["artifact"]["sha256"], self.show(mpath), 0):
                self.note(
                    False,
                    0,
                    self.show(path),
                    "the rendering differs from what the report step wrote (hand-edited?)",
                )
            csv = manifest["inputs"][0]
            path = self.path(csv["path"])
            if not manifest_path(path).is_file():
                self.note(
                    False,
                    0,
                    self.show(path),
                    f"the table {self.show(mpath)} was rendered from has no manifest",
                )
                return
            manifest = read_json(manifest_path(path))
            self.check_rendering(rendering, path, manifest)
            if manifest["artifact"]["sha256"] != csv["sha256"]:
                self.note(
                    False,
                    0,
                    self.show(path),
                    f"is not the table {self.show(mpath)} was rendered from",
                )
        if manifest.get("kind") != "table":
            self.note(
                False,
                0,
                str(table),
                f"{mpath.name} is a {manifest.get('kind')!r} manifest, not a table's",
            )
            return
        if not self.check_hash(
            path, manifest["artifact"]["sha256"], self.show(manifest_path(path)), 0
        ):
            self.note(
                False,
                0,
                self.show(path),
                "the table differs from what the report step wrote (hand-edited?)",
            )
        self.check_commit(manifest.get("code"), self.show(manifest_path(path)), 1)
        recorded_inputs = {i["path"]: i.get("sha256") for i in manifest.get("inputs", [])}
        frame = pd.read_csv(path, dtype={"row": str}).set_index("row")
        cells = [(c["row"], c["column"], CellSpec.from_dict(c)) for c in manifest.get("cells", [])]
        mapped = {(r, c) for r, c, _ in cells}
        if cell is not None:
            picked = [c for c in cells if (c[0], c[1]) == cell]
            if not picked:
                empty = (
                    cell[0] in frame.index
                    and cell[1] in frame.columns
                    and pd.isna(frame.loc[cell[0], cell[1]])
                )
                self.note(empty, 0, f"{path.name} [{cell[0]}, {cell[1]}]", _no_cell(frame, cell))
                return
            cells = picked
        else:  # a number written into a cell that has no source ("-": not applicable, not run)
            for column in (manifest.get("config") or {}).get("columns", {}):
                for row in frame.index[frame[column].notna()] if column in frame.columns else []:
                    if (row, column) not in mapped:
                        self.note(
                            False,
                            0,
                            f"{path.name} [{row}, {column}]",
                            f"holds {frame.loc[row, column]} but has no recorded source: {self.show(path)} was edited",
                        )
        for row, column, spec in cells:
            self.audit_cell(path, frame, row, column, spec, recorded_inputs)
        if cell is None:
            self.check_stand_in_labels(path, frame, cells)

    def check_stand_in_labels(
        self, path: Path, frame: pd.DataFrame, cells: list[tuple[str, str, CellSpec]]
    ) -> None:
        """Every number computed on offline stand-in data must be labelled so in its row."""
        from leviathan.report.cellmap import cell_stand_ins
        from leviathan.report.tables import STAND_IN_COLUMN, stand_in_rows

        expected: dict[str, set[str]] = {row: set() for row in frame.index}
        for row, column, spec in cells:
            if cell_stand_ins(spec, self.docs):
                expected.setdefault(row, set()).add(column)
        labelled = dict(zip(frame.index, stand_in_rows(frame.reset_index()), strict=True))
        wrong = sorted(r for r in expected if expected[r] != labelled.get(r, set()))
        self.note(
            not wrong,
            0,
            f"{path.name} [{STAND_IN_COLUMN}]",
            "stand-in labels match the evaluations' stand_in_data"
            if not wrong
            else f"rows {wrong[:5]} do not label their stand-in numbers as the evaluations record them",
        )

    def check_rendering(self, rendering: Path, csv: Path, manifest: Mapping[str, Any]) -> None:
        """A Markdown/LaTeX table must be exactly its CSV rendered (numbers edited there show here)."""
        from leviathan.report.build import render, table_from_csv

        table, frame = table_from_csv(csv, manifest)
        if rendering.read_text() != render(table, frame, rendering.suffix.lstrip(".")):
            self.note(
                False, 0, self.show(rendering), f"is not {self.show(csv)} rendered: it was edited"
            )

    def audit_cell(
        self,
        table: Path,
        frame: pd.DataFrame,
        row: str,
        column: str,
        spec: CellSpec,
        recorded_inputs: Mapping[str, str | None],
    ) -> None:
        label = f"{table.name} [{row}, {column}]"
        at = len(self.findings)  # the verdict goes above the chain it rests on
        files_ok = True
        for src in _unique_paths(spec):
            if self.check_hash(src, recorded_inputs.get(src), self.show(manifest_path(table)), 1):
                self.walk(src, 1, recorded_inputs.get(src))
            else:
                files_ok = False
        try:
            shown = (
                float(frame.loc[row, column])
                if row in frame.index and column in frame.columns
                else math.nan
            )
        except (TypeError, ValueError):
            shown = math.nan
        if not files_ok:
            verdict = Finding(
                False, 0, label, "not recomputed: a source file is missing or changed"
            )
        else:
            value = compute(spec, self.docs)
            ops = spec.op if not spec.parts else f"{spec.op}({', '.join(p.op for p in spec.parts)})"
            if same_number(shown, value):
                verdict = Finding(
                    True,
                    0,
                    label,
                    f"= {shown:.6g} ({ops} of {len(spec.leaves())} recorded field(s))",
                )
            else:
                verdict = Finding(
                    False,
                    0,
                    label,
                    f"the table says {shown:.6g} but its sources give {value:.6g} "
                    f"({ops}): {table} was edited",
                )
        self.findings.insert(at, verdict)


def _unique_paths(spec: CellSpec) -> Iterator[str]:
    seen: set[str] = set()
    for s in spec.leaves():
        if s.path not in seen:
            seen.add(s.path)
            yield s.path


def _no_cell(frame: pd.DataFrame, cell: tuple[str, str]) -> str:
    row, col = cell
    if row not in frame.index:
        return f"no row {row!r} (rows: {', '.join(map(str, frame.index[:8]))}{', ...' if len(frame) > 8 else ''})"
    if col not in frame.columns:
        return f"no column {col!r} (columns: {', '.join(frame.columns)})"
    return "empty: not applicable or not run, nothing to verify"


@cache
def _shallow() -> bool:
    return git("rev-parse", "--is-shallow-repository") == "true"


@cache
def _commit_exists(commit: str) -> bool | None:
    """Whether this checkout's history has `commit` (None: not a git checkout here)."""
    if git("rev-parse", "--git-dir") is None:
        return None
    return git("cat-file", "-e", f"{commit}^{{commit}}") is not None
