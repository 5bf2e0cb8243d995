"""Training telemetry: MFU against the device's peak (`leviathan.device`), the records of the
run's metrics log (`leviathan.train.metrics_log`), the progress bar and the readable progress
line (`ProgressLine`: in a workflow job's log, `tail -f logs/train/<cell>.log`)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from leviathan.device import device_name, mfu, peak_flops
from leviathan.model.lev_health import model_health
from leviathan.provenance import code_version
from leviathan.study.logs import start_line
from leviathan.train.config import RuntimeConfig, TrainConfig
from leviathan.train.distributed import DistInfo
from leviathan.train.metrics_log import MetricsLog
from leviathan.train.regions import compile_seconds
from leviathan.train.validation import val_sample

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
        if self.info.is_main and (line := start_line(step, resumed_from)) is not None:
            print(f"leviathan train: {line}", file=sys.stderr, flush=True)
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
                    "compile": self.runtime.compile,
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

    def record_step(self, record: StepRecord) -> None:
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
                    # this process's peak allocated bytes (CUDA; None elsewhere) and the
                    # compile seconds it has spent so far (leviathan.train.regions)
                    "peak_memory": peak_memory(self.info.device),
                    "compile_s": compile_seconds() if self.runtime.compile else 0.0,
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
                    "sample": val_sample(self.runtime.validation),
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


def lev_health_stats(model: Any, is_main: bool, sharded: bool) -> Any:
    """LEV's health statistics of `model` on the main rank (a fixed sample of ids, no
    gradients; FSDP: LEV's group and the root's, with the head, gathered on every rank for
    it). None on the other ranks, or for a model without LEV."""
    if not (is_main or sharded):
        return None
    from leviathan.train.fsdp import root_gathered  # torch.distributed's FSDP: only here

    with root_gathered(model):
        if not is_main:
            return None
        was_training = model.training
        stats = model_health(model.eval())
        model.train(was_training)
    return stats
