"""The `sample_efficiency_along` table: sample efficiency from the evaluations of the kept
checkpoints (leviathan.eval.along; config.evaluate.along), the evaluation's loss on the
configured sample rather than the trainer's periodic subset. Every cell a ValueSpec whose
sources are fields of the group's `along_seed<k>.json` (each listing its evaluations' sha256)."""

from __future__ import annotations

from collections.abc import Sequence

from leviathan import layout
from leviathan.cells import Cell
from leviathan.report.cellmap import DocumentCache, Source, ValueSpec
from leviathan.report.context import CONFIG_LABELS, Context, ReportInputs
from leviathan.report.efficiency import group_run_source, seed_paired_variants, variant_rows
from leviathan.report.table import Table

ALONG_TABLE = "sample_efficiency_along"

# column -> (format, field of a run's record; `baseline/...`: the tied baseline's)
COLUMNS = {
    "tied_tokens": ("int", "baseline/tokens"),
    "target_val_loss": ("loss", "baseline/target_val_loss"),
    "final_val_loss": ("loss", "final_val_loss"),
    "reached": ("num", "reached"),
    "tokens_before_target": ("int", "bracket/0"),
    "tokens_at_target": ("int", "tokens_to_target"),
    "tokens_to_target": ("int", "tokens_interpolated"),
    "tokens_ratio": ("num", "ratio_interpolated"),
}


def along_applies(inp: ReportInputs) -> bool:
    """Evaluations along training exist: the config runs them and a group has a tied baseline."""
    return inp.along and bool(seed_paired_variants(inp))


def _sources(docs: DocumentCache, cells: Sequence[Cell], field: str) -> tuple[Source, ...]:
    out = []
    for c in cells:
        path = layout.along_path(c.results, c.scale, c.vocab, c.seed)
        source, run = group_run_source(docs, path, c.variant, field, "along_training")
        if field.startswith("bracket/") and run is not None and run.get("bracket") is None:
            return ()  # not reached in this seed: no bracketing checkpoints
        out.append(source)
    return tuple(out)


def along_table(ctx: Context, name: str) -> Table:
    """Per variant, the training tokens at which the evaluation's loss on its kept checkpoints
    first reaches tied's last evaluated one, interpolated linearly in training tokens between
    the bracketing checkpoints, and tied's tokens over those."""
    t = Table(
        name,
        "Sample efficiency along training: training tokens to reach tied's final evaluation loss "
        "(the val evaluation of each kept checkpoint, runtime.checkpoint.keep_at; not the periodic "
        "in-training subset); tokens_to_target is interpolated linearly in training tokens "
        "between tokens_before_target (the last kept checkpoint above the target) and "
        "tokens_at_target (the first at or below it); reached: fraction of seeds that reach it; "
        "tokens_ratio: tied's tokens over the variant's (> 1 = fewer tokens than tied, better)",
        CONFIG_LABELS,
        {col: fmt for col, (fmt, _) in COLUMNS.items()},
    )
    for row, cells in variant_rows(t, ctx):
        for col, (_, field) in COLUMNS.items():
            t.set(row, col, ValueSpec("mean", _sources(ctx.docs, cells, field)))
    return t
