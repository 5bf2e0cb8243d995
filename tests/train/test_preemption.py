"""PreemptionWatch on its own: a signal is recorded (not fatal) while entered, turns into
`Preempted` with the scheduler's exit code, and the old handlers come back on exit; Ctrl-C is
such a request, a second Ctrl-C (not a copy of the first one) stops at once."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from leviathan.train import preemption
from leviathan.train.distributed import DistInfo
from leviathan.train.preemption import SAME_CTRL_C_S, PreemptionWatch

CPU = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


def test_a_signal_is_recorded_then_stops_with_its_exit_code() -> None:
    before = signal.getsignal(signal.SIGUSR1)
    with PreemptionWatch(CPU) as watch:
        assert not watch.requested()
        os.kill(os.getpid(), signal.SIGUSR1)  # recorded, the process lives on
        assert watch.requested()
        stop = watch.stop(Path("ckpt/step_00000004"))
    assert signal.getsignal(signal.SIGUSR1) is before
    assert stop.exit_code == 128 + signal.SIGUSR1
    assert stop.checkpoint == Path("ckpt/step_00000004")
    assert str(stop) == "stopped by signal SIGUSR1; resume from ckpt/step_00000004"


def test_a_rank_without_a_signal_of_its_own_reports_sigterm() -> None:
    stop = PreemptionWatch(CPU).stop(Path("c"))  # another rank got it: the all-reduce said stop
    assert stop.signum == signal.SIGTERM
    assert stop.exit_code == 128 + signal.SIGTERM


def test_ctrl_c_is_a_request_and_a_second_one_stops_at_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the watch's clock, moved by the test: a pause of the process (a loaded machine) between
    # the first Ctrl-C and its copy does not make the copy a second Ctrl-C
    now = [100.0]
    monkeypatch.setattr(preemption, "time", SimpleNamespace(monotonic=lambda: now[0]))
    # Python's own Ctrl-C handler, as an interactive run has it (a command started in the
    # background by a non-interactive shell inherits SIGINT ignored); the previous one put back
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with PreemptionWatch(CPU) as watch:
            os.kill(os.getpid(), signal.SIGINT)  # the process lives on
            assert watch.requested()
            assert "Ctrl-C: writing a checkpoint at the end of this step" in capsys.readouterr().err
            now[0] += SAME_CTRL_C_S / 2
            os.kill(os.getpid(), signal.SIGINT)  # the same Ctrl-C forwarded by a launcher
            time.sleep(0)  # (a signal's handler runs by the next bytecode at the latest)
            now[0] += SAME_CTRL_C_S / 2
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)  # delivered here at the latest
            assert watch.stop(Path("c")).exit_code == 128 + signal.SIGINT
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
