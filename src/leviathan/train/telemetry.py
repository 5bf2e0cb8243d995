"""Training telemetry: MFU against the device's peak (`leviathan.device`), JSONL metrics,
optional TensorBoard and DVCLive views, the progress bar, the readable progress line
(`ProgressLine`: in a workflow job's log, `tail -f logs/train/<cell>.log`), and the rewind of a
run's metrics to its checkpoint.

The metrics log is written one whole record per `write` call, appended and flushed at once
(no buffer to lose); a write that fails (a full disk) is cut back to the last whole record
and raises `leviathan.io.DiskFull`. A line that is still not a whole record (a kill in the
middle of a write) is set aside, with a WARNING naming both files, when the run restarts."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from leviathan.device import device_name, mfu, peak_flops
from leviathan.io import NO_SPACE, disk_full, free_name
from leviathan.provenance import code_version
from leviathan.train.config import RuntimeConfig, TrainConfig
from leviathan.train.distributed import DistInfo

log = logging.getLogger("leviathan.train")


@dataclass(frozen=True)
class StepRecord:
    """What one optimizer step reports: `step` steps are done (1-based), the step's mean
    training loss, its learning rate, the gradient norm before clipping, its seconds, and the
    fingerprint of its batch (train/batch_fingerprint.py; None where no record is due)."""

    step: int
    loss: float
    lr: float
    grad_norm: float
    seconds: float
    batch_sha256: str | None = None


def log_due(step: int, log_every: int, max_steps: int) -> bool:
    """Whether step `step` (1-based) gets a metrics record: every `log_every` and the last."""
    return step % log_every == 0 or step == max_steps


def format_duration(seconds: float) -> str:
    """A duration as a person reads it: 45s, 12m05s, 3h12m, 2d03h."""
    s = max(0, round(seconds))
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def format_rate(per_s: float) -> str:
    """A rate with a k/M suffix: 950, 412k, 1.25M."""
    if per_s >= 1e6:
        return f"{per_s / 1e6:.2f}M"
    return f"{per_s / 1e3:.0f}k" if per_s >= 1e3 else f"{per_s:.0f}"


@dataclass(frozen=True)
class ProgressLine:
    """One readable line of a run's progress (nanoGPT's style), e.g.
    `step 120/16000 | loss 3.412 | lr 3.0e-04 | 412k tok/s | MFU 38% | mem 61.2 GB | ETA 3h12m`:
    tokens/s over the steps since the previous line, MFU of that rate (or "unknown"), the
    device's peak allocated memory so far (GB = 1e9 bytes; GPU only), the time left at this
    process's mean step time."""

    step: int
    total: int
    loss: float
    lr: float
    tokens_per_s: float
    mfu: float | str
    peak_memory: int | None
    eta_s: float

    def __str__(self) -> str:
        parts = [
            f"step {self.step}/{self.total}",
            f"loss {self.loss:.3f}",
            f"lr {self.lr:.1e}",
            f"{format_rate(self.tokens_per_s)} tok/s",
            f"MFU {self.mfu:.0%}" if isinstance(self.mfu, float) else f"MFU {self.mfu}",
        ]
        if self.peak_memory is not None:
            parts.append(f"mem {self.peak_memory / 1e9:.1f} GB")
        parts.append(f"ETA {format_duration(self.eta_s)}")
        return " | ".join(parts)


def peak_memory(device: torch.device) -> int | None:
    """The most bytes the device has held in tensors so far (CUDA), None elsewhere."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return None


class MetricsLog:
    """Append-only JSONL (one object per line) plus optional live views of the same scalars:
    TensorBoard (`tensorboard_dir`) and DVCLive (`dvclive_dir`: `<kind>/<key>.tsv` per scalar
    under plots/metrics/, the latest values in metrics.json; `dvc plots show <dir>/plots/metrics`
    or the VS Code DVC extension draws them while training runs)."""

    def __init__(
        self,
        path: Path,
        tensorboard_dir: Path | None = None,
        dvclive_dir: Path | None = None,
        wandb: Any | None = None,
    ) -> None:
        """`wandb`: a `train.wandb_log.WandbRun` that gets every record too (None: none)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._wandb = wandb
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._tb = None
        if tensorboard_dir is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:  # tensorboard is optional
                raise ValueError(
                    "runtime.tensorboard=true needs the tensorboard package: pip install tensorboard"
                ) from exc
            self._tb = SummaryWriter(str(tensorboard_dir))
        self._live = _dvclive(dvclive_dir) if dvclive_dir is not None else None

    def write(self, record: dict[str, Any]) -> None:
        record = {"time": round(time.time(), 3), **record}
        self._append((json.dumps(record, sort_keys=True) + "\n").encode())
        if self._tb is not None and "step" in record:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key not in ("step", "time"):
                    self._tb.add_scalar(
                        f"{record.get('kind', 'train')}/{key}", value, record["step"]
                    )
        if self._live is not None and "step" in record:
            self._live.step = int(record["step"])
            for key, value in _scalars(record):
                self._live.log_metric(f"{record.get('kind', 'train')}/{key}", value)
            self._live.make_summary()
        if self._wandb is not None:
            self._wandb.write(record)

    def _append(self, data: bytes) -> None:
        """Append one whole record; on failure cut the file back to what it was."""
        size = os.fstat(self._fd).st_size
        try:
            view = memoryview(data)
            while view:  # a short write (a disk filling up) then raises on the next call
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            os.ftruncate(self._fd, size)
            if exc.errno in NO_SPACE:
                fix = "free space there, then rerun: the run resumes from its newest checkpoint"
                raise disk_full(self.path, len(data), fix) from exc
            raise

    def close(self) -> None:
        os.close(self._fd)
        if self._tb is not None:
            self._tb.close()
        if self._live is not None:
            self._live.end()
        if self._wandb is not None:
            self._wandb.close()


