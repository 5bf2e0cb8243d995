"""The table builders: one function per table of the report, each declaring its rows and the
value of each cell (a `ValueSpec`), never computing a number itself.

A builder is called as `build(ctx, name)` by the registry (leviathan.report.registry), in the
registry's order, so paper_vs_ours can read the tables built before it. The builders of
tables with a module of their own: sample efficiency (leviathan.report.efficiency), along
training (along_table), reconstruction (recon), throughput.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from leviathan.cells import Cell
from leviathan.eval.results import (
    FREQUENCY_KEYS,
    VAL_LOSS,
    frequency_bucket,
)
from leviathan.report.baseline import BASELINE, tied_baseline
from leviathan.report.cellmap import ValueSpec
from leviathan.report.columns import (
    EvalColumns,
    accuracy_sources,
    accuracy_tasks,
    compared,
    eval_output,
    eval_sources,
    lm_eval_tasks,
    state_sources,
)
from leviathan.report.context import (
    CONFIG_LABELS,
    Context,
    config_row,
    seeded,
    tied_and_leviathan,
)
from leviathan.report.evidence import EVIDENCE_COLUMNS, GAIN_CONVENTION, RECIPE
from leviathan.report.formatting import ROW_FORMAT
from leviathan.report.paper import MAIN_PAPER_NUMBERS, PAPER_TASKS, QUANTITY_FORMATS, paper_value
from leviathan.report.table import Table
from leviathan.vocab import get_vocab

# the evaluation columns of the main table (one row per configuration, seeds averaged)
MAIN_COLUMNS = (
    "val_loss",
    "val_ppl",
    "val_targets",
    "val_ppl_gain",
    "wikitext_ppl",
    "wikitext_ppl_gain",
    "lambada_ppl",
    "lambada_ppl_gain",
)
# the columns of the main table that give a 95% CI over seeds where there are 2 or more
MAIN_CI_COLUMNS = (
    "val_loss",
    "val_ppl_gain",
    "wikitext_ppl",
    "wikitext_ppl_gain",
    "lambada_ppl",
    "lambada_ppl_gain",
)


def main_table(ctx: Context, name: str) -> Table:
    evals = EvalColumns(ctx.inp, ctx.docs)
    cols = evals.formats(MAIN_COLUMNS)
    cols |= {f"paper_{col}": cols.get(col, "pct") for col in MAIN_PAPER_NUMBERS}
    t = Table(
        name,
        "Main results: validation loss (the evaluation's, over its configured sample of the "
        "held-out split: val_targets tokens) and perplexity (exp of the loss: the paper's own "
        "1.2B row, whose PPL is not exp of its loss, would differ here), zero-shot WikiText-103 "
        "perplexity per word (as lm-eval reports it) and LAMBADA perplexity, and their gains over "
        "tied; paper_*: the paper's figure for the same scale and variant (o200k), empty where it "
        f"has none; {GAIN_CONVENTION}",
        CONFIG_LABELS,
        cols,
    )
    groups = ctx.inp.study("main")
    if seeded(groups):
        t.with_ci(*MAIN_CI_COLUMNS)
    for (scale, vocab, variant), cells in groups.items():
        base, label = tied_baseline(groups, scale, vocab, variant)
        row = config_row(ctx, t, scale, vocab, variant, cells, label)
        evals.set_values(t, row, cells)
        if base:
            evals.set_gains(t, row, groups[scale, vocab, base], cells)
        ctx.set_paper(t, row)
    return t


def downstream_table(ctx: Context, name: str) -> Table:
    groups = ctx.inp.study("main")
    paper_tasks, tasks, averaged = accuracy_tasks(ctx.inp, ctx.docs)
    metrics = lm_eval_tasks(ctx.inp, ctx.docs)
    cols = {task: "points" for task in tasks} | {
        "mean": "points",
        "gain_points": "dpoints",
        "mean_norm": "points",
        "paper_mean": "points",
        "paper_gain_points": "dpoints",
    }
    over = ", ".join(averaged) or "no accuracy task (none of the tasks that ran reports acc)"
    t = Table(
        name,
        f"Zero-shot accuracy (%, lm-eval's acc) per task; mean over {over} and its gain "
        "over tied (points); mean_norm: the same mean with acc_norm where a task has it; "
        + GAIN_CONVENTION,
        CONFIG_LABELS,
        cols,
    )

    def norm(task: str) -> str:  # acc_norm where the task has it (HellaSwag, ARC, PIQA), else acc
        return "acc_norm,none" if "acc_norm,none" in metrics.get(task, {}) else "acc,none"

    for (scale, vocab, variant), cells in groups.items():
        base, label = tied_baseline(groups, scale, vocab, variant)
        row = config_row(ctx, t, scale, vocab, variant, cells, label)
        for task in tasks:
            t.set(
                row,
                task,
                ValueSpec("pct", accuracy_sources(cells, [task])),
            )
        t.set(row, "mean", ValueSpec("pct", accuracy_sources(cells, averaged)))
        t.set(row, "mean_norm", ValueSpec("pct", accuracy_sources(cells, averaged, metric=norm)))
        if base:
            tied = groups[scale, vocab, base]
            t.set(
                row,
                "gain_points",
                ValueSpec(
                    "diff_pct",
                    accuracy_sources(tied, averaged, "a") + accuracy_sources(cells, averaged, "b"),
                ),
            )
        if paper_tasks == PAPER_TASKS:  # the paper's mean is over its six tasks
            ctx.set_paper(t, row)
    return t


def ablation_table(ctx: Context, name: str) -> Table:
    groups = ctx.inp.study("ablation")
    cols = {
        "params": "int",
        "val_loss": "loss",
        "gain": "pct",
        "paper_params": "int",
        "paper_val_loss": "loss",
        "paper_gain": "pct",
    }
    t = Table(
        name,
        "Input-layer ablation: validation loss (the evaluation's) and relative gain over tied; "
        + GAIN_CONVENTION,
        CONFIG_LABELS,
        cols,
    )
    if seeded(groups):
        t.with_ci("val_loss", "gain")
    for (scale, vocab, variant), cells in groups.items():
        base, label = tied_baseline(groups, scale, vocab, variant)
        row = config_row(ctx, t, scale, vocab, variant, cells, label)
        t.set(row, "params", ValueSpec("params", state_sources(cells[:1])))
        t.set(row, "val_loss", ValueSpec("mean", eval_sources(cells, "val", VAL_LOSS)))
        if base or variant == "tied":  # tied's own gain: 0 by definition, shown
            tied = groups[scale, vocab, base or variant]
            t.set(row, "gain", compared("gain", tied, cells, "val", VAL_LOSS))
        ctx.set_paper(t, row)
    return t


def vocabulary_table(ctx: Context, name: str) -> Table:
    groups = ctx.inp.study("vocabulary")
    pairs = sorted(tied_and_leviathan(groups), key=lambda sv: (sv[0], get_vocab(sv[1]).n_vocab))
    cols = {
        "tied_loss": "loss",
        "leviathan_loss": "loss",
        "gain": "pct",
        "gain_min": "pct",
        "gain_max": "pct",
    }
    t = Table(
        name,
        "Vocabulary study: relative loss gain of leviathan over tied (the evaluation's validation "
        f"loss); {GAIN_CONVENTION}. The paper's row (a range over its vocabularies, at a scale "
        "it does not state) is its own, not beside any of ours",
        ["source", "scale", "vocab", "n_vocab", "seeds", *EVIDENCE_COLUMNS],
        cols,
    )
    if seeded(groups):
        t.with_ci("tied_loss", "leviathan_loss", "gain")
    for scale, vocab in pairs:
        tied, lev = groups[scale, vocab, "tied"], groups[scale, vocab, "leviathan"]
        row = t.add_row(
            f"{scale}/{vocab}",
            source="ours",
            scale=scale,
            vocab=vocab,
            n_vocab=get_vocab(vocab).n_vocab,
            seeds=len(lev),
            **ctx.evidence([*tied, *lev]),
        )
        t.set(row, "tied_loss", ValueSpec("mean", eval_sources(tied, "val", VAL_LOSS)))
        t.set(row, "leviathan_loss", ValueSpec("mean", eval_sources(lev, "val", VAL_LOSS)))
        t.set(row, "gain", compared("gain", tied, lev, "val", VAL_LOSS))
    if pairs:
        row = t.add_row(
            "paper",
            source="paper",
            scale="not stated",
            vocab=";".join(ctx.paper.doc.get("vocabulary", {}).get("vocabs", [])),
        )
        t.set(row, "gain_min", paper_value(ctx.paper, "vocabulary", "gain_range", 0))
        t.set(row, "gain_max", paper_value(ctx.paper, "vocabulary", "gain_range", 1))
    return t


# frequency levels: the val evaluation's result key -> the table's `level` label and row-id part
FREQUENCY_LEVELS = dict(zip(FREQUENCY_KEYS, (("token", ""), ("word", "words/")), strict=True))


def frequency_table(ctx: Context, name: str) -> Table:
    """Every (scale, vocabulary) of the studies with tied and leviathan, token-level buckets (the
    target id's training count) and, where the evaluation counted words, word-level buckets
    (the word's training count; its loss the sum over its tokens)."""
    groups = ctx.inp.all_cells()
    cols = {
        "targets": "int",
        "tied_loss": "loss",
        "leviathan_loss": "loss",
        "loss_gain_nats": "loss",
        "tied_ppl": "ppl",
        "leviathan_ppl": "ppl",
        "ppl_gain": "pct",
        "paper_ppl_gain": "pct",
        "paper_loss_gain_nats": "loss",
    }
    t = Table(
        name,
        "Validation loss (the evaluation's) by training-set frequency of the target token "
        "(level token) or word (level word, where word counts ran: the word's loss summed over "
        "its tokens), decade buckets of the training count, tied vs leviathan, every vocabulary "
        "of the studies; targets: evaluated tokens (words) in the bucket; paper_*: the paper's "
        f"figures, on rows of its scale only; {GAIN_CONVENTION}",
        ["scale", "vocab", "seeds", *EVIDENCE_COLUMNS, "level", "bucket"],
        cols,
    )
    for scale, vocab in tied_and_leviathan(groups):
        tied, lev = groups[scale, vocab, "tied"], groups[scale, vocab, "leviathan"]
        evidence = {"seeds": len(lev), **ctx.evidence([*tied, *lev])}
        results = ctx.docs.get(eval_output(tied[0], "val"))["results"]
        for key, (level, part) in FREQUENCY_LEVELS.items():
            for i, bucket in enumerate(results.get(key, {}).get("log10", [])):
                label = bucket["label"]
                row = t.add_row(
                    f"{scale}/{vocab}/{part}{label}",
                    scale=scale,
                    vocab=vocab,
                    **evidence,
                    level=level,
                    bucket=label,
                )
                _frequency_row(ctx, t, row, tied, lev, frequency_bucket(key, i), bucket)
    return t


def _frequency_row(
    ctx: Context,
    t: Table,
    row: str,
    tied: Sequence[Cell],
    lev: Sequence[Cell],
    ptr: str,
    bucket: Mapping[str, Any],
) -> None:
    """One bucket's cells (an empty bucket: its count only)."""
    t.set(row, "targets", ValueSpec("mean", eval_sources(tied[:1], "val", f"{ptr}/n")))
    if not bucket["n"]:
        return
    t.set(row, "tied_loss", ValueSpec("mean", eval_sources(tied, "val", f"{ptr}/mean_loss")))
    t.set(row, "leviathan_loss", ValueSpec("mean", eval_sources(lev, "val", f"{ptr}/mean_loss")))
    t.set(row, "loss_gain_nats", compared("reduction", tied, lev, "val", f"{ptr}/mean_loss"))
    t.set(row, "tied_ppl", ValueSpec("exp", eval_sources(tied, "val", f"{ptr}/mean_loss")))
    t.set(row, "leviathan_ppl", ValueSpec("exp", eval_sources(lev, "val", f"{ptr}/mean_loss")))
    t.set(row, "ppl_gain", compared("exp_gain", tied, lev, "val", f"{ptr}/mean_loss"))
    ctx.set_paper(t, row)


def cost_table(ctx: Context, name: str) -> Table:
    cols = {
        "params": "int",
        "forward_flops_per_token": "int",
        "params_overhead": "pct",
        "flops_overhead": "pct",
        "paper_params_overhead": "pct",
        "paper_flops_overhead": "pct",
    }
    t = Table(
        name,
        "Cost by the model's own counter (from the model config alone, no training): parameters, "
        "forward FLOPs per token (matmuls, attention at the training context, LEV's generator per "
        "position), overhead vs tied (positive = more than tied)",
        ["scale", "vocab", "variant", RECIPE],
        cols,
        source="each final checkpoint's recorded model config, by the model's own counter",
    )
    groups = ctx.inp.all_cells()
    for (scale, vocab, variant), cells in groups.items():
        row = t.add_row(
            f"{scale}/{vocab}/{variant}",
            scale=scale,
            vocab=vocab,
            variant=variant,
            recipe=ctx.recipe(cells),
        )
        t.set(row, "params", ValueSpec("params", state_sources(cells[:1])))
        t.set(row, "forward_flops_per_token", ValueSpec("flops", state_sources(cells[:1])))
        tied = groups.get((scale, vocab, "tied"))
        if tied and variant != "tied":
            both = state_sources(tied[:1], "a") + state_sources(cells[:1], "b")
            t.set(row, "params_overhead", ValueSpec("params_overhead", both))
            t.set(row, "flops_overhead", ValueSpec("flops_overhead", both))
        ctx.set_paper(t, row)
    return t


def paper_vs_ours(ctx: Context, name: str) -> Table:
    """The paper's reported point numbers (the tables' `paper_*` cells, for every scale it
    reports) beside ours: the same table's cell, empty where that scale was not run."""
    t = Table(
        name,
        "The paper's reported figures beside ours at the same scale (ours empty where that scale "
        "was not trained) and the difference, ours minus the paper's; train_tokens and "
        "evidence: what ours rests on. Ours are on the "
        "configured corpus: the default Hub source, monology/pile-uncopyrighted, is the Pile "
        "without 5 of its 22 subsets (Books3, BookCorpus2, OpenSubtitles, YTSubtitles, OWT2), "
        "so our validation loss is not on the paper's validation set (README, RECON); "
        f"{GAIN_CONVENTION}",
        ["table", "scale", "variant", "quantity", ROW_FORMAT, *EVIDENCE_COLUMNS],
        {"paper": "num", "ours": "num", "difference": "num"},
    )
    for number in ctx.paper_numbers:
        ours, evidence = None, {}
        if number.table in ctx.tables and number.row in ctx.tables[number.table].rows:
            ours = ctx.tables[number.table].specs.get((number.row, number.quantity))
            evidence = {
                c: ctx.tables[number.table].rows[number.row].get(c) for c in EVIDENCE_COLUMNS
            }
        row = t.add_row(
            f"{number.table}/{number.scale}/{number.key}/{number.quantity}",
            table=number.table,
            scale=number.scale,
            variant=number.key,
            quantity=number.quantity,
            unit=QUANTITY_FORMATS[number.quantity],  # each row shown as its own table shows it
            **(evidence if ours is not None else {}),
        )
        t.set(row, "paper", number.spec)
        t.set(row, "ours", ours)
        if ours is not None:
            t.set(row, "difference", ValueSpec("diff_of", parts=(number.spec, ours)))
    return t


# the columns of the metrics table (one row per cell and seed), those the evaluations yield
METRICS_COLUMNS = (
    "val_loss",
    "val_ppl",
    "val_bpb",
    "val_targets",
    "wikitext_ppl",
    "lambada_ppl",
    "downstream_mean_acc",
    "val_loss_gain",
    "val_ppl_gain",
    "wikitext_ppl_gain",
    "lambada_ppl_gain",
    "downstream_gain_points",
)


def metrics_table(ctx: Context, name: str) -> Table:
    """The flat per-cell metrics of the study (DVC's `metrics:` file, rendered as JSON too).

    One row per trained cell (scale/vocab/variant/seed<k>, seeds not averaged): validation
    loss, perplexity and bits per byte, WikiText-103 and LAMBADA perplexity, mean downstream
    accuracy, and the gains over the tied cell of the same scale, vocabulary and seed; each
    column built as the main table builds it (leviathan.report.columns.EvalColumns)."""
    evals = EvalColumns(ctx.inp, ctx.docs)
    t = Table(
        name,
        "Per-cell metrics (DVC metrics; seeds not averaged): evaluation results and gains over "
        "the tied cell of the same scale, vocabulary and seed; the same numbers as metrics.json "
        "and, one file per cell, as `dvc metrics show` reads them; "
        f"{GAIN_CONVENTION}",
        ["scale", "vocab", "variant", "seed", BASELINE, *EVIDENCE_COLUMNS],
        evals.formats(METRICS_COLUMNS),
    )
    groups = ctx.inp.all_cells()
    for (scale, vocab, variant), cells in groups.items():
        base, label = tied_baseline(groups, scale, vocab, variant)
        tied_by_seed = {c.seed: c for c in groups.get((scale, vocab, base or ""), [])}
        for cell in cells:
            row = t.add_row(
                cell.key,
                scale=scale,
                vocab=vocab,
                variant=variant,
                seed=cell.seed,
                baseline=label,
                **ctx.evidence([cell]),
            )
            evals.set_values(t, row, [cell])
            tied = tied_by_seed.get(cell.seed)
            if tied is not None:
                evals.set_gains(t, row, [tied], [cell])
    return t
