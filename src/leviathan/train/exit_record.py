"""A run's exit record (`RUN_DIR/exit.json`, `leviathan.layout.exit_file`): how its last
attempt ended, written as it ends by the process holding the run's lock.

  outcome     finished | preempted (SIGTERM/SIGUSR1: a checkpoint written, a rerun resumes)
              | stopped (Ctrl-C) | failed (an error)
  reason      one line: the signal and the checkpoint to resume from, or the error
  pid, host   the process, as the run's lock file names it (`leviathan.lock`)
  started, ended

An attempt removes the record of the one before as it starts, so a run killed outright
(SIGKILL, a kill for memory, a lost node), which cannot write one, leaves none. `leviathan
status` reads it (`read_exit`) without importing torch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
from collections.abc import Iterator
from typing import Any

from leviathan import layout
from leviathan.io import read_json, write_json
from leviathan.provenance import utc_now

log = logging.getLogger("leviathan.train")
OUTCOMES = ("finished", "preempted", "stopped", "failed")


def _outcome(exc: BaseException) -> tuple[str, str]:
    """(outcome, reason) of an attempt that ended by `exc`."""
    from leviathan.train.preemption import Preempted

    text = " ".join(str(exc).split())
    if isinstance(exc, Preempted):
        return ("stopped" if exc.signum == signal.SIGINT else "preempted"), text
    if isinstance(exc, KeyboardInterrupt):
        return "stopped", "stopped at once by Ctrl-C, without a checkpoint of the last steps"
    return "failed", text or type(exc).__name__


def _write(run_dir: str | os.PathLike[str], outcome: str, reason: str, started: str) -> None:
    record = {
        "outcome": outcome,
        "reason": reason,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": started,
        "ended": utc_now().isoformat(timespec="seconds"),
    }
    write_json(layout.exit_file(run_dir), record)


@contextlib.contextmanager
def record_exit(run_dir: str | os.PathLike[str]) -> Iterator[None]:
    """Record how the block ends (a return: finished; a signal or an error: what `_outcome`
    says), after removing the previous attempt's record. Hold the run's lock around it."""
    layout.exit_file(run_dir).unlink(missing_ok=True)
    started = utc_now().isoformat(timespec="seconds")
    try:
        yield
    except BaseException as exc:
        try:
            _write(run_dir, *_outcome(exc), started)
        except Exception as err:  # the attempt's own error is the one to raise
            log.warning("%s: exit record not written: %s", layout.exit_file(run_dir), err)
        raise
    _write(run_dir, "finished", "trained to its last step", started)


def amend_reason(run_dir: str | os.PathLike[str], reason: str) -> None:
    """Put `reason` in the record this process wrote as its attempt ended (a command that
    knows more than the trainer did: the micro-batch that fits, after an out-of-memory
    error). A record of another process, or none, is left as it is."""
    record = read_exit(run_dir)
    if record is not None and record.get("pid") == os.getpid():
        write_json(layout.exit_file(run_dir), {**record, "reason": " ".join(reason.split())})


def read_exit(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The run's exit record; None where there is none, or one that is not a record of ours
    (it counts as none: the run's other files tell its state)."""
    path = layout.exit_file(run_dir)
    if not path.is_file():
        return None
    try:
        record = read_json(path)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("outcome") not in OUTCOMES:
        return None
    return record
