"""The paper's reported numbers (config/paper_reported.yaml, their one home) and where they sit
in our tables.

`Paper` is the one way to reach them, with accessors by section and scale and the JSON pointer of
each number (what a report cell records as its source); `paper_numbers` places each point number
as a value of the table, row and column it compares with (the tables' `paper_*` columns and the
rows of paper_vs_ours)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from leviathan.layout import PAPER_REPORTED, repo_root
from leviathan.report.cellmap import Source, ValueSpec

ENV_VAR = "LEVIATHAN_PAPER_REPORTED"


def reported_path() -> Path:
    return Path(os.environ.get(ENV_VAR) or repo_root() / PAPER_REPORTED)


@cache
def _load(path: Path) -> Mapping[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: the paper's reported figures are missing; run from a checkout of the "
            f"project or set {ENV_VAR} to the path of {PAPER_REPORTED}"
        )
    return yaml.safe_load(path.read_text())


@dataclass(frozen=True)
class Paper:
    """The paper's reported numbers. Sections other than `vocabulary` are keyed by scale (`main`,
    `downstream`, `ablation`, `frequency`, `sample_efficiency`; `cost` beside its
    scale-free claims): `paper.ablation("400m")["leviathan"]["gain"]`."""

    doc: Mapping[str, Any]
    path: str  # as recorded in the sources of report cells

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None) -> Paper:
        p = Path(path) if path is not None else reported_path()
        return cls(_load(p), str(p))

    def scales(self, section: str) -> list[str]:
        """The scales a section reports, in the file's order."""
        return [k for k, v in self.doc.get(section, {}).items() if isinstance(v, Mapping)]

    def _at(self, section: str, scale: str) -> Mapping[str, Any]:
        return self.doc.get(section, {}).get(scale, {})

    def main(self, scale: str) -> Mapping[str, Any]:
        return self._at("main", scale)

    def downstream(self, scale: str) -> Mapping[str, Any]:
        return self._at("downstream", scale)

    def ablation(self, scale: str) -> Mapping[str, Any]:
        return self._at("ablation", scale)

    def cost(self, scale: str | None = None) -> Mapping[str, Any]:
        """The cost claims, or (with a scale) the cost numbers of that scale."""
        return self.doc["cost"] if scale is None else self._at("cost", scale)

    def pointer(self, *keys: str | int) -> str | None:
        """The JSON pointer of a reported number (e.g. "main", "400m", "tied", "val_loss"),
        None where the paper does not report it."""
        node: Any = self.doc
        for k in keys:
            if isinstance(node, Mapping) and k in node:
                node = node[k]
            elif isinstance(node, list) and isinstance(k, int) and k < len(node):
                node = node[k]
            else:
                return None
        return "/" + "/".join(str(k).replace("~", "~0").replace("/", "~1") for k in keys)


PAPER_TASKS = ["hellaswag", "arc_easy", "arc_challenge", "piqa", "winogrande", "lambada_openai"]
PAPER_MAIN_VOCAB = "o200k_base"  # the paper's main study and ablation use o200k
# main-table column -> the paper's key for it under `main.<scale>.<variant>` (paper_reported.yaml)
# and the op that gives our column's quantity: the paper states its val PPL change (negative =
# better); our val_ppl_gain is its negative (GAIN_CONVENTION: positive = better)
MAIN_PAPER_NUMBERS = {
    "val_loss": ("val_loss", "mean"),
    "val_ppl": ("val_ppl", "mean"),
    "val_ppl_gain": ("val_ppl_change", "neg"),
    "wikitext_ppl_gain": ("wikitext103_ppl_gain", "mean"),
    "lambada_ppl_gain": ("lambada_ppl_gain", "mean"),
}


def paper_value(paper: Paper, *keys: str | int, op: str = "mean") -> ValueSpec | None:
    """A reported number as a table value (config/paper_reported.yaml is recorded and hashed like any
    input); None where the paper does not report it."""
    pointer = paper.pointer(*keys)
    return ValueSpec(op, (Source(paper.path, pointer),)) if pointer else None


