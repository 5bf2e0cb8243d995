"""`leviathan audit`: trace report numbers back to data and code, re-verifying every hash."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    audit = sub.add_parser(
        "audit",
        help="trace report numbers back to data and code, re-verifying every hash",
        description="Trace the numbers of a report table (CSV, Markdown, LaTeX, or DVC's metrics.json) back through the "
        "evaluation outputs, checkpoints, token shards and raw corpus, re-verifying every recorded "
        "sha256 and git commit. Exit status 1 on any mismatch.",
    )
    audit.add_argument(
        "table",
        help="a table file (CSV, Markdown, LaTeX or the metrics JSON), e.g. "
        "results/report/embedded/tables/main.csv, or an artifact with a "
        "manifest, e.g. an export directory results/export/embedded/micro/gpt2/leviathan/seed0",
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
    what = auditor.audit(args.table, cell)
    for f in auditor.findings:
        if not (args.quiet and f.ok):
            print(f.line())
    failures = auditor.failures
    # a number's verdict is "<table> [<row>, <column>]" at depth 0
    numbers = sum(1 for f in auditor.findings if f.depth == 0 and ", " in f.what and "[" in f.what)
    checked = len(auditor._sha)
    if failures:
        print(
            f"audit FAILED: {len(failures)} problem(s) ({checked} files hashed, {numbers} number(s))",
            file=sys.stderr,
        )
        for f in failures:
            print(f"  {f.what}: {f.detail}", file=sys.stderr)
        return 1
    unverified = auditor.unverified
    note = f"; {len(unverified)} link(s) not verifiable here (n/v above)" if unverified else ""
    if what == "artifact":
        checked_what = f"{args.table} (an artifact, not a table: no numbers to trace)"
    elif numbers:
        checked_what = f"{numbers} number(s) of {args.table} recomputed from their sources"
    else:
        checked_what = f"{args.table} has no number with a recorded source (its cells are empty)"
    print(
        f"audit passed: {checked_what}; {checked} files re-hashed, every recorded hash and "
        f"commit matches{note}"
    )
    return 0
