"""Evaluation along training: one cell's `val` evaluations of its kept checkpoints (and its final
one) as a curve against training tokens, compared with the tied baseline's of the same scale,
vocabulary and seed (docs/method.md, the frequency-bucket and sample-efficiency claims).

Each point is an evaluation output (`val`, leviathan.eval.val): the checkpoint's step and
training tokens, the evaluation's loss on the configured sample (not the trainer's periodic
subset), and the mean loss of every token- and word-frequency bucket. The comparison is that of
leviathan.eval.sample_efficiency on these curves: the target is tied's last evaluated loss;
`tokens_to_target` the first evaluated checkpoint at or below it; `tokens_interpolated` linear
interpolation in training tokens between that checkpoint and the one before (log-spaced
checkpoints make it coarse early on: the bracketing points are stated in `bracket`).
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from leviathan.eval.errors import EvalInputError
from leviathan.eval.results import FREQUENCY_KEYS, envelope, read_result
from leviathan.eval.sample_efficiency import Curve, compare
from leviathan.io import sha256_file
from leviathan.provenance import utc_now

INTERPOLATION = (
    "tokens_interpolated: linear in training tokens between the last evaluated checkpoint above "
    "the target and the first at or below it (bracket); tokens_to_target: that first checkpoint"
)


def read_point(path: str | os.PathLike[str]) -> dict[str, Any]:
    """One evaluated checkpoint: step, tokens, loss, buckets (label, targets, mean loss); an
    output not as its evaluation wrote it, or of another cell, is refused (`read_result`)."""
    doc = read_result(path)
    if doc.get("kind") != "val" or not doc.get("checkpoint"):
        raise EvalInputError(f"{path}: not a val evaluation of a checkpoint")
    ck, results = doc["checkpoint"], doc["results"]
    return {
        "path": str(path),
        "step": int(ck["step"]),
        "tokens": int(ck["tokens"]),
        "val_loss": float(results["overall"]["loss"]),
        "checkpoint": ck["path"],
        **{
            key: [
                {"label": b["label"], "n": b["n"], "mean_loss": b.get("mean_loss")}
                for b in results[key].get("log10", [])
            ]
            for key in FREQUENCY_KEYS
            if key in results
        },
        "_ck": ck,
    }


def read_cell(paths: Sequence[str | os.PathLike[str]]) -> tuple[Curve, list[dict[str, Any]]]:
    """A cell's points by step (one evaluation per step) and its curve."""
    if not paths:
        raise EvalInputError("a curve along training needs at least one evaluation")
    points = sorted((read_point(p) for p in paths), key=lambda p: p["step"])
    steps = [p["step"] for p in points]
    if len(set(steps)) != len(steps):
        raise EvalInputError(f"two evaluations of one step among {[str(p) for p in paths]}")
    ck = points[-1]["_ck"]
    config = {
        "scale": ck.get("scale"),
        "vocab": ck.get("vocab"),
        "context": ck.get("context"),
        "variant": ck.get("variant"),
        "variant_name": ck.get("cell_variant"),
    }
    for p in points:
        if p.pop("_ck")["train_fingerprint"] != ck["train_fingerprint"]:
            raise EvalInputError(f"{p['path']}: a checkpoint of another run than {paths[-1]}")
    curve = Curve(
        Path(paths[-1]).parent,
        tuple(p["tokens"] for p in points),
        tuple(p["val_loss"] for p in points),
        config,
    )
    return curve, points


def _bracket(curve: Curve, first: int | None) -> list[int] | None:
    if first is None:
        return None
    i = curve.tokens.index(first)
    return [curve.tokens[max(i - 1, 0)], first]


def along_training(
    runs: Sequence[Sequence[str | os.PathLike[str]]], started: _dt.datetime | None = None
) -> dict[str, Any]:
    """The `along` output of a group of cells' evaluations along training, tied's first."""
    started = started or utc_now()
    t0 = time.perf_counter()
    if len(runs) < 2:
        raise EvalInputError("name the tied baseline's evaluations and at least one other cell's")
    cells = [read_cell(paths) for paths in runs]
    (base, base_points), others = cells[0], cells[1:]
    for curve, _ in others:
        for key in ("scale", "vocab", "context"):
            if curve.train_config[key] != base.train_config[key]:
                raise EvalInputError(
                    f"{curve.run} ({key}={curve.train_config[key]!r}) is not comparable with "
                    f"the baseline {base.run} ({key}={base.train_config[key]!r})"
                )
    compared = []
    for curve, points in others:
        row = compare(base, curve)
        del row["curve"]  # the points below hold it, with their buckets
        compared.append(
            {**row, "bracket": _bracket(curve, row["tokens_to_target"]), "points": points}
        )
    results = {
        "interpolation": INTERPOLATION,
        "baseline": {
            "run": str(base.run),
            "variant": base.train_config["variant_name"],
            "target_val_loss": base.final_loss,
            "tokens": base.final_tokens,
            "points": base_points,
        },
        "runs": compared,
    }
    inputs = [
        {"role": "baseline" if i == 0 else "run", "path": str(p), "sha256": sha256_file(p)}
        for i, paths in enumerate(runs)
        for p in paths
    ]
    return envelope(
        "along",
        checkpoint=None,
        inputs=inputs,
        config={},
        results=results,
        seconds=time.perf_counter() - t0,
        started=started,
    )
