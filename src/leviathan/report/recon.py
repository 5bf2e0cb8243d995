"""The `recon` table: does the result depend on LEV's reconstruction (docs/method.md §6)?

The configured study named `recon` (config/recon.yaml) trains leviathan under each single change
of LEV's reconstruction defaults (`lev.seed_bias`, `lev.basis`, `lev.knot_scale`), as named
variants, beside default leviathan and tied, on the same seeds. One row per variant: its
validation loss and that loss minus default leviathan's and minus tied's, each paired by seed,
with 95% CIs over the seeds where there are 2 or more.
"""

from __future__ import annotations

from collections.abc import Sequence

from leviathan.cells import Cell
from leviathan.eval.results import VAL_LOSS
from leviathan.report.cellmap import ValueSpec
from leviathan.report.columns import compared, eval_sources, state_sources
from leviathan.report.context import (
    CONFIG_LABELS,
    Configurations,
    Context,
    ReportInputs,
    config_row,
    seeded,
)
from leviathan.report.table import Table

RECON_STUDY = "recon"  # the study the table reads (config/recon.yaml)
# the references each row is compared with, by column: default leviathan and tied
REFERENCES = {"diff_vs_leviathan": "leviathan", "diff_vs_tied": "tied"}
RECON_COLUMNS = {"params": "int", "val_loss": "loss"} | {col: "dloss" for col in REFERENCES}


def recon_groups(inp: ReportInputs) -> Configurations:
    """The configurations of the `recon` study ({} where the config has none)."""
    return inp.study(RECON_STUDY)


def paired_by_seed(ref: Sequence[Cell], cells: Sequence[Cell]) -> tuple[list[Cell], list[Cell]]:
    """The cells of `ref` and of `cells` that share a seed, in the same seed order (what a
    paired difference and its CI compare)."""
    by_seed = {c.seed: c for c in ref}
    both = sorted((c for c in cells if c.seed in by_seed), key=lambda c: c.seed)
    return [by_seed[c.seed] for c in both], both


def recon_table(ctx: Context, name: str) -> Table:
    groups = recon_groups(ctx.inp)
    t = Table(
        name,
        "Does the result depend on the reconstruction? Validation loss (the evaluation's) of "
        "leviathan (the study named recon, config/recon.yaml) under each single change of LEV's reconstruction defaults (lev.seed_bias, "
        "lev.basis, lev.knot_scale; the row's recipe names it), beside default leviathan and "
        "tied, same seeds; diff_vs_leviathan, diff_vs_tied: the row's val loss minus the "
        "reference's, paired by seed (nats; negative = lower loss, better)",
        CONFIG_LABELS,
        dict(RECON_COLUMNS),
    )
    if seeded(groups):
        t.with_ci("val_loss", *REFERENCES)
    for (scale, vocab, variant), cells in groups.items():
        row = config_row(ctx, t, scale, vocab, variant, cells)
        t.set(row, "params", ValueSpec("params", state_sources(cells[:1])))
        t.set(row, "val_loss", ValueSpec("mean", eval_sources(cells, "val", VAL_LOSS)))
        for col, reference in REFERENCES.items():
            ref = groups.get((scale, vocab, reference))
            if ref and variant != reference:
                a, b = paired_by_seed(ref, cells)
                if a:
                    t.set(row, col, compared("diff", a, b, "val", VAL_LOSS))
    return t
