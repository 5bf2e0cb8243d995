"""Preemption: SIGTERM/SIGUSR1 become "checkpoint at the end of this step, then exit".

SLURM (and most schedulers) send SIGTERM, or a `--signal` such as SIGUSR1, some time before
they kill a job. While a `PreemptionWatch` is entered, those signals only record themselves;
the training loop asks `requested()` once per step (every rank agrees on the answer), writes
a checkpoint and raises `Preempted`, whose exit code (128 + signal) tells the scheduler to
requeue or retry; the retried run resumes from that checkpoint.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import Any

import torch

from leviathan.train.distributed import DistInfo, all_reduce_sum


class Preempted(Exception):
    """A SIGTERM/SIGUSR1 arrived; a checkpoint was written. Exit non-zero to be retried."""

    def __init__(self, signum: int, checkpoint: Path) -> None:
        super().__init__(
            f"stopped by signal {signal.Signals(signum).name}; resume from {checkpoint}"
        )
        self.signum, self.checkpoint = signum, checkpoint

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class PreemptionWatch:
    """Records SIGTERM/SIGUSR1 instead of dying while entered; the old handlers come back on
    exit. Outside the main thread (where handlers cannot be set) it leaves them alone."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

    def __init__(self, info: DistInfo) -> None:
        self.info = info
        self.signum = 0
        self._old: dict[int, Any] = {}

    def __enter__(self) -> PreemptionWatch:
        for sig in self.SIGNALS:
            with contextlib.suppress(ValueError):  # not the main thread: leave handlers alone
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.signum = signum

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)

    def requested(self) -> bool:
        """Whether any rank got a signal: a host sync, so that every rank stops at the same step."""
        stop = torch.tensor([self.signum], dtype=torch.float64, device=self.info.device)
        all_reduce_sum(stop, self.info)
        return bool(stop.item())

    def stop(self, checkpoint: Path) -> Preempted:
        """The exception to raise once `checkpoint` is written (a rank that got no signal itself
        reports SIGTERM)."""
        return Preempted(self.signum or signal.SIGTERM, checkpoint)
