"""Plot data for `dvc plots show` (long CSVs, one row per point, a `cell` column to colour by):

    loss_curves.csv   periodic in-training validation loss (the trainer's evaluation on a fixed
                      subset of windows, not the evaluation's val_loss) vs training tokens of
                      every cell (its metrics.jsonl)
    frequency.csv     mean validation loss per training-frequency bucket of every cell (val.json)

Each file has a manifest naming the files its rows were read from; the seaborn figures
(leviathan.report.figures) stay as they are. dvc.yaml's `plots:` declares x and y and the
Vega-Lite templates in .dvc/plots/.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from leviathan import layout
from leviathan.cells import Cell
from leviathan.eval.sample_efficiency import metrics_path, read_curve
from leviathan.io import atomic_path, read_json
from leviathan.manifest import input_record, write_manifest

PLOT_NAMES = ("loss_curves", "frequency")
# the in-training evaluation's loss, named apart from the evaluation's `val_loss` everywhere
PERIODIC_LOSS = "periodic_val_loss"


def plot_paths(out_dir: str | os.PathLike[str]) -> dict[str, Path]:
    return {name: layout.plot_file(out_dir, name) for name in PLOT_NAMES}


def loss_curves(cells: Iterable[Cell]) -> pd.DataFrame:
    rows = []
    for cell in cells:
        curve = read_curve(layout.run_dir(cell))
        rows += [
            {"cell": cell.key, "tokens": t, PERIODIC_LOSS: loss}
            for t, loss in zip(curve.tokens, curve.losses, strict=True)
        ]
    return pd.DataFrame(rows, columns=["cell", "tokens", PERIODIC_LOSS])


def frequency(cells: Iterable[Cell]) -> pd.DataFrame:
    """Token-level log10 buckets; empty buckets (no target in the val split) left out."""
    rows = []
    for cell in cells:
        buckets = read_json(layout.eval_output(cell, "val"))["results"]["frequency_tokens"]["log10"]
        rows += [
            {
                "cell": cell.key,
                "bucket_index": i,
                "bucket": b["label"],
                "tokens": b["n"],
                "mean_loss": b["mean_loss"],
            }
            for i, b in enumerate(buckets)
            if b["n"] and b.get("mean_loss") is not None
        ]
    return pd.DataFrame(rows, columns=["cell", "bucket_index", "bucket", "tokens", "mean_loss"])


def write_plot_data(cells: Iterable[Cell], out_dir: str | os.PathLike[str]) -> list[Path]:
    cells = sorted(cells)
    paths = plot_paths(out_dir)
    sources = {
        "loss_curves": (loss_curves(cells), [metrics_path(layout.run_dir(c)) for c in cells]),
        "frequency": (frequency(cells), [Path(layout.eval_output(c, "val")) for c in cells]),
    }
    for name, (frame, inputs) in sources.items():
        with atomic_path(paths[name]) as tmp:
            frame.to_csv(tmp, index=False, float_format="%.17g")
        write_manifest(
            paths[name],
            artifact_type="plot_data",
            inputs=[input_record(p) for p in inputs],
            fields={"plot": name},
        )
    return list(paths.values())
