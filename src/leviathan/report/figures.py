"""The report's figures (seaborn), each as PNG and PDF with a manifest naming its inputs.

    loss_curves   periodic in-training validation loss vs training tokens per (scale, vocab,
                  seed), every variant, tied's final one dashed and where each variant reaches it
    frequency     loss per training-frequency bucket (token and word level), tied vs leviathan,
                  and the perplexity gain, one column per (scale, vocab)
    vocabulary    relative loss gain of leviathan over tied vs vocabulary size; the paper's range
                  in its own panel (it states no scale)
    ablation      relative loss gain over tied per input variant; the paper's (400M) beside ours
                  only at the same scale and vocabulary, otherwise in its own panel
    training      each cell's training loss, learning rate and gradient norm vs training
                  tokens (its metrics.jsonl), one row per (scale, vocab, seed), one line per cell
    along         each frequency bucket's evaluation loss and leviathan's gain over tied vs
                  training tokens, from the kept checkpoints (report.along_figure)
    recon, lev_health   LEV's reconstruction choices and its health statistics over training
                  (leviathan.report.lev_figures)

Figures are drawn from the report tables (the same numbers, with the scale, training tokens,
seeds and smoke-test label of each row) and the sample-efficiency outputs. Every panel says what
its numbers rest on; a figure with smoke-test numbers says so in its title. A figure whose study
is not in the config says so on its canvas instead of being omitted.
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

from leviathan.cells import Cell  # noqa: E402
from leviathan.eval.sample_efficiency import metrics_path  # noqa: E402
from leviathan.io import read_json  # noqa: E402
from leviathan.layout import report_figures, run_dir, sample_efficiency_group  # noqa: E402
from leviathan.report import (
    drawing,  # noqa: E402
    lev_figures,  # noqa: E402
)
from leviathan.report.along_figure import along_figure  # noqa: E402
from leviathan.report.context import variant_order  # noqa: E402
from leviathan.report.evidence import SmokePolicy, caption  # noqa: E402
from leviathan.report.paper import PAPER_MAIN_VOCAB, Paper  # noqa: E402
from leviathan.train.metrics_log import read_metrics  # noqa: E402
from leviathan.vocab import get_vocab  # noqa: E402


def loss_curves(
    sample_efficiency: Sequence[Path],
    out_dir: str | os.PathLike[str],
    policy: SmokePolicy,
    recipes: Mapping[str, str] | None = None,
) -> list[Path]:
    """`recipes`: cell key -> its recipe label, shown in the legend beside its variant."""
    groups = [(p, read_json(p)) for p in sorted(sample_efficiency)]
    smoke = False
    fig, axes = drawing.panel_grid(max(1, len(groups)))
    if not groups:
        drawing.empty_panel(
            axes[0], "no (scale, vocab, seed) group with a tied baseline and another variant"
        )
    palette = drawing.variant_palette(
        run["variant"]
        for _, d in groups
        for run in [d["results"]["baseline"], *d["results"]["runs"]]
    )
    for ax, (path, doc) in zip(axes, groups, strict=False):
        r = doc["results"]
        base = r["baseline"]
        scale, vocab, seed = sample_efficiency_group(path)
        for run in [base, *r["runs"]]:
            recipe = (recipes or {}).get(f"{scale}/{vocab}/{run['variant']}/{seed}")
            _loss_curve(ax, run, base, palette.get(run["variant"]), recipe)
        ax.axhline(
            base["target_val_loss"], ls="--", lw=1, color="grey", label="tied final periodic loss"
        )
        tokens = [base["tokens"], *(run["final_tokens"] for run in r["runs"])]
        smoke = smoke or policy.is_smoke(tokens)
        ax.set_title(
            f"{vocab}: {caption(scale, tokens, [int(seed.removeprefix('seed'))], policy)}",
            fontsize=9,
        )
        ax.set_xlabel("training tokens")
        ax.set_ylabel("periodic val loss (in training, nats/token)")
        ax.legend(fontsize=7, title="▼ reaches tied final periodic loss", title_fontsize=7)
    drawing.figure_title(
        fig,
        "Periodic in-training validation loss (a fixed subset of windows; not the evaluation's "
        "val_loss) vs training tokens",
        smoke,
        policy,
    )
    return drawing.save_figure(fig, out_dir, "loss_curves", sample_efficiency)


def _loss_curve(
    ax: Any, run: Mapping[str, Any], base: Mapping[str, Any], color: Any, recipe: str | None
) -> None:
    """One run's periodic validation loss; a marker where it reaches the tied baseline's final
    loss (a run other than the baseline)."""
    curve = pd.DataFrame(run["curve"])
    ax.plot(
        curve["tokens"],
        curve["val_loss"],
        marker="o",
        ms=3,
        lw=1.5,
        color=color,
        label=drawing.legend_label(run["variant"], recipe),
    )
    if run is not base and run.get("reached") and run.get("tokens_interpolated"):
        ax.plot(
            [run["tokens_interpolated"]],
            [base["target_val_loss"]],
            marker="v",
            ms=9,
            color=color,
            markeredgecolor="black",
        )


def frequency(csv: Path | None, out_dir: str | os.PathLike[str], policy: SmokePolicy) -> list[Path]:
    frame = pd.read_csv(csv) if csv else pd.DataFrame()
    pairs = list(frame.groupby(["scale", "vocab"], sort=False)) if len(frame) else []
    levels = list(dict.fromkeys(frame["level"])) if len(frame) else ["token"]
    ncols = max(1, len(pairs))
    fig, axes = plt.subplots(
        2 * len(levels), ncols, figsize=(6 * ncols, 3.6 * 2 * len(levels)), squeeze=False
    )
    if not pairs:
        drawing.empty_panel(axes[0][0], "no tied/leviathan pair in the studies")
        axes[1][0].set_axis_off()
    for i, ((_scale, _vocab), pair) in enumerate(pairs):
        for k, level in enumerate(levels):
            g = pair[pair["level"] == level].dropna(subset=["tied_loss", "leviathan_loss"])
            top, bottom = axes[2 * k][i], axes[2 * k + 1][i]
            if not len(g):
                drawing.empty_panel(top, f"no {level}-level buckets")
                bottom.set_axis_off()
                continue
            long = g.melt(
                id_vars=["bucket"],
                value_vars=["tied_loss", "leviathan_loss"],
                var_name="variant",
                value_name="loss",
            )
            long["variant"] = long["variant"].str.removesuffix("_loss")
            sns.barplot(long, x="bucket", y="loss", hue="variant", ax=top, palette="colorblind")
            top.set_title(f"{level} level, {drawing.panel_evidence(g)}", fontsize=9)
            top.set_xlabel("")
            top.set_ylabel("mean val loss (nats)")
            sns.barplot(x=g["bucket"], y=100 * g["ppl_gain"], ax=bottom, color="C2")
            bottom.axhline(0, color="black", lw=0.8)
            bottom.set_xlabel(f"training-set count of the target {level}")
            bottom.set_ylabel("ppl gain of leviathan (%, + = better)")
            for ax in (top, bottom):
                ax.tick_params(axis="x", rotation=30)
    drawing.figure_title(
        fig, "Validation loss by training-frequency bucket", drawing.any_smoke(frame), policy
    )
    return drawing.save_figure(fig, out_dir, "frequency", [csv] if csv else [])


def vocabulary(
    csv: Path | None, out_dir: str | os.PathLike[str], policy: SmokePolicy
) -> list[Path]:
    """Ours (one line per scale) and, in its own panel, the paper's range (it states no scale)."""
    frame = pd.read_csv(csv) if csv else pd.DataFrame()
    ours = frame[frame["source"] == "ours"] if len(frame) else frame
    paper = frame[frame["source"] == "paper"] if len(frame) else frame
    fig, (ax, pax) = plt.subplots(1, 2, figsize=(11, 4))
    if not len(ours):
        drawing.empty_panel(ax, "no vocabulary study in this config")
        pax.set_axis_off()
    else:
        rests_on = [  # the legend's title: what each line rests on (its `evidence` labels)
            f"{r['scale']}, {r['train_tokens']} tokens, {int(r['seeds'])} seed(s), {r['evidence']}"
            for _, r in ours.iterrows()
        ]
        lines = ours.assign(**{"rests on": rests_on})
        sns.lineplot(lines, x="n_vocab", y=100 * lines["gain"], hue="rests on", marker="o", ax=ax)
        for _, r in ours.iterrows():
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
        ax.set_ylabel("loss gain of leviathan over tied (%, + = better)")
        ax.legend(fontsize=7)
        ax.set_title("ours")
        for _, r in paper.iterrows():
            sizes = [get_vocab(v).n_vocab for v in str(r["vocab"]).split(";")]
            pax.fill_between(
                sizes, 100 * r["gain_min"], 100 * r["gain_max"], color="grey", alpha=0.4
            )
            pax.set_xscale("log")
            pax.set_xlabel("vocabulary size (tokens)")
            pax.set_ylabel("loss gain of leviathan over tied (%)")
        pax.set_title(f"THE PAPER's reported range (scale: {paper['scale'].iloc[0]})")
    drawing.figure_title(fig, "Relative gain vs vocabulary size", drawing.any_smoke(ours), policy)
    return drawing.save_figure(fig, out_dir, "vocabulary", [csv] if csv else [])


