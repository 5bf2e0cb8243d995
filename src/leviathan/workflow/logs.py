"""A rule's log: every workflow script sends its output to the rule's `log:` file
(`snakemake.log[0]`), so a job that fails on a cluster node leaves its error where Snakemake's
error message points, not in a scheduler's output file nobody reads."""

from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def send_output_to_log(path: str | os.PathLike[str]) -> None:
    """From here on, this process's output goes to the file `path` (truncated): stdout and
    stderr at the file-descriptor level (so child processes, C libraries and a program the
    script `exec`s write there too), Python's logging (INFO and up) and the traceback of an
    uncaught error (Python prints it on stderr)."""
    log = Path(path)
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, sys.stdout.fileno())
    os.dup2(fd, sys.stderr.fileno())
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):  # each line reaches the file before a kill can lose it
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT, force=True)


def rule_log(sm: Any) -> None:
    """`send_output_to_log(sm.log[0])` for a rule script's `snakemake` object, then one line
    naming the job: its rule, wildcards, host and SLURM job id (if any)."""
    send_output_to_log(sm.log[0])
    wildcards = ", ".join(f"{k}={v}" for k, v in sm.wildcards.items())
    job = os.environ.get("SLURM_JOB_ID")
    logging.getLogger("leviathan.workflow").info(
        "rule %s%s on %s%s",
        sm.rule,
        f" ({wildcards})" if wildcards else "",
        socket.gethostname(),
        f", SLURM job {job}" if job else "",
    )
