"""The plan recalibrated from the first steps: once a cell has run, its metrics log's step
times replace the roofline's prediction for every cell on that device.

A pace is one cell's measured step time: the median `step_s` of the train records of its
newest attempt (the records after its last `start` record, whose `device` and `world_size`
say what it ran on), the attempt's first record left out where it has others (it holds the
compile). The pace gives the device's FLOPs per second per device, from the plan's own counts
of the cell (`CellPlan.train_flops / steps`: the project's FLOP counter). A cell takes the pace
of its own log where it has one; else that of a cell of its scale on the same device, else of
any scale on that device; its step time is then its own FLOPs per step over that rate and its
GPUs (the counted FLOPs ratio). A cell with no measurement on its device keeps the prediction.

Each job's wall time at its pace is held against its time limit x (the profile's retries +
1): a job that cannot finish there is one WARNING line. `leviathan config show` and
`leviathan status` print the figures beside the plan's.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leviathan import layout
from leviathan.cells import Cell, config_cells
from leviathan.cost.budget import attempts_needed, job_limit_h, profile_retries, train_wall_h
from leviathan.cost.plan import CellPlan, study_plans
from leviathan.gpus import gpu_model
from leviathan.train.metrics_log import read_metrics


@dataclass(frozen=True)
class Pace:
    """A cell's measured pace (its newest attempt)."""

    cell: Cell
    device: str  # the device as its log names it ("cpu", "NVIDIA H100 80GB HBM3")
    devices: int  # the attempt's world size
    step_s: float  # median seconds per optimizer step
    step: int  # the newest step recorded
    flops_per_step: float  # the plan's count for the cell

    @property
    def flops_per_device_s(self) -> float:
        return self.flops_per_step / (self.step_s * max(1, self.devices))


@dataclass(frozen=True)
class Recalibrated:
    """A cell's training job: the prediction and, where a pace applies, the figures at it."""

    plan: CellPlan
    predicted_wall_h: float | None  # the plan's (None: no GPU prediction)
    step_s: float | None  # at the pace (None: no measurement on its device)
    source: str  # "measured" (its own log), "<cell> x FLOPs ratio", or "" (none)
    done_steps: int  # steps already trained (its log's newest record; all once final)
    limit_h: float
    retries: int

    @property
    def wall_h(self) -> float | None:
        """The whole job's wall hours at the pace."""
        return None if self.step_s is None else self.plan.steps * self.step_s / 3600

    @property
    def remaining_h(self) -> float | None:
        """Wall hours left: the steps not trained at the pace, else at the prediction."""
        left = max(0, self.plan.steps - self.done_steps)
        if self.step_s is not None:
            return left * self.step_s / 3600
        if self.predicted_wall_h is None:
            return None
        return self.predicted_wall_h * left / max(1, self.plan.steps)

    @property
    def remaining_gpu_hours(self) -> float | None:
        rem = self.remaining_h
        return None if rem is None or not self.plan.gpus else rem * self.plan.gpus

    @property
    def attempts(self) -> int | None:

        return None if self.wall_h is None else attempts_needed(self.wall_h, self.limit_h)

    def warning(self) -> str | None:
        """One line where the unfinished job at its pace needs more attempts than the profile
        allows."""
        if self.done_steps >= self.plan.steps or self.wall_h is None or self.attempts is None:
            return None
        if self.attempts <= self.retries + 1:
            return None
        key = f"resources.{self.plan.cell.scale}.runtime"
        return (
            f"WARNING: {self.plan.cell.key} at its measured pace ({self.step_s:.3g} s/step, "
            f"{self.source}) needs {self.wall_h:,.1f} h, more than its {self.limit_h:,.1f} h "
            f"limit x {self.retries + 1} attempts ({key} and the profile's retries, "
            f"{self.retries}): raise {key} or the retries, or the cell stops unfinished"
        )


def device_key(device: str | None) -> str:
    """The GPU model a device name or a config's gpu_model is (leviathan.gpus), else itself:
    "cpu" for a CPU run or a cell without GPUs."""

    if not device or device == "cpu":
        return "cpu"
    model = gpu_model(device)
    return model.name if model else str(device)


def measured_pace(plan: CellPlan) -> Pace | None:
    """The cell's pace from its metrics log, read through train/metrics_log.py's reader (None:
    no log, no train record with its step time yet, or a log that cannot be read, which
    `leviathan status` shows with its error)."""

    path = layout.metrics_file(layout.run_dir(plan.cell))
    try:
        return _pace(plan, read_metrics(path)) if path.is_file() else None
    except (OSError, KeyError, TypeError, ValueError):
        return None


def _pace(plan: CellPlan, records: list[dict[str, Any]]) -> Pace | None:
    starts = [i for i, r in enumerate(records) if r.get("kind") == "start"]
    if not starts:
        return None
    start = records[starts[-1]]
    trains = [r for r in records[starts[-1] :] if r.get("kind") == "train" and "step_s" in r]
    if not trains:
        return None
    timed = trains[1:] if len(trains) > 1 else trains
    return Pace(
        cell=plan.cell,
        device=str(start.get("device") or "cpu"),
        devices=int(start.get("world_size") or 1),
        step_s=statistics.median(float(r["step_s"]) for r in timed),
        step=int(trains[-1]["step"]),
        flops_per_step=plan.train_flops / max(1, plan.steps),
    )


