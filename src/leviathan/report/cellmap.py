"""Where every number of a report table comes from: the cell map.

A table's value (a `ValueSpec`, one per table cell: row and column) is declared, never typed
in: an operation (`op`) applied to values read from files (`sources`, each a path and a JSON
pointer into it, in group "a" or "b"). The same `compute` builds the table and, later,
re-checks it (`leviathan audit`), so a number can be traced to the exact field of the exact
file it was computed from.

Groups: "a" is the reference (tied, or the paper), "b" the value compared with it. Several
sources in one group (seeds, tasks) are averaged. A missing field is an error (KeyError);
a null field, or a value without sources, is NaN.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from leviathan.io import read_json
from leviathan.model.config import ModelConfig
from leviathan.report.predicted import PREDICTED, predicted
from leviathan.train.metrics_log import read_metrics


@dataclass(frozen=True)
class Source:
    path: str
    pointer: str  # RFC 6901 JSON pointer, e.g. /results/overall/loss
    group: str = "a"

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "pointer": self.pointer, "group": self.group}

    @classmethod
    def from_dict(cls, d: Mapping[str, str]) -> Source:
        return cls(d["path"], d["pointer"], d.get("group", "a"))


@dataclass(frozen=True)
class ValueSpec:
    """One table value, declared: `op` over `sources`, or (op "diff_of") the difference of two
    other values, parts[1] - parts[0] (op "ratio_of": parts[1] / parts[0])."""

    op: str
    sources: tuple[Source, ...] = field(default_factory=tuple)
    parts: tuple[ValueSpec, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op, "sources": [s.to_dict() for s in self.sources]}
        if self.parts:
            d["parts"] = [p.to_dict() for p in self.parts]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ValueSpec:
        return cls(
            d["op"],
            tuple(Source.from_dict(s) for s in d.get("sources", [])),
            tuple(ValueSpec.from_dict(p) for p in d.get("parts", [])),
        )

    def leaves(self) -> list[Source]:
        """Every file field this value reads, nested parts included."""
        out = list(self.sources)
        for p in self.parts:
            out.extend(p.leaves())
        return out


def resolve_pointer(doc: Any, pointer: str) -> Any:
    """The value at a JSON pointer (`/a/0/b`); KeyError naming the missing step."""
    if pointer in ("", "/"):
        return doc
    node = doc
    for raw in pointer.lstrip("/").split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list):
            node = node[int(part)]
        elif isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            raise KeyError(f"{pointer}: no {part!r}")
    return node


class DocumentCache:
    """Parsed JSON/YAML documents by path, read once per report or audit."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        check: Callable[[Path, Any], None] | None = None,
    ) -> None:
        """`check(path, doc)`: run on each document as it is first read (it raises to refuse
        one: the report's `leviathan.anchor.check_report_input`)."""
        self.root = Path(root) if root is not None else None
        self.check = check
        self._docs: dict[str, Any] = {}

    def path(self, path: str | os.PathLike[str]) -> Path:
        p = Path(path)
        return p if p.is_absolute() or self.root is None else self.root / p

    def get(self, path: str) -> Any:
        if path not in self._docs:
            p = self.path(path)
            if p.suffix == ".jsonl":  # a run's metrics log: its records, in order
                doc: Any = read_metrics(p)
            else:
                doc = (
                    yaml.safe_load(p.read_text()) if p.suffix in (".yaml", ".yml") else read_json(p)
                )
            if self.check is not None:
                self.check(p, doc)
            self._docs[path] = doc
        return self._docs[path]

    def value(self, source: Source) -> Any:
        return resolve_pointer(self.get(source.path), source.pointer)


def _mean(values: Sequence[float]) -> float:
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals and len(vals) == len(values) else math.nan


def _accounting(model_config: Mapping[str, Any]) -> Any:
    # imported here: the counter imports torch, and the workflow's parse imports this module
    from leviathan.model.accounting import account

    return account(ModelConfig.from_dict(dict(model_config)).validate())


def _of_means(fn: Callable[[float, float], float]) -> Callable[[list[Any], list[Any]], float]:
    """A paired op applied to the mean of each group (NaN where either mean is not finite)."""

    def op(a: list[Any], b: list[Any]) -> float:
        x, y = _mean(a), _mean(b)
        return fn(x, y) if math.isfinite(x) and math.isfinite(y) else math.nan

    return op


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _params(configs: list[Any]) -> float:
    counts = {_accounting(c).total_params for c in configs}
    return float(counts.pop()) if len(counts) == 1 else math.nan


def _flops(configs: list[Any]) -> float:
    counts = {_accounting(c).forward_flops for c in configs}  # forward FLOPs per token
    return float(counts.pop()) if len(counts) == 1 else math.nan


def _predicted(what: str) -> Callable[[list[Any], list[Any]], float]:
    """The roofline's prediction of `what` for a run (leviathan.report.predicted)."""

    def op(a: list[Any], b: list[Any]) -> float:
        return predicted(what, a, b)

    return op


