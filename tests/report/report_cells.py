"""The files of trained and evaluated cells, written here for the report's tests (tables, smoke
labels, status, the recon study): each cell's val evaluation, final checkpoint state and metrics
log, and the sample-efficiency evaluation of a pair of cells."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from leviathan import layout
from leviathan.cells import Cell
from leviathan.eval.results import write_result
from leviathan.eval.sample_efficiency import sample_efficiency
from leviathan.io import write_json
from leviathan.model import model_config
from leviathan.train.config import train_config

LOSS = {"tied": 3.10, "leviathan": 3.00}
VAL_TARGETS = {"tied": 65_536 * 512, "leviathan": 65_536 * 512 - 7}  # the sample each rests on
BUCKETS = [{"label": "1-9", "n": 10}, {"label": "10-99", "n": 0}]
WORD_BUCKETS = [{"label": "0", "n": 4}]
TOKENS = 4_200_000_000  # the paper's 200M budget: a full run
# periodic in-training validation losses at 1/3, 2/3 and all of TOKENS
CURVES = {"tied": [3.5, 3.2, 3.1], "leviathan": [3.4, 3.05, 3.0]}


CORPUS = {"name": "embedded"}  # the report's configs' corpus: their cells' results key
RESULTS = "embedded"


def health_record(step: int, shift: float = 0.0, n_heads: int = 2) -> dict[str, Any]:
    """A `lev_health` record (leviathan.model.lev_health's keys) whose values follow the step
    (and `shift`, so that cells differ)."""
    return {
        "kind": "lev_health",
        "step": step,
        "ids": 256,
        "near_ends": [0.01 * step + 0.1 * h for h in range(n_heads)],
        "log_std_M": [-1.0 + 0.1 * step - 0.2 * h for h in range(n_heads)],
        "rms_head": [0.05 * (step + 1) * (h + 1) for h in range(n_heads)],
        "emb_rms": 0.1 * (step + 1),
        "head_row_rms": 0.02,
        "emb_vs_head_rms": 5.0 * (step + 1) + shift,
        "mean_cosine": 0.9 - 0.1 * step - 0.01 * shift,
    }


def write_cell(
    cell: Cell,
    tokens: int = TOKENS,
    words: bool = True,
    loss: float | None = None,
    base: str | None = None,
    lev: dict[str, Any] | None = None,
) -> None:
    """A trained and evaluated cell's files: its val evaluation, final checkpoint state and
    metrics log (train, val and, for a cell with LEV, lev_health records at init and each
    validation). A named variant: `base` its built-in variant, `lev` its LEV overrides."""
    base = base or cell.variant
    loss = LOSS[base] if loss is None else loss
    targets = VAL_TARGETS[base]
    overall = {"loss": loss, "bits_per_byte": loss / 4, "targets": targets}
    results = {
        "overall": {**overall, "total_nats": loss * targets},
        "frequency_tokens": {"log10": [{**b, "mean_loss": loss + 1.0} for b in BUCKETS]},
    }
    if words:
        results["frequency_words"] = {
            "log10": [{**b, "mean_loss": loss + 2.0} for b in WORD_BUCKETS]
        }
    identity = {"scale": cell.scale, "vocab": cell.vocab, "variant": base, "seed": cell.seed}
    write_result(  # with its manifest, as the evaluation writes it
        f"{layout.eval_dir(cell)}/val.json",
        {
            "kind": "val",
            "checkpoint": {"tokens": tokens, **identity, "cell_variant": cell.variant},
            "results": results,
        },
    )
    named = {"variant_name": cell.variant} if base != cell.variant else {}
    overrides = {"model_overrides": {"lev": lev}} if lev else {}
    cfg = model_config(cell.scale, cell.vocab, base, overrides={"lev": dict(lev or {})})
    recipe = train_config(
        cell.scale, cell.vocab, base, seed=cell.seed, **named, **overrides
    ).to_dict()
    write_json(
        layout.final_marker(cell),
        {"model_config": cfg.to_dict(), "train_config": recipe, "tokens": tokens},
    )
    start = {"kind": "start", "step": 0, "train_config": {"variant": base}}
    curve = [v + (loss - LOSS[base]) for v in CURVES[base]]
    val = [
        {"kind": "val", "step": i + 1, "tokens": tokens * (i + 1) // 3, "val_loss": v}
        for i, v in enumerate(curve)
    ]
    train = [
        {
            "kind": "train",
            "step": i + 1,
            "tokens": tokens * (i + 1) // 3,
            "loss": v + 0.1,
            "lr": 1e-3 * (i + 1),
            "grad_norm": 2.0 / (i + 1),
        }
        for i, v in enumerate(curve)
    ]
    health = [health_record(r["step"], loss) for r in [start, *val]] if base == "leviathan" else []
    Path(layout.run_dir(cell), "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in [start, *train, *val, *health])
    )


def write_sample_efficiency(scale: str, vocab: str, seed: int = 0) -> None:
    """The sample-efficiency evaluation of the cells' curves (its own code)."""
    tied, lev = (
        layout.run_dir(Cell(scale, vocab, v, seed, RESULTS)) for v in ("tied", "leviathan")
    )
    write_result(
        layout.sample_efficiency_path(RESULTS, scale, vocab, seed), sample_efficiency(tied, [lev])
    )
