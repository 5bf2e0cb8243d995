"""Where every cell of a study stands (`leviathan status`), read from its files alone: the run
directory (final checkpoint, step checkpoints, metrics log, out-of-memory record) and the
train job's log, all named by `leviathan.layout`. Nothing is asked of a scheduler.

A cell's state:
  done         its final checkpoint exists
  running      its metrics log was written in the last `stale_s` seconds
  failed       its job's log ends in an error (a `leviathan train: error:` line or a
               traceback), or it ran out of memory (`out_of_memory.json`)
  preempted    stopped before the end without an error (a signal, a job that vanished):
               it resumes from its newest checkpoint
  not started  nothing of it exists yet

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

STALE_S = 900.0  # a metrics log silent this long: its job is no longer running
STATES = ("not started", "running", "preempted", "done", "failed")


@dataclass(frozen=True)
class CellStatus:
    cell: Cell
    state: str
    step: int  # optimizer steps done (by the newest record)
    total: int  # the cell's max_steps
    loss: float | None  # the last training loss recorded
    eta_s: float | None  # while running: the time left at the run's mean step time
    error: str | None = None  # why its metrics log could not be read (step, loss, ETA unknown)


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
    """Whether a train job's log ends in an error rather than a stop by signal or a result."""
    if not log.is_file():
        return False
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("leviathan train: error:") or line.startswith("Traceback"):
            return True
        if line.startswith("leviathan train: stopped by signal") or line.startswith("{"):
            return False
    return False


def _state(run: str, log: Path, now: float, stale_s: float) -> str:
    if (layout.final_dir(run) / layout.STATE).is_file():
        return "done"
    metrics = layout.metrics_file(run)
    if metrics.is_file() and now - metrics.stat().st_mtime < stale_s:
        return "running"
    if layout.out_of_memory_file(run).is_file() or _job_failed(log):
        return "failed"
    if metrics.is_file() or layout.checkpoints_dir(run).is_dir():
        return "preempted"
    return "not started"


def cell_status(
    config: Mapping[str, Any], cell: Cell, now: float | None = None, stale_s: float = STALE_S
) -> CellStatus:
    """The state of one cell of the configured studies (a log that cannot be read: its
    `error`, step, loss and ETA unknown)."""
    from leviathan.workflow.resolve import cell_train_config

    check_stale_s(stale_s)
    run = layout.run_dir(cell)
    now = time.time() if now is None else now
    state = _state(run, Path(layout.cell_log("train", cell)), now, stale_s)
    total = cell_train_config(config, cell).max_steps
    try:
        step, loss, per_step = _progress(layout.metrics_file(run))
    except (OSError, ValueError) as exc:
        return CellStatus(cell, state, 0, total, None, None, " ".join(str(exc).split()))
    eta = (total - step) * per_step if state == "running" and per_step is not None else None
    return CellStatus(cell, state, step, total, loss, eta)


def check_stale_s(stale_s: float) -> None:
    """Refuse a silence that is not a positive number of seconds, in one line."""
    if not (math.isfinite(stale_s) and stale_s > 0):
        raise ValueError(
            f"--stale-after {stale_s}: give a positive number of seconds (default {STALE_S:g}): "
            "a metrics log silent this long is no longer running"
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
        if status is not None and status.error:
            lines.append(f"  error: {status.error}")
    counts = {s: sum(r.state == s for r in rows) for s in STATES}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no cells"
    unread = sum(r.error is not None for r in rows)
    lines.append(summary + (f"; {unread} with a metrics log that cannot be read" if unread else ""))
    return "\n".join(lines)