def ablation(csv: Path | None, out_dir: str | os.PathLike[str], policy: SmokePolicy) -> list[Path]:
    """Ours per (scale, vocab); the paper's figures in the same panel only at its scale and
    vocabulary, otherwise in a panel of their own."""
    frame = pd.read_csv(csv) if csv else pd.DataFrame()
    inputs = [csv] if csv else []
    panels: dict[str, list[dict[str, Any]]] = {}
    if len(frame):
        paper = Paper.load()
        inputs.append(Path(paper.path))
        for _key, g in frame.groupby(["scale", "vocab"], sort=False):
            panels[f"ours: {drawing.panel_evidence(g)}"] = [
                {"variant": r["variant"], "gain": 100 * r["gain"], "source": "ours"}
                for _, r in g.iterrows()
            ]
        for scale in paper.scales("ablation"):
            tokens = paper.main(scale).get("tokens")
            label = f"{scale} / {PAPER_MAIN_VOCAB}" + (f", {tokens:,} tokens" if tokens else "")
            rows = [
                {"variant": v, "gain": 100 * f["gain"], "source": "paper"}
                for v, f in paper.ablation(scale).items()
            ]
            same = next(
                (k for k in panels if k.startswith(f"ours: {scale} / {PAPER_MAIN_VOCAB}:")), None
            )
            if same:
                panels[same] += rows
            else:
                panels[f"THE PAPER's reported figures: {label}"] = rows
    fig, axes = drawing.panel_grid(max(1, len(panels)), width=6.0, height=4.0)
    if not panels:
        drawing.empty_panel(axes[0], "no ablation study in this config")
    order = variant_order()
    for ax, (title, rows) in zip(axes, panels.items(), strict=False):
        long = pd.DataFrame(rows)
        sns.barplot(
            long,
            x="variant",
            y="gain",
            hue="source",
            # the built-ins in the registry's order, then named variants and tagged cells
            order=[v for v in order if v in set(long["variant"])]
            + [v for v in dict.fromkeys(long["variant"]) if v not in order],
            ax=ax,
            palette="colorblind",
        )
        ax.axhline(0, color="black", lw=0.8)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("input layer")
        ax.set_ylabel("val loss gain over tied (%, + = better)")
        ax.tick_params(axis="x", rotation=20)
    drawing.figure_title(fig, "Ablation: relative gain over tied", drawing.any_smoke(frame), policy)
    return drawing.save_figure(fig, out_dir, "ablation", inputs)


