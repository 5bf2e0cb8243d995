"""The `along` figure: each training-frequency bucket's evaluation loss, and leviathan's gain over
tied, against training tokens, from the evaluations of the kept checkpoints (leviathan.eval.along;
config.evaluate.along). One column per (scale, vocab, seed); per frequency level (token, word) a
row of bucket losses (tied dashed, leviathan solid) and a row of gains (tied - leviathan, nats;
positive = better), the overall loss's in black. A study without these evaluations gets no
figure (layout.report_figures), not an empty one."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import seaborn as sns

from leviathan.eval.results import FREQUENCY_KEYS
from leviathan.io import read_json
from leviathan.layout import along_group
from leviathan.report import drawing
from leviathan.report.evidence import SmokePolicy, caption

LEVELS = dict(zip(FREQUENCY_KEYS, ("token", "word"), strict=True))


def _compared(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The run drawn against tied: leviathan's where the group has it, else the first."""
    runs = doc["results"]["runs"]
    return next((r for r in runs if r["variant"] == "leviathan"), runs[0] if runs else None)


def _series(points: list[dict[str, Any]], key: str) -> dict[str, dict[int, float]]:
    """{bucket label: {tokens: mean loss}} of non-empty buckets, plus `all` (the overall loss)."""
    out: dict[str, dict[int, float]] = {"all": {p["tokens"]: p["val_loss"] for p in points}}
    for p in points:
        for b in p.get(key, []):
            if b["n"] and b["mean_loss"] is not None:
                out.setdefault(b["label"], {})[p["tokens"]] = b["mean_loss"]
    return out


def _panel_pair(
    top: Any, bottom: Any, base: dict[str, Any], run: dict[str, Any], key: str, level: str
) -> None:
    tied, lev = _series(base["points"], key), _series(run["points"], key)
    labels = [b for b in tied if b != "all"]
    colours = dict(zip(labels, sns.color_palette("viridis", max(1, len(labels))), strict=False))
    colours["all"] = "black"
    for label in ["all", *labels]:
        colour = colours[label]
        for series, style in ((tied, "--"), (lev, "-")):
            if label not in series:
                continue
            xs = sorted(series[label])
            top.plot(xs, [series[label][x] for x in xs], style, color=colour, lw=1.2, marker=".")
        shared = sorted(set(tied.get(label, {})) & set(lev.get(label, {})))
        if shared:
            gains = [tied[label][x] - lev[label][x] for x in shared]
            bottom.plot(shared, gains, "-", color=colour, lw=1.2, marker=".", label=label)
    first = min((x for s in tied.values() for x in s if x > 0), default=1)
    for ax in (top, bottom):
        ax.set_xscale("symlog", linthresh=first)
        ax.set_xlabel("training tokens")
    bottom.axhline(0, color="black", lw=0.8)
    top.set_ylabel(f"{level}-bucket val loss (nats;\ntied --, {run['variant']} -)")
    bottom.set_ylabel(f"{run['variant']} gain over tied\n(nats, + = better)")
    bottom.legend(fontsize=6, title=f"{level} training count", title_fontsize=6, ncol=2)


def along_figure(
    along: Sequence[Path], out_dir: str | os.PathLike[str], policy: SmokePolicy
) -> list[Path]:
    if not along:
        return []
    docs = [(p, read_json(p)) for p in sorted(along)]
    docs = [(p, d, run) for p, d in docs if (run := _compared(d)) is not None]
    levels = [
        k
        for k in FREQUENCY_KEYS
        if any(k in d["results"]["baseline"]["points"][0] for _, d, _ in docs)
    ]
    rows = 2 * max(1, len(levels))
    cols = max(1, len(docs))
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 3.2 * rows), squeeze=False)
    if not docs:
        raise ValueError(f"{sorted(map(str, along))}: no run beside tied to draw along training")
    smoke = False
    for i, (path, doc, run) in enumerate(docs):
        base = doc["results"]["baseline"]
        scale, vocab, seed = along_group(path)
        tokens = [base["tokens"], run["final_tokens"]]
        smoke = smoke or policy.is_smoke(tokens)
        seeds = [int(seed.removeprefix("seed"))]
        for k, key in enumerate(levels):
            top, bottom = axes[2 * k][i], axes[2 * k + 1][i]
            _panel_pair(top, bottom, base, run, key, LEVELS[key])
            top.set_title(f"{vocab}: {caption(scale, tokens, seeds, policy)}", fontsize=9)
    drawing.figure_title(
        fig,
        "Along training: the evaluation's loss per training-frequency bucket (kept checkpoints)",
        smoke,
        policy,
    )
    return drawing.save_figure(fig, out_dir, "along", list(along))
