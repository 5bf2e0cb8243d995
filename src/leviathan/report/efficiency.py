"""The sample-efficiency table: the training tokens at which each variant reaches tied's final
periodic validation loss, from the workflow's sample-efficiency outputs (one per scale,
vocabulary and seed), and the pairing of variants with tied that those outputs compare.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from leviathan import layout
from leviathan.cells import Cell
from leviathan.eval.results import group_field, group_run_field
from leviathan.report.baseline import baseline_label
from leviathan.report.cellmap import DocumentCache, Source, ValueSpec
from leviathan.report.context import CONFIG_LABELS, Context, ReportInputs
from leviathan.report.table import Table


def seed_paired_variants(
    inp: ReportInputs,
) -> list[tuple[str, str, str, list[Cell], list[Cell]]]:
    """(scale, vocab, variant, its cells, tied's cells of the same seeds) for every variant other
    than tied with a tied baseline: the groups the sample-efficiency evaluation compares."""
    groups = inp.all_cells()
    out = []
    for (scale, vocab, variant), cells in groups.items():
        tied = {c.seed: c for c in groups.get((scale, vocab, "tied"), [])}
        paired = [c for c in cells if c.seed in tied]
        if variant != "tied" and paired:
            out.append((scale, vocab, variant, paired, [tied[c.seed] for c in paired]))
    return out


def variant_rows(t: Table, ctx: Context) -> Iterator[tuple[str, list[Cell]]]:
    """A row of `t` for each seed-paired variant (seed_paired_variants): its config labels,
    seeds, baseline and evidence (its cells and tied's); yields (row, the variant's cells) for
    the table's own values."""
    for scale, vocab, variant, cells, tied in seed_paired_variants(ctx.inp):
        row = t.add_row(
            f"{scale}/{vocab}/{variant}",
            scale=scale,
            vocab=vocab,
            variant=variant,
            seeds=len(cells),
            baseline=baseline_label(variant),
            **ctx.evidence([*tied, *cells]),
        )
        yield row, cells


def group_run_source(
    docs: DocumentCache, path: Any, variant: str, field_: str, rule: str
) -> tuple[Source, Mapping[str, Any] | None]:
    """A field of one variant's run record in a per-(scale, vocab, seed) comparison output
    (sample efficiency, along training): its Source, and the run record (None for the tied
    baseline's fields, `baseline/...`). A variant missing from the file names `rule` to rerun."""
    if field_.startswith("baseline/"):
        return Source(path, group_field(field_)), None
    runs = docs.get(path)["results"]["runs"]
    i = next((i for i, r in enumerate(runs) if r.get("variant") == variant), None)
    if i is None:
        raise ValueError(
            f"{path}: has no {variant} run: rerun its {rule} rule "
            f"(`snakemake --forcerun {rule} all`)"
        )
    return Source(path, group_run_field(i, field_)), runs[i]


def _sample_efficiency_sources(
    docs: DocumentCache, cells: Sequence[Cell], field_: str
) -> tuple[Source, ...]:
    """A field of each seed's run record in its sample-efficiency output (`baseline/...` for the
    tied baseline's); none where that output was not made (the workflow always makes it; a report
    built by hand from runs without periodic validation has none: its cells stay empty)."""
    out = []
    for c in cells:
        path = layout.sample_efficiency_path(c.results, c.scale, c.vocab, c.seed)
        if not docs.path(path).is_file():
            return ()
        out.append(group_run_source(docs, path, c.variant, field_, "sample_efficiency")[0])
    return tuple(out)


def sample_efficiency_table(ctx: Context, name: str) -> Table:
    """Ours: per variant, the training tokens at which its periodic in-training validation loss
    first reaches tied's final one (interpolated between evaluations), and tied's tokens over
    those (the paper's "2.1x fewer tokens"); empty where it never does (reached < 1: not in
    every seed)."""
    cols = {
        "tied_tokens": "int",
        "target_periodic_loss": "loss",
        "final_periodic_loss": "loss",
        "reached": "num",
        "tokens_to_target": "int",
        "tokens_ratio": "num",
        "paper_tokens_ratio": "num",
    }
    t = Table(
        name,
        "Sample efficiency: training tokens to reach tied's final periodic validation loss (the "
        "in-training evaluation on a fixed subset of validation windows, not the evaluation's "
        "val_loss); reached: fraction of seeds that reach it; tokens_ratio: tied's tokens over "
        "the variant's (> 1 = fewer tokens than tied, better); paper_tokens_ratio: the paper's, "
        "on rows of its scale only",
        CONFIG_LABELS,
        cols,
    )
    for row, cells in variant_rows(t, ctx):
        for col, field_ in (
            ("tied_tokens", "baseline/tokens"),
            ("target_periodic_loss", "baseline/target_val_loss"),
            ("final_periodic_loss", "final_val_loss"),
            ("reached", "reached"),
            ("tokens_to_target", "tokens_interpolated"),
            ("tokens_ratio", "ratio_interpolated"),
        ):
            t.set(row, col, ValueSpec("mean", _sample_efficiency_sources(ctx.docs, cells, field_)))
        ctx.set_paper(t, row)
    return t