def _plan_device(plan: CellPlan) -> str:
    return device_key(plan.gpu_model) if plan.gpus else "cpu"


def _pace_for(plan: CellPlan, paces: Mapping[Cell, Pace]) -> Pace | None:
    """The pace a cell takes: its own; else a cell's of its scale on its device; else any
    scale's on its device (the one with the most steps recorded)."""
    if plan.cell in paces:
        return paces[plan.cell]
    same = [p for p in paces.values() if device_key(p.device) == _plan_device(plan)]
    same.sort(key=lambda p: (p.cell.scale == plan.cell.scale, p.step), reverse=True)
    return same[0] if same else None


def recalibrate(
    config: Mapping[str, Any], plans: Sequence[CellPlan], retries: int | None = None
) -> list[Recalibrated]:
    """Every cell's training job at the pace it takes (empty where no cell has run yet);
    `retries`: the shipped SLURM profile's where not given."""

    paces = {p.cell: pace for p in plans if (pace := measured_pace(p)) is not None}
    if not paces:
        return []
    retries = profile_retries() if retries is None else retries
    out = []
    for plan in plans:
        pace = _pace_for(plan, paces)
        step_s, source = None, ""
        if pace is not None and pace.cell == plan.cell:
            step_s, source = pace.step_s, "measured"
        elif pace is not None:
            flops = plan.train_flops / max(1, plan.steps)
            step_s = flops / (pace.flops_per_device_s * max(1, plan.gpus))
            source = f"{pace.cell.key} x FLOPs ratio"
        done = plan.steps if _final(plan.cell) else (pace.step if source == "measured" else 0)
        out.append(
            Recalibrated(
                plan,
                train_wall_h(plan),
                step_s,
                source,
                done,
                job_limit_h(config, plan.cell.scale),
                retries,
            )
        )
    return out


def _final(cell: Cell) -> bool:
    return Path(layout.final_marker(cell)).is_file()


def _h(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def render_recalibration(rows: Sequence[Recalibrated]) -> list[str]:
    """Each job's wall time and remaining GPU-hours at its pace beside the prediction, the
    study's totals, and a WARNING per job that cannot finish; nothing where no cell has run."""
    if not rows:
        return []
    lines = [
        "recalibrated from the measured step times (metrics logs; other cells by the counted "
        "FLOPs ratio on the same device):",
        f"  {'cell':<40} {'wall h plan':>11} {'wall h now':>10} {'left h':>8} "
        f"{'GPU-h left':>10}  pace from",
    ]
    for r in rows:
        lines.append(
            f"  {r.plan.cell.key:<40} {_h(r.predicted_wall_h):>11} {_h(r.wall_h):>10} "
            f"{_h(r.remaining_h):>8} {_h(r.remaining_gpu_hours):>10}  {r.source or 'the plan'}"
        )
    lines.append(f"  remaining: {_remaining(rows)}")
    lines += [w for r in rows if (w := r.warning()) is not None]
    return lines


def study_remaining(rows: Sequence[Recalibrated]) -> tuple[float, float]:
    """(GPU-hours left at the paces, GPU-hours left at the prediction) of the training jobs
    (0 for CPU cells: their figure is the wall time)."""
    left = sum(r.remaining_gpu_hours or 0.0 for r in rows)
    planned = sum(
        (r.predicted_wall_h or 0.0)
        * r.plan.gpus
        * max(0, r.plan.steps - r.done_steps)
        / max(1, r.plan.steps)
        for r in rows
    )
    return left, planned


def _remaining(rows: Sequence[Recalibrated]) -> str:
    """The study's GPU-hours left, at the paces and as predicted (a CPU study: none)."""
    if not any(r.plan.gpus for r in rows):
        return "no GPU-hours (CPU cells: their wall time is the figure)"
    left, planned = study_remaining(rows)
    return f"{left:,.1f} GPU-hours at the measured paces (the plan's: {planned:,.1f})"


def status_lines(config: Mapping[str, Any], now: float | None = None) -> list[str]:
    """What `leviathan status` prints below its table once a cell has a measured step time
    (nothing before): the study's remaining hours and its expected finish (every unfinished
    job at once, at its pace or the prediction), then the recalibration's WARNING lines."""

    cells = config_cells(config)
    if not any(layout.metrics_file(layout.run_dir(c)).is_file() for c in cells):
        return []
    rows = recalibrate(config, study_plans(config))
    if not rows:
        return []
    walls = [r.remaining_h for r in rows]
    known = [w for w in walls if w is not None]
    now = time.time() if now is None else now
    finish = (
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(now + max(known) * 3600))
        if known
        else "unknown"
    )
    unknown = sum(w is None for w in walls)
    return [
        f"remaining: {_remaining(rows)}; training ends ~{max(known, default=0.0):,.1f} h from "
        f"now, {finish}, if every unfinished cell trains at once"
        + (f" ({unknown} cell(s) with no pace or prediction not counted)" if unknown else "")
    ] + [w for r in rows if (w := r.warning()) is not None]