TRAINING_PANELS = {
    "loss": "training loss (nats/token)",
    "lr": "learning rate",
    "grad_norm": "gradient norm (before clipping)",
}


def training(
    cells: Sequence[Cell],
    out_dir: str | os.PathLike[str],
    policy: SmokePolicy,
    recipes: Mapping[str, str] | None = None,
) -> list[Path]:
    """Each cell's training records (loss, lr, gradient norm) against training tokens: a row of
    three panels per (scale, vocab, seed), a line per variant (its legend with its recipe:
    `recipes`, cell key -> recipe label)."""
    groups: dict[tuple[str, str, int], list[Cell]] = {}
    for cell in sorted(cells):
        groups.setdefault((cell.scale, cell.vocab, cell.seed), []).append(cell)
    rows = max(1, len(groups))
    fig, axes = plt.subplots(rows, 3, figsize=(15.0, 3.4 * rows), squeeze=False)
    if not groups:
        for ax in axes[0]:
            drawing.empty_panel(ax, "no trained cell")
    palette = drawing.variant_palette(cell.variant for cell in cells)
    inputs, smoke = [], False
    for row, ((scale, vocab, seed), group) in zip(axes, groups.items(), strict=False):
        tokens = []
        for cell in group:
            path = metrics_path(run_dir(cell))
            inputs.append(path)
            by_step = {int(r["step"]): r for r in read_metrics(path, "train")}
            records = pd.DataFrame([by_step[s] for s in sorted(by_step)])
            if records.empty:
                continue
            tokens.append(int(records["tokens"].iloc[-1]))
            for ax, key in zip(row, TRAINING_PANELS, strict=True):
                ax.plot(
                    records["tokens"],
                    records[key],
                    lw=1.2,
                    color=palette.get(cell.variant),
                    label=drawing.legend_label(cell.variant, (recipes or {}).get(cell.key)),
                )
        smoke = smoke or policy.is_smoke(tokens)
        for ax, (key, label) in zip(row, TRAINING_PANELS.items(), strict=True):
            ax.set_title(f"{vocab}: {caption(scale, tokens or [0], [seed], policy)}", fontsize=9)
            ax.set_xlabel("training tokens")
            ax.set_ylabel(label)
            if key == "grad_norm":
                ax.set_yscale("log")
        row[0].legend(fontsize=7)
    drawing.figure_title(
        fig,
        "Training: loss, learning rate and gradient norm of every cell (metrics.jsonl)",
        smoke,
        policy,
    )
    return drawing.save_figure(fig, out_dir, "training", inputs)


def write_figures(
    tables: Mapping[str, Path],
    sample_efficiency: Sequence[Path],
    out_dir: str | os.PathLike[str],
    policy: SmokePolicy,
    cells: Sequence[Cell] = (),
    along: Sequence[Path] = (),
    recipes: Mapping[str, str] | None = None,
) -> list[Path]:
    """The figures of the study's `tables` (layout.report_figures: none without its table);
    `recipes`: cell key -> recipe label, which the legends show."""
    sns.set_theme(context="paper", style="whitegrid")
    draw = {
        "loss_curves": lambda: loss_curves(sample_efficiency, out_dir, policy, recipes),
        "frequency": lambda: frequency(tables.get("frequency"), out_dir, policy),
        "vocabulary": lambda: vocabulary(tables.get("vocabulary"), out_dir, policy),
        "ablation": lambda: ablation(tables.get("ablation"), out_dir, policy),
        "training": lambda: training(cells, out_dir, policy, recipes),
        "along": lambda: along_figure(along, out_dir, policy),
        "recon": lambda: lev_figures.recon(tables.get("recon"), out_dir, policy),
        "lev_health": lambda: lev_figures.lev_health(cells, out_dir, policy),
    }
    return [path for name in report_figures(tables) for path in draw[name]()]