class TrainTelemetry:
    """What a training run reports: the records of its metrics log (`log`, the main rank's;
    None on the others) and the progress bar (main rank, `runtime.progress`). Closing it
    closes both."""

    def __init__(
        self,
        log: MetricsLog | None,
        *,
        cfg: TrainConfig,
        runtime: RuntimeConfig,
        info: DistInfo,
        flops_per_token: int,
    ) -> None:
        self.log, self.cfg, self.runtime, self.info = log, cfg, runtime, info
        self.flops_per_token = flops_per_token
        self.device = device_name(info.device)
        self.peak = peak_flops(self.device)
        self.bar: Any = None
        # (perf_counter, step) at this process's first step and at the last progress line
        self._began = self._last_line = (time.perf_counter(), 0)

    def start(
        self,
        step: int,
        *,
        params: int,
        resumed_from: Path | None,
        set_aside: Path | None,
        because: str | None,
        damaged: Sequence[Mapping[str, str]] = (),
    ) -> None:
        """The run's first record: what it trains, where it resumed from, what was set aside
        (checkpoints of another config or data, also a WARNING on stderr, in a workflow job's
        log: which folder, and why; `damaged` ones)."""
        self._began = self._last_line = (time.perf_counter(), step)
        if set_aside and self.info.is_main:
            print(
                f"leviathan train: WARNING: set aside the checkpoints of another run as "
                f"{set_aside} (kept, not deleted; remove it when no longer needed) and started "
                f"afresh, because: {because}",
                file=sys.stderr,
                flush=True,
            )
        if self.log:
            self.log.write(
                {
                    "kind": "start",
                    "step": step,
                    "resumed_from": str(resumed_from) if resumed_from else None,
                    "set_aside": {"checkpoints": str(set_aside), "because": because}
                    if set_aside
                    else None,
                    "damaged": [dict(d) for d in damaged],
                    "max_steps": self.cfg.max_steps,
                    "world_size": self.info.world_size,
                    "device": self.device,
                    "params": params,
                    "train_flops_per_token": self.flops_per_token,
                    "train_config": self.cfg.to_dict(),
                    "code": code_version(),
                }
            )

    def show_progress(self, step: int) -> None:
        """The progress bar, from `step` (main rank, with `runtime.progress`)."""
        if self.info.is_main and self.runtime.progress:
            from tqdm import tqdm

            self.bar = tqdm(
                total=self.cfg.max_steps,
                initial=step,
                desc=f"{self.cfg.scale}/{self.cfg.vocab}/{self.cfg.cell_variant}",
                unit="step",
            )

    def should_log(self, step: int) -> bool:
        """Whether step `step` (1-based) gets a record: every `runtime.log_every` and the last."""
        return log_due(step, self.runtime.log_every, self.cfg.max_steps)

    def train_step(self, record: StepRecord) -> None:
        """After an optimizer step: its record where `should_log` says so, and the bar."""
        tok_s = self.cfg.tokens_per_step / record.seconds
        if self.log and self.should_log(record.step):
            self.log.write(
                {
                    "kind": "train",
                    "step": record.step,
                    "tokens": record.step * self.cfg.tokens_per_step,
                    "loss": record.loss,
                    "lr": record.lr,
                    "grad_norm": record.grad_norm,
                    "tokens_per_s": tok_s,
                    "step_s": record.seconds,
                    "mfu": mfu(tok_s, self.flops_per_token, self.peak, self.info.world_size),
                    "batch_sha256": record.batch_sha256,
                }
            )
        if self.info.is_main and self.line_due(record.step):
            self._write_line(self.progress_line(record))
        if self.bar:
            self.bar.set_postfix(loss=f"{record.loss:.4f}", tok_s=f"{tok_s:,.0f}", refresh=False)
            self.bar.update(1)

    def line_due(self, step: int) -> bool:
        """Whether step `step` gets a progress line: this process's first step, the last,
        every `runtime.log_line_every` steps, and once `runtime.log_line_s` seconds passed."""
        every, seconds = self.runtime.log_line_every, self.runtime.log_line_s
        return (
            step == self._began[1] + 1
            or step == self.cfg.max_steps
            or (every > 0 and step % every == 0)
            or (seconds > 0 and time.perf_counter() - self._last_line[0] >= seconds)
        )

    def progress_line(self, record: StepRecord) -> ProgressLine:
        """The progress line after `record`'s step; the next line's rate starts here."""
        now = time.perf_counter()
        (t_line, s_line), (t_began, s_began) = self._last_line, self._began
        tok_s = (record.step - s_line) * self.cfg.tokens_per_step / max(now - t_line, 1e-9)
        step_s = (now - t_began) / max(record.step - s_began, 1)
        self._last_line = (now, record.step)
        return ProgressLine(
            step=record.step,
            total=self.cfg.max_steps,
            loss=record.loss,
            lr=record.lr,
            tokens_per_s=tok_s,
            mfu=mfu(tok_s, self.flops_per_token, self.peak, self.info.world_size),
            peak_memory=peak_memory(self.info.device),
            eta_s=(self.cfg.max_steps - record.step) * step_s,
        )

    def _write_line(self, line: ProgressLine) -> None:
        """On stderr (above the bar where there is one), flushed: the job's log has it now."""
        if self.bar:
            self.bar.write(str(line), file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

    def val(self, step: int, val_loss: float) -> None:
        if self.log:
            self.log.write(
                {
                    "kind": "val",
                    "step": step,
                    "tokens": step * self.cfg.tokens_per_step,
                    "val_loss": val_loss,
                }
            )

    def lev_health(self, step: int, stats: dict[str, Any]) -> None:
        """LEV's health statistics after step `step` (`leviathan.model.lev_health`)."""
        if self.log:
            self.log.write({"kind": "lev_health", "step": step, **stats})

    def end(self, step: int, *, train_loss: float | None, val_loss: float | None) -> None:
        if self.log:
            self.log.write(
                {"kind": "end", "step": step, "train_loss": train_loss, "val_loss": val_loss}
            )

    def __enter__(self) -> TrainTelemetry:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.bar:
            self.bar.close()
        if self.log:
            self.log.close()


def _scalars(record: dict[str, Any]) -> list[tuple[str, float]]:
    return [
        (k, float(v))
        for k, v in record.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("step", "time")
    ]


def _dvclive(directory: Path) -> Any:
    """A DVCLive logger that only writes its directory: no dvc.yaml edits, no DVC experiment
    commits, no report (the project's dvc.yaml and `dvc exp` stay the user's). Resumes appending
    when training resumes."""
    try:
        from dvclive import Live
    except ImportError as exc:  # dvclive is optional
        raise ValueError(
            "runtime.dvclive=true needs the dvclive package: pip install 'leviathan[live]'"
        ) from exc
    return Live(dir=str(directory), resume=True, report=None, save_dvc_exp=False, dvcyaml=False)


def rewind_metrics(path: Path, step: int, aside: Path) -> int:
    """Keep in `path` only the records of the run up to `step` (the checkpoint a run resumes
    from; 0: a fresh start keeps nothing); move the others to `aside` (kept, never deleted).

    A run directory then holds the metrics of exactly the run its checkpoints belong to: no
    points of a set-aside run, and no steps logged after the newest checkpoint by a run that
    died (they are recomputed). Returns the number of records moved.
    """
    if not path.is_file():
        return 0
    text = path.read_text(errors="replace")
    records, torn = _split_records(text)
    if torn:
        torn_file = free_name(path, "torn")
        torn_file.write_text("".join(line + "\n" for line in torn))
        log.warning(
            "%s: %d line(s) not a whole record (a write cut short by a kill or a full disk): "
            "set aside as %s",
            path,
            len(torn),
            torn_file,
        )
    keep: list[str] = []
    moved: list[str] = []
    for line, rec in records:
        (keep if step > 0 and int(rec.get("step", 0)) <= step else moved).append(line)
    if moved:
        aside.parent.mkdir(parents=True, exist_ok=True)
        with open(aside, "a") as fh:
            fh.writelines(line + "\n" for line in moved)
    # a new file, never the old one edited: it may be a hard link into DVC's cache (docs/dvc.md)
    if moved or torn or not text.endswith("\n") or path.stat().st_nlink > 1:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in keep))
        tmp.replace(path)
    return len(moved)


def _split_records(text: str) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The lines of a metrics log that are whole records (each with it parsed), and the others."""
    records: list[tuple[str, dict[str, Any]]] = []
    torn: list[str] = []
    for line in filter(str.strip, text.splitlines()):
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if isinstance(rec, dict):
            records.append((line, rec))
        else:
            torn.append(line)
    return records, torn


def read_metrics(path: Path, kind: str | None = None) -> list[dict[str, Any]]:
    """Records of a metrics JSONL, optionally only those of one kind ("train", "val", ...)."""
    rows = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise ValueError(
                    f"{path}:{n}: not a whole JSON record ({exc}): a write cut short; rerun "
                    "the training command, which sets such lines aside"
                ) from exc
    return [r for r in rows if kind is None or r.get("kind") == kind]