@dataclass(frozen=True)
class PaperNumber:
    """A point number of the paper and where it sits in our tables: column `paper_<quantity>`
    of row `<scale>/o200k_base/<key>` of `table` (key: a variant, or a frequency bucket)."""

    table: str
    scale: str
    key: str
    quantity: str
    spec: ValueSpec

    @property
    def row(self) -> str:
        return f"{self.scale}/{PAPER_MAIN_VOCAB}/{self.key}"


# the paper's frequency numbers -> (our bucket label, column); its "> 1M" is our ">=1000000"
FREQUENCY_PAPER_NUMBERS = {
    "bucket_1_9_ppl_gain": ("1-9", "ppl_gain"),
    "bucket_1_9_loss_gain_nats": ("1-9", "loss_gain_nats"),
    "bucket_over_1m_gain": (">=1000000", "ppl_gain"),
}
# the paper's cost numbers of a scale (leviathan vs tied) -> cost-table column
COST_PAPER_NUMBERS = {"param_overhead": "params_overhead", "flop_overhead": "flops_overhead"}
ABLATION_PAPER_NUMBERS = ("val_loss", "gain", "params")
# each quantity of the paper's point numbers -> the format its tables show it in
# (leviathan.report.formatting.FORMATS): paper_vs_ours shows each row in its quantity's, so a
# gain reads in % there as in its own table
QUANTITY_FORMATS = {
    "val_loss": "loss",
    "val_ppl": "ppl",
    "val_ppl_gain": "pct",
    "wikitext_ppl_gain": "pct",
    "lambada_ppl_gain": "pct",
    "gain": "pct",
    "params": "int",
    "mean": "points",
    "gain_points": "dpoints",
    "ppl_gain": "pct",
    "loss_gain_nats": "loss",
    "params_overhead": "pct",
    "flops_overhead": "pct",
    "tokens_ratio": "num",
}


def paper_numbers(paper: Paper) -> list[PaperNumber]:
    """Every point number of the paper beside the cell of ours it compares with: the tables'
    `paper_*` values and the rows of paper_vs_ours. A table's numbers are the section of the
    same name in config/paper_reported.yaml. (Its vocabulary study is a range over
    vocabularies, not a point: the vocabulary table shows it on every row.)"""
    out: list[PaperNumber] = []

    def add(table: str, scale: str, key: str, quantity: str, *path: str, op: str = "mean") -> None:
        spec = paper_value(paper, table, scale, *path, op=op)
        if spec is not None:
            out.append(PaperNumber(table, scale, key, quantity, spec))

    for scale in paper.scales("main"):
        for variant, numbers in paper.main(scale).items():
            if not isinstance(numbers, Mapping):
                continue  # the scale's training tokens
            for col, (key, op) in MAIN_PAPER_NUMBERS.items():
                add("main", scale, variant, col, variant, key, op=op)
    for scale in paper.scales("ablation"):
        for variant in paper.ablation(scale):
            for col in ABLATION_PAPER_NUMBERS:
                add("ablation", scale, variant, col, variant, col)
    for scale in paper.scales("downstream"):
        for variant, accuracies in paper.downstream(scale).items():
            if not isinstance(accuracies, Mapping):
                continue  # the mean of the per-task accuracies (it states only the mean gain)
            tasks = [paper_value(paper, "downstream", scale, variant, t) for t in PAPER_TASKS]
            if all(tasks):
                sources = tuple(s for spec in tasks for s in spec.sources)  # type: ignore[union-attr]
                out.append(
                    PaperNumber("downstream", scale, variant, "mean", ValueSpec("mean", sources))
                )
        add("downstream", scale, "leviathan", "gain_points", "mean_gain_points")
    for scale in paper.scales("frequency"):
        for key, (bucket, col) in FREQUENCY_PAPER_NUMBERS.items():
            add("frequency", scale, bucket, col, key)
    for scale in paper.scales("cost"):
        for key, col in COST_PAPER_NUMBERS.items():
            add("cost", scale, "leviathan", col, key)
    for scale in paper.scales("sample_efficiency"):
        add("sample_efficiency", scale, "leviathan", "tokens_ratio", "tokens_ratio")
    return out
