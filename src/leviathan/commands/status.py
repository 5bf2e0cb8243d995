"""`leviathan status`: where every cell of the configured studies stands (state, step, last
loss, ETA), read from the run directories and job logs (leviathan.workflow.status)."""

from __future__ import annotations

import argparse

from leviathan.commands.config import configfile_arg


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "status",
        help="a table of every cell of the study: state, step, loss, ETA",
        description="Every cell of the configured studies (as `snakemake [--configfile F]` "
        "resolves them): not started, running, preempted, done or failed; steps done of its "
        "total, the last training loss, and while running the time left. Read from the run "
        "directories, metrics logs and train job logs; run it in the workflow's directory.",
    )
    configfile_arg(p)
    p.add_argument(
        "--stale-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="a metrics log silent this long is no longer running (default 900; > 0)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from leviathan.cells import config_cells
    from leviathan.workflow.config import resolve
    from leviathan.workflow.status import STALE_S, cell_status, check_stale_s, render_status

    stale = args.stale_after if args.stale_after is not None else STALE_S
    check_stale_s(stale)
    config = resolve(args.configfile)
    rows = [cell_status(config, cell, stale_s=stale) for cell in config_cells(config)]
    print(render_status(rows))
    from leviathan.workflow.recalibrate import status_lines

    for line in status_lines(config):
        print(line)
    return 0
