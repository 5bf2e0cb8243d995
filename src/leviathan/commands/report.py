"""`leviathan report ...`: the tables and figures of a workflow config, the study's HTML report, the
paper's own consistency."""

from __future__ import annotations

import argparse
import json

from leviathan import layout
from leviathan.commands.config import configfile_arg


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("report", help="the report tables and figures; the paper's own consistency")
    rsub = p.add_subparsers(dest="report_command", required=True, metavar="COMMAND")
    check = rsub.add_parser(
        "paper-check",
        help=f"check the paper's reported figures against each other ({layout.PAPER_REPORTED})",
    )
    check.add_argument("--json", action="store_true")
    check.set_defaults(func=run_paper_check)

    build = rsub.add_parser(
        "tables", help="write the report tables (and figures) of a workflow config"
    )
    build.add_argument(
        "--config", default=layout.DEFAULT_CONFIG, help="workflow config (default: %(default)s)"
    )
    build.add_argument(
        "--tables-dir", help="default: results/report/<study>/tables (leviathan.layout)"
    )
    build.add_argument(
        "--figures-dir", help="default: results/report/<study>/figures (leviathan.layout)"
    )
    build.add_argument("--no-figures", action="store_true")
    build.set_defaults(func=run_tables)

    html = rsub.add_parser(
        "html",
        help="the study's HTML report (Snakemake's --report), the study's status on its first page",
        description="Build the HTML report of a finished run with Snakemake's own --report: tables, "
        "figures, captions, run statistics and provenance in one file, the study's status "
        "(what the run shows and what not) on its first page. Run it where you ran snakemake.",
    )
    configfile_arg(html)
    html.add_argument(
        "--out", help="default: results/report/<study>/report.html (leviathan.layout)"
    )
    html.set_defaults(func=run_html)


def run_paper_check(args: argparse.Namespace) -> int:
    from leviathan.report.paper_consistency import consistency_checks

    checks = consistency_checks()
    if args.json:
        print(json.dumps([c.to_dict() for c in checks], indent=2))
        return 0
    for c in checks:
        status = "ok  " if c.ok else "DIFF"
        print(
            f"[{status}] {c.what}: reported {c.shown(c.reported)}, recomputed {c.shown(c.recomputed, '.4g')}"
        )
    bad = sum(not c.ok for c in checks)
    print(f"{bad} of {len(checks)} reported figures do not follow from the others")
    return 0


def run_tables(args: argparse.Namespace) -> int:
    from leviathan.cells import config_cells
    from leviathan.layout import repo_root
    from leviathan.report.build import write_report
    from leviathan.study.actions import sample_efficiency_groups
    from leviathan.study.config import resolve

    config = resolve([args.config], root=repo_root())  # as the workflow does: defaults filled
    results = layout.config_results_key(config)
    se = [
        layout.sample_efficiency_path(results, *key)
        for key in sample_efficiency_groups(config_cells(config))
    ]
    tables = args.tables_dir or layout.tables_dir(results)
    figures = args.figures_dir or layout.figures_dir(results)
    for path in write_report(config, tables, None if args.no_figures else figures, se):
        print(path)
    return 0


def run_html(args: argparse.Namespace) -> int:
    import subprocess
    import sys

    from leviathan.study.config import resolve

    out = args.out or layout.html_report(layout.config_results_key(resolve(args.configfile)))
    files = ["--configfile", *args.configfile] if args.configfile else []
    # the target first: --configfile takes every word after it
    cmd = [sys.executable, "-m", "snakemake", "all", "--report", out, *files]
    done = subprocess.run(cmd, check=False)
    if done.returncode == 0:
        print(f"HTML report: {out}")
    return done.returncode
