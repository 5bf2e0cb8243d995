"""Preemption: SIGTERM/SIGUSR1/SIGINT become "checkpoint at the end of this step, then exit".

SLURM (and most schedulers) send SIGTERM, or a `--signal` such as SIGUSR1, some time before
they kill a job. While a `PreemptionWatch` is entered (the whole of training: the steps, the
final validation, the final save), those signals only record themselves; the training loop
asks `requested()` once per step (every rank agrees on the answer), writes a checkpoint and
raises `Preempted`, whose exit code (128 + signal) tells the scheduler to requeue or retry;
the retried run resumes from that checkpoint. A signal after the last step is answered once
the final checkpoint is written: the run is complete and `Preempted` names `final`.

Ctrl-C (SIGINT) is the same request, said on stderr; a second Ctrl-C raises
KeyboardInterrupt at once (without a checkpoint of the steps since the last one). A second
SIGINT within `SAME_CTRL_C_S` of the first is the same Ctrl-C delivered twice (the terminal's
and a launcher's forwarded copy, as torchrun does) and is not counted again.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
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


SAME_CTRL_C_S = 1.0  # a second SIGINT sooner than this is a copy of the first one


class PreemptionWatch:
    """Records SIGTERM/SIGUSR1/SIGINT instead of dying while entered; the old handlers come
    back on exit. Outside the main thread (where handlers cannot be set) it leaves them alone."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)

    def __init__(self, info: DistInfo) -> None:
        self.info = info
        self.signum = 0
        self._old: dict[int, Any] = {}
        self._first_int: float | None = None

    def __enter__(self) -> PreemptionWatch:
        for sig in self.SIGNALS:
            with contextlib.suppress(ValueError):  # not the main thread: leave handlers alone
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT:
            self._ctrl_c()
        self.signum = self.signum or signum

    def _ctrl_c(self) -> None:
        """The first Ctrl-C: said, then like SIGTERM; a second one: stop at once."""
        now = time.monotonic()
        if self._first_int is None:
            self._first_int = now
            if self.info.is_main:
                print(
                    "\nCtrl-C: writing a checkpoint at the end of this step, then stopping "
                    "(Ctrl-C again stops at once, without it)",
                    file=sys.stderr,
                    flush=True,
                )
        elif now - self._first_int >= SAME_CTRL_C_S:
            raise KeyboardInterrupt

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
