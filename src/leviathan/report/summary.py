"""One row per evaluated cell: the headline numbers of every evaluation JSON, as CSV and Markdown.

Read from the eval results' own records (never recomputed, never typed in): val loss,
perplexity and bits per byte; WikiText-103 token perplexity; lm-eval mean accuracy.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from leviathan.eval.results import read_result
from leviathan.io import atomic_path

COLUMNS = ["scale", "vocab", "variant", "seed", "step", "tokens", "val_loss", "val_ppl", "val_bpb",
           "wikitext_ppl", "lm_eval_mean_acc", "checkpoint_sha256"]  # fmt: skip


def _cell(result: dict[str, Any]) -> dict[str, Any]:
    c = result["checkpoint"]
    return {k: c[k] for k in ("scale", "vocab", "variant", "seed", "step", "tokens")} | {
        "checkpoint_sha256": c["sha256"]
    }


def summary_table(paths: Iterable[str | os.PathLike[str]]) -> pd.DataFrame:
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for path in paths:
        result = read_result(path)
        cell = _cell(result)
        row = rows.setdefault((cell["scale"], cell["vocab"], cell["variant"], cell["seed"]), dict(cell))
        if row["checkpoint_sha256"] != cell["checkpoint_sha256"]:
            raise ValueError(f"{path}: evaluates a different checkpoint than the other results of its cell")
        r = result["results"]
        if result["kind"] == "val":
            overall = r["overall"]
            row.update(val_loss=overall["loss"], val_ppl=overall["perplexity"], val_bpb=overall["bits_per_byte"])
        elif result["kind"] == "wikitext":
            row["wikitext_ppl"] = r["token_perplexity"]
        elif result["kind"] == "lm_eval":
            row["lm_eval_mean_acc"] = r["mean_acc"]
    frame = pd.DataFrame(list(rows.values()), columns=COLUMNS)
    return frame.sort_values(["scale", "vocab", "variant", "seed"]).reset_index(drop=True)


def write_summary(frame: pd.DataFrame, csv: str | os.PathLike[str], markdown: str | os.PathLike[str]) -> None:
    with atomic_path(csv) as tmp:
        frame.to_csv(tmp, index=False)
    with atomic_path(markdown) as tmp:
        Path(tmp).write_text(frame.drop(columns=["checkpoint_sha256"]).to_markdown(index=False, floatfmt=".4f") + "\n")
