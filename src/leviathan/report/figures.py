"""The report's figures (seaborn), each as PNG and PDF with a manifest naming its inputs.

    loss_curves   validation loss vs training tokens per (scale, vocab, seed), every variant,
                  the tied final loss as a dashed line and where each variant reaches it
    frequency     loss per training-frequency bucket, tied vs leviathan, and the perplexity gain
    vocabulary    relative loss gain of leviathan over tied vs vocabulary size (paper's range shaded)
    ablation      relative loss gain over tied per input variant, ours beside the paper's (400M)

Figures are drawn from the report tables (the same numbers) and the sample-efficiency outputs.
A figure whose study is not in the config says so on its canvas instead of being omitted.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on clusters or CI

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from leviathan.io import atomic_path, read_json  # noqa: E402
from leviathan.layout import figure_files, sample_efficiency_group  # noqa: E402
from leviathan.manifest import input_record, write_manifest  # noqa: E402
from leviathan.paper import Paper  # noqa: E402

FIGURE_NAMES = ["loss_curves", "frequency", "vocabulary", "ablation"]
from leviathan.report.tables import variant_order  # noqa: E402


def _empty(ax: Any, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, fontsize=11)
    ax.set_axis_off()


def _save(
    fig: Any, out_dir: str | os.PathLike[str], name: str, inputs: Sequence[Path]
) -> list[Path]:
    paths = figure_files(out_dir, name)
    for fmt, path in paths.items():
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight")
        write_manifest(
            path, kind="figure", inputs=[input_record(p) for p in inputs], fields={"figure": name}
        )
    plt.close(fig)
    return list(paths.values())


def _grid(n: int, width: float = 5.0, height: float = 3.6) -> tuple[Any, list[Any]]:
    cols = min(n, 3) or 1
    rows = max(1, -(-n // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_axis_off()
    return fig, flat


def loss_curves(sample_efficiency: Sequence[Path], out_dir: str | os.PathLike[str]) -> list[Path]:
    groups = [(p, read_json(p)) for p in sorted(sample_efficiency)]
    fig, axes = _grid(max(1, len(groups)))
    if not groups:
        _empty(axes[0], "no (scale, vocab, seed) group with a tied baseline and another variant")
    variants = variant_order()
    palette = dict(zip(variants, sns.color_palette("colorblind", len(variants)), strict=True))
    for ax, (path, doc) in zip(axes, groups, strict=False):
        r = doc["results"]
        base = r["baseline"]
        for run in [base, *r["runs"]]:
            curve = pd.DataFrame(run["curve"])
            ax.plot(
                curve["tokens"],
                curve["val_loss"],
                marker="o",
                ms=3,
                lw=1.5,
                color=palette.get(run["variant"]),
                label=run["variant"],
            )
            if run is not base and run.get("reached") and run.get("tokens_interpolated"):
                ax.plot(
                    [run["tokens_interpolated"]],
                    [base["target_val_loss"]],
                    marker="v",
                    ms=9,
                    color=palette.get(run["variant"]),
                    markeredgecolor="black",
                )
        ax.axhline(base["target_val_loss"], ls="--", lw=1, color="grey", label="tied final loss")
        ax.set_title(" / ".join(sample_efficiency_group(path)))
        ax.set_xlabel("training tokens")
        ax.set_ylabel("validation loss (nats/token)")
        ax.legend(fontsize=7, title="▼ reaches tied final loss", title_fontsize=7)
    fig.suptitle("Validation loss vs training tokens")
    return _save(fig, out_dir, "loss_curves", sample_efficiency)


def frequency(csv: Path | None, out_dir: str | os.PathLike[str]) -> list[Path]:
    frame = pd.read_csv(csv) if csv else pd.DataFrame()
    pairs = list(frame.groupby(["scale", "vocab"], sort=True)) if len(frame) else []
    fig, axes = plt.subplots(
        2, max(1, len(pairs)), figsize=(6 * max(1, len(pairs)), 7), squeeze=False
    )
    if not pairs:
        _empty(axes[0][0], "no tied/leviathan pair in the main study")
        axes[1][0].set_axis_off()
    for i, ((scale, vocab), g) in enumerate(pairs):
        g = g.dropna(subset=["tied_loss", "leviathan_loss"])
        long = g.melt(
            id_vars=["bucket"],
            value_vars=["tied_loss", "leviathan_loss"],
            var_name="variant",
            value_name="loss",
        )
        long["variant"] = long["variant"].str.removesuffix("_loss")
        sns.barplot(long, x="bucket", y="loss", hue="variant", ax=axes[0][i], palette="colorblind")
        axes[0][i].set_title(f"{scale} / {vocab}")
        axes[0][i].set_xlabel("")
        axes[0][i].set_ylabel("mean validation loss (nats)")
        sns.barplot(x=g["bucket"], y=100 * g["ppl_gain"], ax=axes[1][i], color="C2")
        axes[1][i].axhline(0, color="black", lw=0.8)
        axes[1][i].set_xlabel("training-set count of the target token")
        axes[1][i].set_ylabel("perplexity gain of leviathan (%)")
        for ax in axes[:, i]:
            ax.tick_params(axis="x", rotation=30)
    fig.suptitle("Loss by token frequency bucket")
    fig.tight_layout()
    return _save(fig, out_dir, "frequency", [csv] if csv else [])


def vocabulary(csv: Path | None, out_dir: str | os.PathLike[str]) -> list[Path]:
    frame = pd.read_csv(csv) if csv else pd.DataFrame()
    fig, ax = plt.subplots(figsize=(6, 4))
    if not len(frame):
        _empty(ax, "no vocabulary study in this config")
    else:
        lo, hi = frame["paper_gain_min"].iloc[0], frame["paper_gain_max"].iloc[0]
        ax.axhspan(
            100 * lo, 100 * hi, color="grey", alpha=0.25, label="paper (range; scale not stated)"
        )
        sns.lineplot(frame, x="n_vocab", y=100 * frame["gain"], hue="scale", marker="o", ax=ax)
        for _, r in frame.iterrows():
            ax.annotate(
                r["vocab"],
                (r["n_vocab"], 100 * r["gain"]),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=8,
            )
        ax.set_xscale("log")
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xlabel("vocabulary size (tokens)")
        ax.set_ylabel("loss gain of leviathan over tied (%)")
        ax.legend(fontsize=8)
    ax.set_title("Relative gain vs vocabulary size")
    return _save(fig, out_dir, "vocabulary", [csv] if csv else [])


def ablation(csv: Path | None, out_dir: str | os.PathLike[str]) -> list[Path]:
    frame = pd.read_csv(csv) if csv else pd.DataFrame()
    inputs = [csv] if csv else []
    fig, ax = plt.subplots(figsize=(7, 4))
    if not len(frame):
        _empty(ax, "no ablation study in this config")
    else:
        rows = []
        paper = Paper.load()
        inputs.append(Path(paper.path))
        for _, r in frame.iterrows():
            rows.append(
                {
                    "variant": r["variant"],
                    "gain": 100 * r["gain"],
                    "source": f"ours ({r['scale']}/{r['vocab']})",
                }
            )
        for scale in paper.scales("ablation"):
            for variant, fig_ in paper.ablation(scale).items():
                rows.append(
                    {"variant": variant, "gain": 100 * fig_["gain"], "source": f"paper ({scale})"}
                )
        long = pd.DataFrame(rows)
        order = [v for v in variant_order() if v in set(long["variant"])]
        sns.barplot(
            long, x="variant", y="gain", hue="source", order=order, ax=ax, palette="colorblind"
        )
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xlabel("input layer")
        ax.set_ylabel("validation loss gain over tied (%)")
        ax.tick_params(axis="x", rotation=20)
    ax.set_title("Ablation: relative gain over tied")
    return _save(fig, out_dir, "ablation", inputs)


def write_figures(
    tables: Mapping[str, Path], sample_efficiency: Sequence[Path], out_dir: str | os.PathLike[str]
) -> list[Path]:
    sns.set_theme(context="paper", style="whitegrid")
    out: list[Path] = []
    out += loss_curves(sample_efficiency, out_dir)
    out += frequency(tables.get("frequency"), out_dir)
    out += vocabulary(tables.get("vocabulary"), out_dir)
    out += ablation(tables.get("ablation"), out_dir)
    return out
