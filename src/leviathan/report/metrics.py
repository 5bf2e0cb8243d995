"""The flat per-cell metrics of the study (DVC's `metrics:` file), a report table like the others.

One row per trained cell (scale/vocab/variant/seed<k>, seeds not averaged): validation loss,
perplexity and bits per byte, WikiText-103 and LAMBADA perplexity, mean downstream accuracy,
and the gains over the tied cell of the same scale, vocabulary and seed. Every number is a
`CellSpec` over the evaluation outputs, so `leviathan audit` traces it like any table's; the
JSON rendering (`metrics.json`, what `dvc metrics show` reads) is written from the CSV.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from leviathan.report.cellmap import CellSpec, DocumentCache
from leviathan.report.tables import (
    WIKITEXT_PPL,
    ReportInputs,
    Table,
    _acc,
    _accuracy_tasks,
    _lm_eval_tasks,
    _pair,
    _src,
)

NAME = "metrics"
LOSS = "/results/overall/loss"
LAMBADA_PPL = "/results/tasks/lambada_openai/metrics/perplexity,none"


def metrics_table(inp: ReportInputs, docs: DocumentCache) -> Table:
    tasks = _lm_eval_tasks(inp, docs)
    wikitext = "wikitext" in inp.evals
    lambada = "perplexity,none" in tasks.get("lambada_openai", {})
    averaged = _accuracy_tasks(inp, docs)[2] if tasks else []
    cols = {"val_loss": "loss", "val_ppl": "ppl", "val_bpb": "loss"}
    cols |= {"wikitext_ppl": "ppl"} if wikitext else {}
    cols |= {"lambada_ppl": "ppl"} if lambada else {}
    cols |= {"downstream_mean_acc": "points"} if averaged else {}
    cols |= {"val_loss_gain": "pct", "val_ppl_change": "pct"}
    cols |= {"wikitext_ppl_gain": "pct"} if wikitext else {}
    cols |= {"lambada_ppl_gain": "pct"} if lambada else {}
    cols |= {"downstream_gain_points": "dpoints"} if averaged else {}
    t = Table(
        NAME,
        "Per-cell metrics (DVC metrics): evaluation results and gains over the tied cell of the same "
        "scale, vocabulary and seed",
        ["scale", "vocab", "variant", "seed"],
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
            )
            t.set(row, "val_loss", CellSpec("mean", _src(one, "val", LOSS)))
            t.set(row, "val_ppl", CellSpec("exp", _src(one, "val", LOSS)))
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
            t.set(row, "val_ppl_change", _pair("exp_change", [tied], one, "val", LOSS))
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


def metrics_json(table: Table, frame: pd.DataFrame) -> str:
    """{cell: {metric: value}} of the table's CSV frame (empty cells left out: JSON has no NaN)."""
    doc: dict[str, dict[str, Any]] = {}
    columns = [
        c for c in frame.columns if c in table.columns
    ]  # the CSV's order (manifests sort keys)
    for record in frame.to_dict("records"):
        values = {c: float(record[c]) for c in columns if not _missing(record[c])}
        doc[str(record["row"])] = values
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
