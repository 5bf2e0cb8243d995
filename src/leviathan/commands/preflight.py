"""`leviathan preflight`: a SLURM cluster checked against the profile and the study before the
queue (leviathan.study.preflight): one line per check, exit status 1 on any failure."""

from __future__ import annotations

import argparse
import sys

from leviathan.commands.config import configfile_arg


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "preflight",
        help="check a SLURM cluster against the profile and the study before queueing it",
        description="Account and partition (sacctmgr, sinfo) as the profile's default-resources "
        "name them, GPU models as the site's gres spells them, free disk against the plan, and "
        "on a compute node (one srun): the Hub reachable or the evaluation datasets the data "
        "step fetched (one line per missing one), torch and CUDA. One "
        "line per check with the fix; exit status 1 on any FAIL. Run it on the login node in "
        "the workflow's directory.",
    )
    p.add_argument(
        "--profile", required=True, metavar="PATH", help="the SLURM profile (profiles/slurm)"
    )
    configfile_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from leviathan.cost.disk import study_disk
    from leviathan.study.config import resolve
    from leviathan.study.preflight import preflight

    config = resolve(args.configfile)
    checks = preflight(
        args.profile,
        config,
        study_disk(config).total,
        python=sys.executable,
        config_files=args.configfile,
    )
    for check in checks:
        print(check.line())
    failed = sum(not c.ok for c in checks)
    print(f"preflight: {'passed' if not failed else f'{failed} check(s) failed'}")
    return 1 if failed else 0
