"""What the report's figures share: a panel's message when it has nothing to show, a figure's
title (a second line for smoke-test numbers), what a panel rests on, a colour per variant, a grid of
panels, and saving a figure as PNG and PDF, each with a manifest naming its inputs."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on clusters or CI

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from leviathan.io import atomic_path  # noqa: E402
from leviathan.layout import figure_files  # noqa: E402
from leviathan.manifest import input_record, write_manifest  # noqa: E402
from leviathan.report.context import variant_order  # noqa: E402
from leviathan.report.evidence import SMOKE, SmokePolicy  # noqa: E402


def empty_panel(ax: Any, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, fontsize=11)
    ax.set_axis_off()


def save_figure(
    fig: Any, out_dir: str | os.PathLike[str], name: str, inputs: Sequence[Path]
) -> list[Path]:
    paths = figure_files(out_dir, name)
    for fmt, path in paths.items():
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight")
        write_manifest(
            path,
            artifact_type="figure",
            inputs=[input_record(p) for p in inputs],
            fields={"figure": name},
        )
    plt.close(fig)
    return list(paths.values())


def figure_title(fig: Any, title: str, smoke: bool, policy: SmokePolicy) -> None:
    """The figure's title; with smoke-test numbers, a second line that says so."""
    if smoke:
        title += (
            f"\nSMOKE TEST (runs below {policy.below_tokens:,} training tokens): "
            "checks that the pipeline runs, not evidence"
        )
    fig.suptitle(title, color="firebrick" if smoke else "black")
    fig.tight_layout()  # room for the title's lines above the panels' own titles


def panel_evidence(rows: pd.DataFrame) -> str:
    """What a panel rests on, from its table rows: `micro / gpt2: 30,720 tokens, 1 seed(s), smoke test`."""
    first = rows.iloc[0]
    return (
        f"{first['scale']} / {first['vocab']}: {first['train_tokens']} tokens, "
        f"{int(first['seeds'])} seed(s), {first['evidence']}"
    )


def legend_label(variant: str, recipe: Any = "") -> str:
    """A line's legend: the cell's variant and, where it is not its scale's default, its recipe
    (`leviathan@lr1e-3 (lr=1e-3)`; report.evidence.recipe_label)."""
    return f"{variant} ({recipe})" if isinstance(recipe, str) and recipe else str(variant)


def variant_palette(names: Iterable[str]) -> dict[str, Any]:
    """A colour per variant: the built-ins in report order, then named variants and tagged
    cells (sorted), each its own."""
    variants = variant_order()
    variants += sorted(set(names) - set(variants))
    colours = sns.color_palette("husl" if len(variants) > 10 else "colorblind", len(variants))
    return dict(zip(variants, colours, strict=True))


def panel_grid(n: int, width: float = 5.0, height: float = 3.6) -> tuple[Any, list[Any]]:
    cols = min(n, 3) or 1
    rows = max(1, -(-n // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_axis_off()
    return fig, flat


def any_smoke(frame: pd.DataFrame) -> bool:
    return bool(len(frame)) and bool((frame["evidence"] == SMOKE).any())
