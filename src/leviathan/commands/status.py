"""`leviathan status`: where every cell of the configured studies stands (state, step, last
loss, ETA), read from the run directories' locks, exit records and logs
(leviathan.study.status); with --rerun, also Snakemake's dry run (leviathan.study.rerun)."""

from __future__ import annotations

import argparse

from leviathan.commands.config import configfile_arg


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "status",
        help="a table of every cell of the study: state, step, loss, ETA",
        description="Every cell of the configured studies (as `snakemake [--configfile F]` "
        "resolves them): not started, running, stopped, preempted, failed, done (or, with "
        "--rerun, will rerun); steps done of its total, the last training loss, and while "
        "running the time left. Running means a process holds the run's lock; how a run ended "
        "comes from its exit record. Run it in the workflow's directory.",
    )
    configfile_arg(p)
    p.add_argument(
        "--rerun",
        action="store_true",
        help="also ask Snakemake's dry run (`snakemake all_train --summary`) which done cells "
        "it would retrain: they show `will rerun` (seconds on a small study, longer on a "
        "large one)",
    )
    p.add_argument(
        "--stale-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="a run whose lock file names another host, which cannot be checked from here, "
        "counts as stopped once its lock file and metrics log are this old (default 900; > 0)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from leviathan.cells import config_cells
    from leviathan.study.config import resolve
    from leviathan.study.rerun import planned_retraining
    from leviathan.study.status import STALE_S, cell_status, check_stale_s, render_status

    stale = args.stale_after if args.stale_after is not None else STALE_S
    check_stale_s(stale)
    config = resolve(args.configfile)
    reruns = planned_retraining(args.configfile) if args.rerun else None
    rows = [
        cell_status(config, cell, stale_s=stale, reruns=reruns) for cell in config_cells(config)
    ]
    print(render_status(rows))
    from leviathan.cost.recalibrate import status_lines

    for line in status_lines(config):
        print(line)
    return 0
