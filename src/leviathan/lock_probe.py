"""Whether a folder's lock (`leviathan.lock`) is held, seen from outside, without taking it.

Taking the lock to test it (a non-blocking `flock` released at once) would refuse a run that
starts in that instant: `leviathan train` does not wait for its lock. So `probe_lock` only reads:

- the lock file: absent, nothing holds it (its holder removes it as it ends); present, its line
  names the holder's process, host and start;
- on the holder's host, the kernel's table of file locks (`/proc/locks`, Linux): the lock file
  locked there, the lock is `held`; not there, the file is a dead process's (SIGKILL, a kill for
  memory) and the lock is `free`. Without that table (macOS), whether the named process lives;
- on another host, nothing: a lock on a shared file system (NFS, Lustre, GPFS) shows in the
  lock table of the node holding it only, and a process id means nothing on another node. The
  probe says `elsewhere`, with the holder; the caller decides from what the run wrote (its exit
  record, `leviathan.train.exit_record`, and how recently its metrics log grew).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from leviathan.layout import lock_file
from leviathan.lock import parse_holder

KERNEL_LOCKS = Path("/proc/locks")


@dataclass(frozen=True)
class LockProbe:
    state: str  # "free", "held" (checked on this host) or "elsewhere" (another host: unchecked)
    pid: int | None = None  # the holder the lock file names
    host: str | None = None
    since: str | None = None


def _locked_here(stat: os.stat_result, pid: int | None, table: str) -> bool:
    """Whether the kernel's lock table lists a lock on the file `stat` describes (by device and
    inode; or by inode and the holder's pid, where a layered file system shows another device)."""
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 6 or "->" in fields:  # a waiter, not a holder
            continue
        try:
            major, minor, inode = fields[5].split(":")
            dev, ino, owner = os.makedev(int(major, 16), int(minor, 16)), int(inode), int(fields[4])
        except ValueError:
            continue
        if ino == stat.st_ino and (dev == stat.st_dev or owner == pid):
            return True
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def probe_lock(target: str | os.PathLike[str], *, folder: bool) -> LockProbe:
    """How the lock of `target` (a directory with `folder`, else a file) stands, read without
    taking it: `free`, `held` by a process of this host, or named `elsewhere` (another host)."""
    path = lock_file(Path(target), folder)
    try:
        with open(path, "rb") as fh:
            stat = os.fstat(fh.fileno())
            text = fh.read(4096).decode(errors="replace")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return LockProbe("free")
    holder = parse_holder(text)
    pid, host, since = holder if holder else (None, None, None)
    if host is not None and host != socket.gethostname():
        return LockProbe("elsewhere", pid, host, since)
    try:
        held = _locked_here(stat, pid, KERNEL_LOCKS.read_text())
    except OSError:  # no kernel lock table here: whether the named process lives
        held = pid is not None and _alive(pid)
    return LockProbe("held" if held else "free", pid, host, since)
