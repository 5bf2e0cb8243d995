"""The report's figures of LEV itself (seaborn/matplotlib, drawn as leviathan.report.figures draws
the others, each as PNG and PDF with a manifest naming its inputs):

    recon         does the result depend on the reconstruction? Per (scale, vocab) of the
                  `recon` table: each variant's val loss with its 95% CI over seeds, tied's and
                  default leviathan's as lines; and each variant's val loss minus default
                  leviathan's (paired by seed) with its CI
    lev_health    LEV's health statistics (docs/method.md §6, `kind: lev_health` in each run's
                  metrics.jsonl, at initialisation and each validation) against training
                  tokens: a row per (scale, vocab, seed), a line per cell with LEV (leviathan and
                  every named variant built on it); per-head statistics as the mean over the
                  heads with their range shaded
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from leviathan.cells import Cell
from leviathan.eval.sample_efficiency import metrics_path
from leviathan.layout import run_dir
from leviathan.report import drawing
from leviathan.report.evidence import SmokePolicy, caption
from leviathan.train.metrics_log import read_metrics

CI = "_ci95"


def _ci(frame: pd.DataFrame, column: str) -> list[float]:
    """A column's 95% CI half-widths, 0 where there is none (one seed)."""
    if column + CI not in frame:
        return [0.0] * len(frame)
    return [0.0 if pd.isna(v) else float(v) for v in frame[column + CI]]


def recon(csv: Path | None, out_dir: str | os.PathLike[str], policy: SmokePolicy) -> list[Path]:
    """The recon table drawn: a row of two panels per (scale, vocab)."""
    frame = pd.read_csv(csv, keep_default_na=False, na_values=[""]) if csv else pd.DataFrame()
    pairs = list(frame.groupby(["scale", "vocab"], sort=False)) if len(frame) else []
    fig, axes = plt.subplots(
        max(1, len(pairs)), 2, figsize=(12.0, 4.2 * max(1, len(pairs))), squeeze=False
    )
    if not pairs:
        drawing.empty_panel(axes[0][0], "no study named `recon` in this config (config/recon.yaml)")
        axes[0][1].set_axis_off()
    palette = drawing.variant_palette(frame["variant"]) if len(frame) else {}
    for (left, right), (_key, g) in zip(axes, pairs, strict=False):
        g = g.reset_index(drop=True)
        xs = list(range(len(g)))
        for x, (_, r), err in zip(xs, g.iterrows(), _ci(g, "val_loss"), strict=True):
            left.errorbar(
                [x], [r["val_loss"]], yerr=[err], fmt="o", capsize=4, color=palette[r["variant"]]
            )
        for ref, style in (("tied", ":"), ("leviathan", "--")):
            at = g[g["variant"] == ref]
            if len(at):
                left.axhline(at["val_loss"].iloc[0], ls=style, lw=1, color=palette[ref], label=ref)
        left.set_xticks(xs, g["variant"], rotation=20)
        left.set_ylabel("val loss (nats/token; 95% CI over seeds)")
        left.set_title(drawing.panel_evidence(g), fontsize=9)
        left.legend(fontsize=7)
        changed = g[g["diff_vs_leviathan"].notna()].reset_index(drop=True)
        for x, (_, r), err in zip(
            range(len(changed)), changed.iterrows(), _ci(changed, "diff_vs_leviathan"), strict=True
        ):
            right.errorbar(
                [x],
                [r["diff_vs_leviathan"]],
                yerr=[err],
                fmt="o",
                capsize=4,
                color=palette[r["variant"]],
            )
        right.axhline(0, color="black", lw=0.8)
        labels = [
            f"{r['variant']}\n{r['recipe']}" if isinstance(r["recipe"], str) else r["variant"]
            for _, r in changed.iterrows()
        ]
        right.set_xticks(range(len(changed)), labels, rotation=20, fontsize=8)
        right.set_ylabel("minus default leviathan's val loss (nats)")
        right.set_title("each choice against default leviathan, paired by seed", fontsize=9)
    drawing.figure_title(
        fig,
        "Does the result depend on the reconstruction? LEV's choices one at a time",
        drawing.any_smoke(frame),
        policy,
    )
    return drawing.save_figure(fig, out_dir, "recon", [csv] if csv else [])


