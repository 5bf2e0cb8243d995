"""One process per folder: an OS file lock on a run directory or an evaluation output.

`hold_lock(target, what, folder=...)` takes an exclusive `fcntl.flock` on the target's lock file
(`leviathan.layout.lock_file`: `<dir>/.lock` for a directory, `.<name>.lock` beside a file)
for as long as the block runs, and removes the file when it ends. A file where a folder must be,
or a directory where the lock file goes, is a one-line ValueError naming it. The kernel releases a flock
when its process exits by any means (SIGKILL included), so a lock file a dead process left
behind holds no lock: it is recognised as stale and taken over. The file records its holder
(pid, host, start time), so that a second process is refused in one line naming it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path

from leviathan.layout import lock_file
from leviathan.provenance import utc_now

log = logging.getLogger("leviathan.lock")
HOLDER = re.compile(r"process (?P<pid>\d+) on (?P<host>\S+) since (?P<since>\S+)")


def holder_line(pid: int, host: str, since: str) -> str:
    """What a lock file says of its holder (read back by `parse_holder`)."""
    return f"process {pid} on {host} since {since}"


def parse_holder(text: str) -> tuple[int, str, str] | None:
    """(pid, host, since) of a lock file's holder line; None for anything else (a file being
    written, or not one of ours)."""
    m = HOLDER.fullmatch(text.strip())
    return (int(m["pid"]), m["host"], m["since"]) if m else None


class FolderBusy(ValueError):
    """Another live process holds the lock of a run directory or an output."""


def _holder(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 4096).decode(errors="replace").strip()


def _same_file(path: Path, fd: int) -> bool:
    """Whether `path` is still the file `fd` locked (its holder may have removed it on release)."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _open(path: Path, what: str) -> int:
    """The lock file, opened; a directory (or anything else not a file) in its place is one
    line naming it."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except IsADirectoryError:
        raise ValueError(
            f"{path}: is a directory where this {what}'s lock file goes: remove it (nothing "
            "of leviathan's is in it), then rerun"
        ) from None


def _acquire(path: Path, what: str, target: Path) -> int:
    while True:
        fd = _open(path, what)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd) or "another process"
            os.close(fd)
            raise FolderBusy(
                f"{target}: this {what} is in use by {holder}; wait for it to end (or stop it), "
                "or use another path"
            ) from None
        if _same_file(path, fd):
            return fd
        os.close(fd)  # locked a file its holder had just removed: take the new one


@contextlib.contextmanager
def hold_lock(target: str | os.PathLike[str], what: str, *, folder: bool) -> Iterator[None]:
    """Hold the lock of `target` (a directory with `folder`, else a file to be written) while
    the block runs; another process holding it is refused with `FolderBusy`."""
    target = Path(target)
    path = lock_file(target, folder)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file where a folder must be
        folders = [path.parent, *path.parent.parents]
        blocker = next((f for f in reversed(folders) if f.exists() and not f.is_dir()), target)
        raise ValueError(
            f"{target}: {blocker} is a file, where this {what} needs a folder: move it away or "
            "use another path"
        ) from None
    fd = _acquire(path, what, target)
    try:
        if stale := _holder(fd):
            log.info("%s: taking over the stale lock of %s (no longer running)", target, stale)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        started = utc_now().isoformat(timespec="seconds")
        os.write(fd, f"{holder_line(os.getpid(), socket.gethostname(), started)}\n".encode())
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # while still locked: a waiting process then takes a new file
        os.close(fd)
