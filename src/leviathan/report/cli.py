"""`leviathan report paper-check`: the paper's own figures, checked against each other."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("report", help="reporting helpers")
    rsub = p.add_subparsers(dest="report_command", required=True, metavar="COMMAND")
    check = rsub.add_parser(
        "paper-check",
        help="check the paper's reported figures against each other (config/paper_reported.yaml)",
    )
    check.add_argument("--json", action="store_true")
    check.set_defaults(func=run_paper_check)


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
