"""What an evaluation output says of itself, re-derived by the audit.

An output whose numbers were edited together with its manifest still has to agree with itself
and with what it was computed from:

  val                 loss = total_nats / targets, perplexity = exp(loss), bits per token and
                      per byte from the same sums; each frequency bucketing's n and loss sums
                      add up to its whole, and that whole to the overall figures (token buckets:
                      the targets; word buckets: the words)
  sample_efficiency   every number recomputed from the metrics logs it names (whose own
                      anchors the audit checks: leviathan.train.log_anchor)

Each function returns the problems found (empty: none), worded for the audit's findings.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from leviathan.eval.sample_efficiency import curve_from_log, results_of

LN2 = math.log(2.0)
EXACT = 1e-12  # one float operation apart at most
SUMMED = 1e-9  # sums of the same floats in another order


def _close(a: Any, b: Any, rel: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=rel)


def _exp(x: float | None) -> float | None:
    try:
        return None if x is None else math.exp(x)
    except OverflowError:
        return None


def _check(problems: list[str], what: str, says: Any, derived: Any, rel: float) -> None:
    if not _close(says, derived, rel):
        problems.append(f"{what} is {says}, but its own sums give {derived}")


def overall_problems(o: Mapping[str, Any]) -> list[str]:
    """The overall figures of a val output against its sums (total_nats, targets, bytes)."""
    missing = [k for k in ("loss", "targets", "total_nats") if k not in o]
    if missing:
        return [f"overall lacks {', '.join(missing)}, which every val output records"]
    problems: list[str] = []
    targets, nats, n_bytes = o.get("targets") or 0, o.get("total_nats"), o.get("bytes")
    loss = nats / targets if targets and nats is not None else None
    _check(problems, "overall.loss", o.get("loss"), loss, EXACT)
    if "perplexity" in o:
        _check(problems, "overall.perplexity", o["perplexity"], _exp(o.get("loss")), EXACT)
    if "bits_per_token" in o:
        per_token = None if o.get("loss") is None else o["loss"] / LN2
        _check(problems, "overall.bits_per_token", o["bits_per_token"], per_token, EXACT)
    if "bits_per_byte" in o and "bytes" in o:
        per_byte = nats / LN2 / n_bytes if n_bytes and nats is not None else None
        _check(problems, "overall.bits_per_byte", o["bits_per_byte"], per_byte, EXACT)
    return problems


def buckets_problems(key: str, block: Mapping[str, Any], n: Any, loss: Any) -> list[str]:
    """A frequency bucketing (`key`): its buckets against its whole, its whole against the
    output's (`n` occurrences of mean loss `loss`)."""
    problems: list[str] = []
    _check(problems, f"{key}.n", block.get("n"), n, EXACT)
    _check(problems, f"{key}.mean_loss", block.get("mean_loss"), loss, SUMMED)
    _check(
        problems, f"{key}.perplexity", block.get("perplexity"), _exp(block.get("mean_loss")), EXACT
    )
    total_n, total_loss = (
        block.get("n") or 0,
        (block.get("mean_loss") or 0.0) * (block.get("n") or 0),
    )
    for bins in ("log10", "quantile"):
        rows = block.get(bins)
        if not isinstance(rows, list):
            continue
        _check(problems, f"{key}.{bins}: the buckets' n", sum(r["n"] for r in rows), total_n, EXACT)
        summed = sum(r.get("loss_sum", 0.0) for r in rows)
        _check(problems, f"{key}.{bins}: the buckets' loss_sum", summed, total_loss, SUMMED)
        for r in rows:
            where = f"{key}.{bins}[{r.get('label')}]"
            mean = r["loss_sum"] / r["n"] if r.get("n") else None
            _check(problems, f"{where}.mean_loss", r.get("mean_loss"), mean, SUMMED)
            _check(
                problems,
                f"{where}.perplexity",
                r.get("perplexity"),
                _exp(r.get("mean_loss")),
                EXACT,
            )
    return problems


def val_problems(doc: Mapping[str, Any]) -> list[str]:
    """A val output against itself (see the module docstring)."""
    results = doc.get("results") or {}
    overall = results.get("overall") or {}
    problems = overall_problems(overall)
    if "frequency_tokens" in results:
        problems += buckets_problems(
            "frequency_tokens",
            results["frequency_tokens"],
            overall.get("targets"),
            overall.get("loss"),
        )
    if "frequency_words" in results:
        words = results.get("words") or {}
        problems += buckets_problems(
            "frequency_words",
            results["frequency_words"],
            words.get("words"),
            words.get("mean_word_loss"),
        )
    return problems


def differences(expected: Any, actual: Any, where: str = "results") -> list[str]:
    """Where two JSON values differ in a number, a flag or their shape (strings, such as paths,
    are not compared)."""
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        return [
            d for k in expected for d in differences(expected[k], actual.get(k), f"{where}.{k}")
        ]
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where} has {len(actual)} entries, its sources give {len(expected)}"]
        return [
            d
            for i, (e, a) in enumerate(zip(expected, actual, strict=True))
            for d in differences(e, a, f"{where}[{i}]")
        ]
    if isinstance(expected, str):
        return []
    same = (
        expected == actual
        if expected is None or isinstance(expected, bool)
        else _close(expected, actual, EXACT)
    )
    return [] if same else [f"{where} is {actual}, its sources give {expected}"]


def sample_efficiency_problems(doc: Mapping[str, Any], resolve: Callable[[str], Path]) -> list[str]:
    """A sample-efficiency output against its results recomputed from the logs it names
    (`resolve`: a recorded path as the audit finds it)."""
    logs = [resolve(str(i["path"])) for i in doc.get("inputs", [])]
    if not logs or not all(p.is_file() for p in logs):
        return []  # a missing log is the hash check's failure, named there
    curves = [curve_from_log(p) for p in logs]
    return differences(results_of(curves[0], curves[1:]), doc.get("results") or {})


def claims_problems(doc: Mapping[str, Any], resolve: Callable[[str], Path]) -> list[str]:
    """What an evaluation output says of itself that does not hold (kinds not listed in the
    module docstring: nothing re-derived)."""
    if doc.get("kind") == "val":
        return val_problems(doc)
    if doc.get("kind") == "sample_efficiency":
        return sample_efficiency_problems(doc, resolve)
    return []
