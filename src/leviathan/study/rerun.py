"""Which cells Snakemake would retrain, from its own dry run (`leviathan status --rerun`).

A finished cell can still be retrained: Snakemake reruns a train job whose shards were rebuilt
or touched, whose params changed, or whose output it was asked to force. Only Snakemake knows,
so this asks it: `snakemake all_train --summary` in the workflow's directory (the dry run's
plan as a table, one row per output: its rule, status and plan). It builds the whole DAG,
seconds on the default study and longer on a large one, so `leviathan status` asks only when
told to.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

TARGET = "all_train"  # every cell's train job and what it needs
PENDING = "update pending"  # the summary's plan for an output the dry run would rebuild
# the summary's status "ok" beside that plan: the output is whole, the reason lies elsewhere
UPSTREAM = "a job it depends on reruns first (or another reason: `snakemake -n` names it)"


def parse_summary(text: str) -> dict[str, str]:
    """The train outputs a `snakemake --summary` table plans to rebuild, with the status that
    says why (e.g. "updated input files", "params changed"), by output path."""
    rows = [line.split("\t") for line in text.splitlines()]
    header = next((i for i, row in enumerate(rows) if row[0] == "output_file"), None)
    if header is None:
        raise ValueError("snakemake --summary printed no table (no output_file header)")
    names = rows[header]
    col = {name: names.index(name) for name in ("output_file", "rule", "status", "plan")}
    return {
        row[col["output_file"]]: UPSTREAM if row[col["status"]] == "ok" else row[col["status"]]
        for row in rows[header + 1 :]
        if len(row) == len(names) and row[col["rule"]] == "train" and row[col["plan"]] == PENDING
    }


def planned_retraining(configfiles: Sequence[str] = ()) -> dict[str, str]:
    """The final checkpoints (`leviathan.layout.final_marker`) whose train job Snakemake's dry
    run in this directory plans, with its reason; a dry run that fails is one line."""
    files = ["--configfile", *configfiles] if configfiles else []
    argv = [sys.executable, "-m", "snakemake", TARGET, "--summary", *files]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if line.strip()]
        raise ValueError(
            f"snakemake --summary failed ({said[-1] if said else f'status {done.returncode}'}): "
            "fix what it says (`snakemake -n` shows it in full), or leave out --rerun"
        )
    return parse_summary(done.stdout)
