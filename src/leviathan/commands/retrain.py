"""`leviathan retrain`: set a finished cell's run aside, so that its next training starts afresh.

A rerun of a finished cell's train job completes at once (leviathan.train.finished), and
`snakemake -f` on its target resumes from its checkpoints; to train it again from step 0, the
old run is moved aside first (kept, never deleted). The command prints the cell's target, so
`snakemake --profile profiles/local $(leviathan retrain --scale micro --vocab gpt2 --variant
leviathan)` retrains it in one line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from leviathan import layout
from leviathan.commands.target import cell_arguments, config_cell


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "retrain",
        help="set a cell's run aside (checkpoints.stale-<n>/) and print its target: "
        "snakemake <target> then trains it from step 0",
        description="Move the cell's checkpoints (kept ones included) and metrics log aside to "
        "RUN_DIR/checkpoints.stale-<n>/ (kept, never deleted; a run training there is refused) "
        "and print the cell's checkpoint target. `snakemake --profile profiles/local "
        "$(leviathan retrain --scale micro --vocab gpt2 --variant leviathan)` retrains the cell "
        "from scratch; with --configfile F, give snakemake the same --configfile F.",
    )
    cell_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from leviathan.train.finished import set_aside_run

    _, cell = config_cell(args)
    run_dir = Path(layout.run_dir(cell))
    aside = set_aside_run(run_dir)
    said = f"set {run_dir} aside as {aside}" if aside else f"{run_dir} has no checkpoints"
    print(f"leviathan retrain: {said}; its next training starts at step 0", file=sys.stderr)
    print(layout.final_marker(cell))
    return 0
