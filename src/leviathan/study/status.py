"""Where every cell of a study stands (`leviathan status`), read from the run's own signals: its
lock (`leviathan.lock_probe`), its exit record (`leviathan.train.exit_record`), its final
checkpoint, metrics log and out-of-memory record, and the train job's log, all named by
`leviathan.layout`; with `rerun`, Snakemake's dry run (`leviathan.study.rerun`).

A cell's state:
  running      a process holds the run's lock (checked in this host's lock table); or the
               lock file names a process on another host, which this host cannot check, with
               no exit record from it and its lock file or metrics log written in the last
               `stale_s` seconds
  done         its final checkpoint exists
  will rerun   done, but Snakemake's dry run plans its train job (asked for only: `rerun`)
  failed       its exit record says an error, it ran out of memory (`out_of_memory.json`),
               or its job's log ends in an error (a `leviathan train: error:` line, a traceback)
  preempted    its exit record says a signal (SIGTERM/SIGUSR1) stopped it after a checkpoint
  stopped      stopped by Ctrl-C (its exit record), or ended without an exit record (killed
               outright: SIGKILL, a kill for memory, a lost node; or a lock file naming
               another host, silent for `stale_s`)
  not started  nothing of it exists yet
A preempted or stopped cell resumes from its newest checkpoint when rerun.

A cell whose metrics log cannot be read (a torn line, a record without its step) keeps its
state; its row shows `?` for what the log would have told, with the one-line error below it,
and every other cell is shown as usual.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leviathan import layout
from leviathan.cells import Cell
from leviathan.checkpoint.files import checkpoints_dir, final_dir, state_file

STALE_S = 900.0  # a run on another host silent this long (lock file, metrics log): not running
STATES = ("not started", "running", "stopped", "preempted", "failed", "done", "will rerun")


@dataclass(frozen=True)
class CellStatus:
    cell: Cell
    state: str
    step: int  # optimizer steps done (by the newest record)
    total: int  # the cell's max_steps
    loss: float | None  # the last training loss recorded
    eta_s: float | None  # while running: the time left at the run's mean step time
    error: str | None = None  # why its metrics log could not be read (step, loss, ETA unknown)
    note: str | None = None  # why it is in its state, where the state alone does not say


def _progress(metrics: Path) -> tuple[int, float | None, float | None]:
    """(step, last loss, seconds per step since the last start) from a metrics log; a log that
    cannot be read, or a record without its fields, is a one-line ValueError naming the file."""
    from leviathan.train.metrics_log import read_metrics

    if not metrics.is_file():
        return 0, None, None
    records = read_metrics(metrics)
    starts = [r for r in records if r.get("kind") == "start"]
    trains = [r for r in records if r.get("kind") == "train"]
    try:
        if not trains:
            return (int(starts[-1]["step"]) if starts else 0), None, None
        last = trains[-1]
        per_step = None
        if starts and int(last["step"]) > int(starts[-1]["step"]):
            elapsed = float(last["time"]) - float(starts[-1]["time"])
            per_step = elapsed / (int(last["step"]) - int(starts[-1]["step"]))
        return int(last["step"]), float(last["loss"]), per_step
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"{metrics}: a record without a readable step, time or loss ({exc!r}): not a log "
            "as the trainer writes it"
        ) from None


def _job_failed(log: Path) -> bool:
    """Whether a train job's log ends in an error rather than a stop by signal or a result;
    only the newest attempt counts (the log keeps every attempt: study/logs.py)."""
    from leviathan.study.logs import is_attempt_line

    if not log.is_file():
        return False
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("leviathan train: error:") or line.startswith("Traceback"):
            return True
        if line.startswith("leviathan train: stopped by signal") or line.startswith("{"):
            return False
        if is_attempt_line(line):  # the newest attempt ended without a word: killed outright
            return False
    return False


def _age(path: Path, now: float) -> float | None:
    """Seconds since `path` was last written; None where there is no such file."""
    try:
        return now - path.stat().st_mtime
    except FileNotFoundError:
        return None


def _elsewhere(run: str | Path, probe: Any, now: float, stale_s: float) -> tuple[str, str]:
    """The state of a run whose lock file names a process on another host, with no exit
    record from that process: running while it shows signs of life (its lock file written at
    its start, its metrics log since), else stopped."""
    from leviathan.train.telemetry import format_duration

    who = f"process {probe.pid} on {probe.host}"
    ages = [_age(layout.metrics_file(run), now), _age(layout.lock_file(Path(run), True), now)]
    age = min((a for a in ages if a is not None), default=None)
    if age is not None and age < stale_s:
        return (
            "running",
            f"{who} (not checked from this host; last written {format_duration(age)} ago)",
        )
    silent = f"silent for {format_duration(age)}" if age is not None else "silent"
    return "stopped", f"{who} holds the lock file, no exit record, {silent}: killed, or node lost?"


def _ended(run: str | Path, log: Path | None, record: Any) -> tuple[str, str | None]:
    """The state of a run no process is running: by its exit record, else its other files."""
    if record is not None and record["outcome"] in ("failed", "preempted", "stopped"):
        return record["outcome"], str(record.get("reason") or "")
    if layout.out_of_memory_file(run).is_file():
        return "failed", "out of memory (out_of_memory.json): lower train.<scale>.micro_batch"
    if record is not None and record["outcome"] == "finished":  # its final since removed
        return "stopped", "finished, but its final checkpoint is gone (removed for a rerun?)"
    if log is not None and _job_failed(log):
        return "failed", f"its job log ends in an error: {log}"
    if layout.metrics_file(run).is_file() or checkpoints_dir(run).is_dir():
        return (
            "stopped",
            "no exit record: killed outright (SIGKILL, a kill for memory, a lost node)",
        )
    return "not started", None


def run_state(
    run: str | Path, log: Path | None = None, now: float | None = None, stale_s: float = STALE_S
) -> tuple[str, str | None]:
    """(state, note) of a run directory, from its lock, final checkpoint and exit record (and
    its train job's `log`, where a workflow job ran it); `now` for a run on another host."""
    from leviathan.lock_probe import probe_lock
    from leviathan.train.exit_record import read_exit

    probe = probe_lock(run, folder=True)
    if probe.state == "held":
        return "running", None
    if state_file(final_dir(run)).is_file():
        return "done", None
    record = read_exit(run)
    if probe.state == "elsewhere":
        by_holder = record is not None and (record.get("pid"), record.get("host")) == (
            probe.pid,
            probe.host,
        )
        if not by_holder:
            return _elsewhere(run, probe, time.time() if now is None else now, stale_s)
    return _ended(run, log, record)


def cell_status(
    config: Mapping[str, Any],
    cell: Cell,
    now: float | None = None,
    stale_s: float = STALE_S,
    reruns: Mapping[str, str] | None = None,
) -> CellStatus:
    """The state of one cell of the configured studies (a log that cannot be read: its
    `error`, step, loss and ETA unknown). `reruns`: the final checkpoints Snakemake's dry run
    would rebuild, with its reason (`leviathan.study.rerun`); None: not asked."""
    from leviathan.study.resolve import cell_train_config

    check_stale_s(stale_s)
    run = layout.run_dir(cell)
    now = time.time() if now is None else now
    state, note = run_state(run, Path(layout.cell_log("train", cell)), now, stale_s)
    marker = layout.final_marker(cell)
    if state == "done" and reruns is not None and marker in reruns:
        state, note = "will rerun", f"Snakemake would retrain it: {reruns[marker]}"
    total = cell_train_config(config, cell).max_steps
    try:
        step, loss, per_step = _progress(layout.metrics_file(run))
    except (OSError, ValueError) as exc:
        error = " ".join(str(exc).split())
        return CellStatus(cell, state, 0, total, None, None, error, note)
    eta = (total - step) * per_step if state == "running" and per_step is not None else None
    return CellStatus(cell, state, step, total, loss, eta, None, note)


def check_stale_s(stale_s: float) -> None:
    """Refuse a silence that is not a positive number of seconds, in one line."""
    if not (math.isfinite(stale_s) and stale_s > 0):
        raise ValueError(
            f"--stale-after {stale_s}: give a positive number of seconds (default {STALE_S:g}): "
            "a run on another host silent this long (lock file, metrics log) is no longer running"
        )


def render_status(rows: Sequence[CellStatus]) -> str:
    """A table of the cells' states, with a count of each state below it."""
    from leviathan.train.telemetry import format_duration

    header = ("cell", "state", "step", "loss", "ETA")
    body = [
        (
            r.cell.key,
            r.state,
            f"{'?' if r.error else r.step}/{r.total}",
            "?" if r.error else f"{r.loss:.3f}" if r.loss is not None else "-",
            "?" if r.error else format_duration(r.eta_s) if r.eta_s is not None else "-",
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = []
    for row, status in zip([header, *body], [None, *rows], strict=True):
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        if status is not None and status.note:
            lines.append(f"  {status.state}: {status.note}")
        if status is not None and status.error:
            lines.append(f"  error: {status.error}")
    counts = {s: sum(r.state == s for r in rows) for s in STATES}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no cells"
    unread = sum(r.error is not None for r in rows)
    lines.append(summary + (f"; {unread} with a metrics log that cannot be read" if unread else ""))
    return "\n".join(lines)
