"""`python -m leviathan.torchrun ARGS`: torchrun with the exit status of a preempted run.

The same arguments and behaviour as `python -m torch.distributed.run` (torchrun), except the
exit status when a signal stopped the run. torchrun exits 1 whatever stopped its workers:
signalled itself (SLURM signals every process of a job step), it forwards the signal, waits for
its workers (`TORCH_ELASTIC_SHUTDOWN_TIMEOUT`) and raises `SignalException`; when a worker
exits non-zero it raises `ChildFailedError`. Here the first ends with 128 + the signal, and the
second with the workers' own status where every failed worker exited with the same 128 +
SIGTERM/SIGUSR1/SIGINT (the preemption `leviathan train` answers with a checkpoint); any other
failure keeps torchrun's status and error summary. So `leviathan train` exits 143/138/130 on
preemption under torchrun as it does alone.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

PREEMPTING = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


def preempted_status(exc: BaseException) -> int | None:
    """128 + signal where `exc` is torchrun's report of a preempted run; None otherwise."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    if isinstance(exc, SignalException):
        return 128 + int(exc.sigval)
    if isinstance(exc, ChildFailedError):
        codes = {failure.exitcode for failure in exc.failures.values()}
        if len(codes) == 1 and (code := codes.pop()) in {128 + int(s) for s in PREEMPTING}:
            return code
    return None


def main(argv: Sequence[str] | None = None) -> int:
    from torch.distributed.run import main as torchrun

    try:
        torchrun(list(argv) if argv is not None else None)
    except Exception as exc:
        status = preempted_status(exc)
        if status is None:
            raise
        return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
