"""`leviathan report ...` (tables, figures, the paper's own consistency) and `leviathan audit`."""

from __future__ import annotations

import argparse
import json
import sys

from leviathan import layout


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("report", help="reporting helpers")
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
    build.add_argument("--tables-dir", default=layout.TABLES_DIR)
    build.add_argument("--figures-dir", default=layout.FIGURES_DIR)
    build.add_argument("--no-figures", action="store_true")
    build.set_defaults(func=run_tables)

    audit = sub.add_parser(
        "audit",
        help="trace report numbers back to data and code, re-verifying every hash",
        description="Trace the numbers of a report table (CSV, Markdown or LaTeX) back through the "
        "evaluation outputs, checkpoints, token shards and raw corpus, re-verifying every recorded "
        "sha256 and git commit. Exit status 1 on any mismatch.",
    )
    audit.add_argument(
        "table",
        help="a table file, e.g. results/report/tables/main.csv, or an artifact with a "
        "manifest, e.g. an export directory results/export/micro/gpt2/leviathan/seed0",
    )
    which = audit.add_mutually_exclusive_group()
    which.add_argument(
        "--cell",
        metavar="ROW,COL",
        help="one number: its row id and column, e.g. micro/gpt2/leviathan,val_loss",
    )
    which.add_argument("--all", action="store_true", help="every number of the table (the default)")
    audit.add_argument(
        "--root", default=".", help="directory the recorded paths are relative to (default: .)"
    )
    audit.add_argument(
        "-q", "--quiet", action="store_true", help="print only failures and the summary"
    )
    audit.set_defaults(func=run_audit)


def run_paper_check(args: argparse.Namespace) -> int:
    from leviathan.report.paper import consistency_checks

    checks = consistency_checks()
    if args.json:
        print(json.dumps([c.to_dict() for c in checks], indent=2))
        return 0
    for c in checks:
        status = "ok  " if c.ok else "DIFF"
        print(f"[{status}] {c.what}: reported {c.reported:g}, recomputed {c.recomputed:.4g}")
    bad = sum(not c.ok for c in checks)
    print(f"{bad} of {len(checks)} reported figures do not follow from the others")
    return 0


def run_tables(args: argparse.Namespace) -> int:
    from leviathan.paper import repo_root
    from leviathan.report.build import write_report
    from leviathan.workflow.config import resolve
    from leviathan.workflow.grid import cells
    from leviathan.workflow.steps import sample_efficiency_groups

    config = resolve([args.config], root=repo_root())  # as the workflow does: defaults filled
    se = [
        layout.sample_efficiency_path(*key)
        for key in sample_efficiency_groups(cells(config["studies"]))
    ]
    for path in write_report(
        config, args.tables_dir, None if args.no_figures else args.figures_dir, se
    ):
        print(path)
    return 0


def run_audit(args: argparse.Namespace) -> int:
    from pathlib import Path

    from leviathan.report.audit import Auditor

    cell = None
    if args.cell:
        row, sep, col = args.cell.rpartition(",")
        if not sep or not row or not col:
            raise ValueError(
                f"--cell {args.cell!r}: expected ROW,COL (e.g. micro/gpt2/leviathan,val_loss)"
            )
        cell = (row, col)
    auditor = Auditor(Path(args.root).resolve())
    table_suffixes = tuple(f".{fmt}" for fmt in layout.TABLE_FORMATS)
    if cell is None and Path(args.table).suffix not in table_suffixes:  # not a table: an artifact
        auditor.audit_artifact(args.table)
    else:
        auditor.audit_table(args.table, cell)
    for f in auditor.findings:
        if not (args.quiet and f.ok):
            print(f.line())
    failures = auditor.failures
    cells = sum(1 for f in auditor.findings if f.depth == 0 and "[" in f.what)
    checked = len(auditor._sha)
    if failures:
        print(
            f"audit FAILED: {len(failures)} problem(s) ({checked} files hashed, {cells} number(s))",
            file=sys.stderr,
        )
        for f in failures:
            print(f"  {f.what}: {f.detail}", file=sys.stderr)
        return 1
    unverified = auditor.unverified
    note = f"; {len(unverified)} link(s) not verifiable here (n/v above)" if unverified else ""
    print(
        f"audit passed: {cells} number(s), {checked} files re-hashed, every recorded hash and commit matches{note}"
    )
    return 0
