"""`leviathan target`: the Snakemake target of one cell (`snakemake <target>` reruns just that
cell)."""

from __future__ import annotations

import argparse
from typing import Any

from leviathan import layout
from leviathan.cells import Cell
from leviathan.commands.config import configfile_arg
from leviathan.model.config import VARIANT_NAMES
from leviathan.scales import SCALES
from leviathan.vocab import get_vocab


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "target",
        help="print the workflow target of one cell (snakemake <target> reruns just that cell)",
        description="Print a cell's target path(s), checking that the config's studies have the "
        "cell. `snakemake --profile profiles/local $(leviathan target --scale micro --vocab gpt2 "
        "--variant leviathan)` trains (and with --eval, evaluates) that cell and nothing else it "
        "does not depend on; with --configfile F, give snakemake the same --configfile F.",
    )
    cell_arguments(p)
    p.add_argument(
        "--eval",
        action="store_true",
        help="the cell's evaluation outputs (those the config enables) instead of its checkpoint",
    )
    p.set_defaults(func=run)


def cell_arguments(p: argparse.ArgumentParser) -> None:
    """The options that name one cell of the config's studies (and the config)."""
    p.add_argument("--scale", required=True, choices=list(SCALES))
    p.add_argument("--vocab", required=True)
    p.add_argument(
        "--variant",
        required=True,
        help=f"{', '.join(VARIANT_NAMES)}, or a named variant or tagged cell of the config (lev_h4, "
        "leviathan@lr1e-3)",
    )
    p.add_argument("--seed", type=int, default=0)
    configfile_arg(p)


def config_cell(args: argparse.Namespace) -> tuple[dict[str, Any], Cell]:
    """The resolved config and the cell the options name; a cell of no study is refused."""
    from leviathan.cells import config_cells
    from leviathan.study.config import resolve

    config = resolve(args.configfile)
    results = layout.config_results_key(config)
    cell = Cell(args.scale, get_vocab(args.vocab).name, args.variant, args.seed, results)
    if cell not in config_cells(config):
        files = " ".join(args.configfile) or layout.DEFAULT_CONFIG
        raise ValueError(
            f"{cell.key} is in no study of {files} (studies: {', '.join(config['studies'])}), so "
            "no rule makes it: add it to a study, or give the config that has it"
            + (
                " (--configfile config/tiny.yaml: the tiny CPU demo)"
                if cell.scale == "tiny"
                else ""
            )
            + "; then pass the same --configfile to snakemake"
        )
    return config, cell


def run(args: argparse.Namespace) -> int:
    from leviathan.eval.config import enabled_evals

    config, cell = config_cell(args)
    if not args.eval:
        print(layout.final_marker(cell))
        return 0
    for evaluation in enabled_evals(config):
        print(layout.eval_output(cell, evaluation))
    return 0