# Ops on one group (a value per seed, averaged) and on paired groups (a: reference, b: compared).
SINGLE: dict[str, Callable[[float], float]] = {
    "mean": lambda v: v,  # a reported value (mean over seeds)
    "pct": lambda v: 100.0 * v,  # a fraction shown in percent (accuracy)
    "exp": _exp,  # perplexity of a mean loss
    "neg": lambda v: -v,  # a reported change (negative = better) as a gain (positive = better)
}
PAIRED: dict[str, Callable[[float, float], float]] = {
    "gain": lambda x, y: (x - y) / x,  # relative improvement of b over a (lower is better)
    "diff": lambda x, y: y - x,
    "reduction": lambda x, y: x - y,  # how much lower b is than a (loss gain, nats)
    "diff_pct": lambda x, y: 100.0 * (y - x),  # accuracy gain, points
    "exp_gain": lambda x, y: (_exp(x) - _exp(y)) / _exp(x),  # perplexity gain from losses
}
CI_SUFFIX = "_ci95"


def t_half_width(values: Sequence[float], level: float = 0.95) -> float:
    """Half-width of the Student-t confidence interval of the mean of `values` (NaN if n < 2)."""
    # imported here: scipy is slow to import, and the workflow's parse imports this module
    from scipy.stats import t

    vals = [float(v) for v in values]
    n = len(vals)
    if n < 2 or not all(math.isfinite(v) for v in vals):
        return math.nan
    return float(t.ppf(0.5 + level / 2, n - 1)) * statistics.stdev(vals) / math.sqrt(n)


def _single_ci(fn: Callable[[float], float]) -> Callable[[list[Any], list[Any]], float]:
    return lambda a, b: t_half_width([fn(float(v)) for v in a]) if None not in a else math.nan


def _paired_ci(fn: Callable[[float, float], float]) -> Callable[[list[Any], list[Any]], float]:
    """The CI of the per-seed values fn(a_i, b_i): pairs share a seed (same data order)."""

    def op(a: list[Any], b: list[Any]) -> float:
        if len(a) != len(b) or None in a or None in b:
            return math.nan
        return t_half_width([fn(float(x), float(y)) for x, y in zip(a, b, strict=True)])

    return op


# op name -> function of (group a values, group b values)
OPS: dict[str, Callable[[list[Any], list[Any]], float]] = {
    **{name: (lambda f: lambda a, b: f(_mean(a)))(fn) for name, fn in SINGLE.items()},
    **{name: _of_means(fn) for name, fn in PAIRED.items()},
    **{name + CI_SUFFIX: _single_ci(fn) for name, fn in SINGLE.items()},  # 95% CI over seeds
    **{name + CI_SUFFIX: _paired_ci(fn) for name, fn in PAIRED.items()},  # paired 95% CI
    "params": lambda a, b: _params(a),  # the model counter on the recorded model config
    "flops": lambda a, b: _flops(a),
    "params_overhead": lambda a, b: _params(b) / _params(a) - 1.0,
    "flops_overhead": lambda a, b: _flops(b) / _flops(a) - 1.0,
    # a run's pace and memory from its metrics log's records (leviathan.report.throughput)
    "median": lambda a, b: statistics.median(map(float, a)),
    "max": lambda a, b: max(map(float, a)),
    "sum": lambda a, b: math.fsum(map(float, a)),
    **{f"predicted_{w}": _predicted(w) for w in PREDICTED},
}


def compute(spec: ValueSpec, docs: DocumentCache) -> float:
    """A declared value computed from its sources (NaN where a source is null or there are none)."""
    if spec.op in ("diff_of", "ratio_of"):
        if len(spec.parts) != 2:
            raise ValueError(f"op {spec.op} takes exactly two parts")
        x, y = compute(spec.parts[0], docs), compute(spec.parts[1], docs)
        return y - x if spec.op == "diff_of" else (y / x if x else math.nan)
    if spec.op not in OPS:
        raise ValueError(f"unknown cell op {spec.op!r} (known: {', '.join(OPS)})")
    groups: dict[str, list[Any]] = {"a": [], "b": []}
    for s in spec.sources:
        groups[s.group].append(docs.value(s))
    if not groups["a"]:
        return math.nan
    value = OPS[spec.op](groups["a"], groups["b"])
    return float(value)


def value_stand_ins(spec: ValueSpec, docs: DocumentCache) -> list[str]:
    """The offline stand-in data files behind a value (the `stand_in_data` of the evaluation
    outputs it reads; see leviathan.eval.standin)."""
    found: set[str] = set()
    for s in spec.leaves():
        doc = docs.get(s.path)
        if isinstance(doc, Mapping):
            found.update(doc.get("stand_in_data") or [])
    return sorted(found)


def same_number(recorded: float, recomputed: float, rel: float = 1e-9) -> bool:
    if math.isnan(recorded) or math.isnan(recomputed):
        return math.isnan(recorded) and math.isnan(recomputed)
    return math.isclose(recorded, recomputed, rel_tol=rel, abs_tol=1e-12)
