"""`leviathan audit`: trace report numbers back to data and code, re-verifying every hash."""

from __future__ import annotations

import argparse
import sys

from leviathan import layout


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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