HEALTH_PANELS = {
    "near_ends": "share of t within a knot spacing of 0 or 1",
    "log_std_M": "ln std of M_l",
    "rms_head": "RMS of W_out_l M_l",
    "emb_vs_head_rms": "RMS(E) / RMS(output head rows)",
    "mean_cosine": "mean pairwise cosine of E",
}


def health_records(path: Path) -> pd.DataFrame:
    """A run's `lev_health` records by step (a step recorded twice, after a resume: the last),
    with `tokens`: the step's training tokens as its train or val record gives them (0 at
    initialisation)."""
    records = read_metrics(path)
    health = {int(r["step"]): r for r in records if r.get("kind") == "lev_health"}
    tokens = {
        int(r["step"]): int(r["tokens"]) for r in records if r.get("kind") in ("train", "val")
    }
    tokens[0] = 0
    per_step = [t / s for s, t in tokens.items() if s > 0]
    rate = per_step[-1] if per_step else math.nan
    rows = [{**health[s], "tokens": tokens.get(s, s * rate)} for s in sorted(health)]
    return pd.DataFrame(rows)


def _trained_tokens(path: Path, health: pd.DataFrame) -> int:
    train = read_metrics(path, "train")
    return int(train[-1]["tokens"]) if train else int(health["tokens"].iloc[-1])


def lev_health(
    cells: Sequence[Cell], out_dir: str | os.PathLike[str], policy: SmokePolicy
) -> list[Path]:
    """Every cell with LEV (its metrics log has `lev_health` records) drawn: HEALTH_PANELS
    against training tokens, a row per (scale, vocab, seed)."""
    inputs: list[Path] = []
    groups: dict[tuple[str, str, int], list[tuple[Cell, pd.DataFrame, int]]] = {}
    for cell in sorted(cells):
        path = metrics_path(run_dir(cell))
        inputs.append(path)
        health = health_records(path)
        if len(health):
            key = (cell.scale, cell.vocab, cell.seed)
            groups.setdefault(key, []).append((cell, health, _trained_tokens(path, health)))
    rows = max(1, len(groups))
    fig, axes = plt.subplots(rows, len(HEALTH_PANELS), figsize=(20.0, 3.4 * rows), squeeze=False)
    if not groups:
        drawing.empty_panel(
            axes[0][0], "no cell with LEV (no lev_health records in the runs' metrics.jsonl)"
        )
        for ax in axes[0][1:]:
            ax.set_axis_off()
    palette = drawing.variant_palette(
        cell.variant for group in groups.values() for cell, _, _ in group
    )
    smoke = False
    for row, ((scale, vocab, seed), group) in zip(axes, groups.items(), strict=False):
        tokens = [t for _, _, t in group]
        smoke = smoke or policy.is_smoke(tokens)
        for ax, (key, label) in zip(row, HEALTH_PANELS.items(), strict=True):
            for cell, health, _ in group:
                _health_line(ax, health, key, palette[cell.variant], cell.variant)
            ax.set_title(f"{vocab}: {caption(scale, tokens, [seed], policy)}", fontsize=9)
            ax.set_xlabel("training tokens")
            ax.set_ylabel(label)
        row[0].legend(fontsize=7)
    drawing.figure_title(
        fig,
        "LEV's health over training (metrics.jsonl `lev_health`; per-head statistics: the mean "
        "over heads, their range shaded)",
        smoke,
        policy,
    )
    return drawing.save_figure(fig, out_dir, "lev_health", inputs)


def _health_line(ax: Any, health: pd.DataFrame, key: str, colour: Any, label: str) -> None:
    """One cell's statistic: a line, or for a per-head list the heads' mean and range."""
    values = list(health[key])
    if values and isinstance(values[0], list):
        ax.fill_between(
            health["tokens"],
            [min(v) for v in values],
            [max(v) for v in values],
            color=colour,
            alpha=0.2,
            lw=0,
        )
        values = [sum(v) / len(v) for v in values]
    ax.plot(health["tokens"], values, marker="o", ms=3, lw=1.2, color=colour, label=label)
