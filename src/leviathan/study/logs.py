"""A rule's log: every workflow script sends its output to the rule's `log:` file
(`snakemake.log[0]`), so a job that fails on a cluster node leaves its error where Snakemake's
error message points, not in a scheduler's output file nobody reads.

A training job is retried (preemption, time limit) and rerun, and Snakemake removes its log
before each attempt. So its output is appended to the cell's history (`layout.attempts_log`),
each attempt opened by a line "attempt N of rule train ...", and the log Snakemake names is
made a second name (a hard link) of that history: it shows every attempt. The attempt number
reaches the trainer (`ATTEMPT_ENV`), whose first line says where the attempt resumed from."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

from leviathan import layout

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
ATTEMPTED_RULES = ("train",)  # rules whose log keeps every attempt (their jobs resume)
ATTEMPT_ENV = "LEVIATHAN_ATTEMPT"  # the attempt number, for the program the job runs
LOGGER = "leviathan.study"  # the name on a job's first line
_ATTEMPT_LINE = re.compile(re.escape(LOGGER) + r": attempt (\d+) of rule ")


def is_attempt_line(line: str) -> bool:
    """Whether `line` opens an attempt in a job log that keeps every attempt."""
    return _ATTEMPT_LINE.search(line) is not None


def send_output_to_log(path: str | os.PathLike[str], append: bool = False) -> None:
    """From here on, this process's output goes to the file `path` (truncated, or `append`ed
    to): stdout and stderr at the file-descriptor level (so child processes, C libraries and a
    program the script `exec`s write there too), Python's logging (INFO and up) and the
    traceback of an uncaught error (Python prints it on stderr)."""
    log = Path(path)
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    mode = os.O_APPEND if append else os.O_TRUNC
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | mode, 0o644)
    os.dup2(fd, sys.stdout.fileno())
    os.dup2(fd, sys.stderr.fileno())
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):  # each line reaches the file before a kill can lose it
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT, force=True)


def rule_log(sm: Any) -> None:
    """`send_output_to_log(sm.log[0])` for a rule script's `snakemake` object (for a rule of
    ATTEMPTED_RULES: appended to the log's history, `attempt_log`), then one line naming the
    job: its attempt, rule, wildcards, host and SLURM job id (if any)."""
    attempt = None
    if sm.rule in ATTEMPTED_RULES:
        attempt = attempt_log(sm.log[0])
    else:
        send_output_to_log(sm.log[0])
    wildcards = ", ".join(f"{k}={v}" for k, v in sm.wildcards.items())
    job = os.environ.get("SLURM_JOB_ID")
    logging.getLogger(LOGGER).info(
        "%srule %s%s on %s%s",
        f"attempt {attempt} of " if attempt else "",
        sm.rule,
        f" ({wildcards})" if wildcards else "",
        socket.gethostname(),
        f", SLURM job {job}" if job else "",
    )


def attempt_log(path: str | os.PathLike[str]) -> int:
    """Send this process's output to the end of the history of the log `path`, make `path` a
    second name of it, and return this attempt's number (one more than the history's last,
    also set in ATTEMPT_ENV for the program the job runs)."""
    log, history = Path(path), layout.attempts_log(path)
    attempt = last_attempt(history) + 1
    send_output_to_log(history, append=True)
    with contextlib.suppress(FileNotFoundError):
        log.unlink()  # Snakemake removed it before the job; a script run by hand may not have
    try:
        os.link(history, log)
    except OSError:  # a file system without hard links
        log.symlink_to(history.name)
    os.environ[ATTEMPT_ENV] = str(attempt)
    return attempt


def last_attempt(history: str | os.PathLike[str]) -> int:
    """The number of the last attempt a log's history holds (0: none)."""
    last = 0
    with contextlib.suppress(FileNotFoundError), open(history, errors="replace") as fh:
        for line in fh:
            if (found := _ATTEMPT_LINE.search(line)) is not None:
                last = max(last, int(found.group(1)))
    return last


def start_line(step: int, resumed_from: Path | None) -> str | None:
    """The trainer's first line: where this attempt of a run starts, led by its attempt number
    where a workflow job's log counts them (ATTEMPT_ENV). None for a run started by hand from
    step 0: nothing to say (its errors stay the one line they are)."""
    attempt = os.environ.get(ATTEMPT_ENV)
    if resumed_from is None and not attempt:
        return None
    where = (
        f"resumed from step {step} ({resumed_from})"
        if resumed_from is not None
        else f"started at step {step} (no checkpoint to resume from)"
    )
    return f"attempt {attempt}, {where}" if attempt else where
