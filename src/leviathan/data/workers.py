"""Worker processes that die with the process that started them.

A fetch or a tokenize hands work to a pool of processes. Killed by SIGKILL (or by a SIGTERM
it does not catch), the parent exits without shutting its pool down, and the workers, forked
with a copy of the pool's pipes, would wait for work forever. Each worker therefore asks the
kernel for SIGKILL when its parent dies (Linux `prctl(PR_SET_PDEATHSIG)`), and exits at once
where the parent died before it could ask. The kernel sends the signal when the thread that
started the worker ends; a pool is used inside one `with` block of the thread that made it (the
main thread, for a fetch and a tokenize), so that is the parent process exiting.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import BaseContext
from typing import Any

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent: int) -> None:
    """In a worker: be killed when process `parent` (the one that started it) exits."""
    if sys.platform != "linux":
        return  # no such request elsewhere; the pool's own shutdown is all there is
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # refused (a sandbox): the worker lives as it did before
    try:
        os.kill(parent, 0)
    except ProcessLookupError:  # the parent died before the request: nobody will signal
        os._exit(1)
    except PermissionError:  # alive, under another user (a setuid parent)
        pass


def _start(parent: int, init: Callable[..., None] | None, args: tuple[Any, ...]) -> None:
    die_with_parent(parent)
    if init is not None:
        init(*args)


def worker_pool(
    n: int,
    *,
    mp_context: BaseContext | None = None,
    initializer: Callable[..., None] | None = None,
    initargs: tuple[Any, ...] = (),
) -> ProcessPoolExecutor:
    """A ProcessPoolExecutor of `n` workers that die with this process (then `initializer`)."""
    return ProcessPoolExecutor(
        n,
        mp_context=mp_context,
        initializer=_start,
        initargs=(os.getpid(), initializer, initargs),
    )
