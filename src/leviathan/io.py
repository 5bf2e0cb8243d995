"""Small file helpers shared by every step: atomic writes and content hashes.

Nothing is ever written under its final name until it is complete: writers get a
temporary sibling path and it is renamed into place only on success.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)  # a full disk, a full quota


class DiskFull(OSError):
    """A write failed for lack of space; the message names the path, the bytes and the fix."""


FIX_SPACE = "free space there (or point the command elsewhere), then rerun it"


def disk_full(
    path: str | os.PathLike[str], needed: int, fix: str, *, more_than: bool = False
) -> DiskFull:
    """The one-line error of a write of `needed` bytes at `path` that found its disk full
    (`more_than`: the write had put `needed` bytes there and wanted more)."""
    where = Path(path)
    probe = next((p for p in (where, *where.parents) if p.exists()), Path("."))
    free = shutil.disk_usage(probe).free
    size = f"more than {needed:,}" if more_than else f"about {needed:,}"
    return DiskFull(
        f"no space left on the filesystem of {where}: writing it needs {size} bytes "
        f"and {free:,} are free; {fix}"
    )


def no_space(exc: BaseException | None, root: Path | None = None, needed: int = 0) -> bool:
    """Whether a failed write failed for lack of space: its error, or one it was raised from or
    while handling, says so, or (`root`, `needed`) the space free there now is less than the
    write needs (torch.save's C++ writer reports a full disk as "iostream error", safetensors'
    as its own error)."""
    if root is not None and needed and shutil.disk_usage(root).free < needed:
        return True
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, DiskFull) or (isinstance(exc, OSError) and exc.errno in NO_SPACE):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def tree_bytes(path: Path) -> int:
    """Bytes of a file, or of every file under a directory (0 where there is nothing)."""
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return 0


def sha256_file(path: str | os.PathLike[str], progress: bool = False) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks (a byte progress bar on stderr)."""
    digest = hashlib.sha256()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(
            total=os.path.getsize(path), unit="B", unit_scale=True, desc=f"sha256 {Path(path).name}"
        )
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            if bar is not None:
                bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_path(
    path: str | os.PathLike[str], *, needed: int | None = None, fix: str = FIX_SPACE
) -> Iterator[Path]:
    """Yield a temporary sibling of `path`; rename it onto `path` only if the block succeeds.

    The temporary file is removed on any error, so an interrupted write never leaves a
    file that looks complete. A full disk is `DiskFull`, one line naming `path`, the bytes
    (`needed`, else what the write had put there), the space free and `fix`.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_of(final, os.getpid())
    try:
        yield tmp
        honour_umask(tmp)
        with open(tmp, "rb+") as fh:  # data on disk before the rename makes it visible
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except Exception as exc:
        written = tree_bytes(tmp)
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()  # the space it took, before the free space is measured
        if no_space(exc) and not isinstance(exc, DiskFull):
            raise disk_full(final, needed or written, fix, more_than=needed is None) from exc
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _temp_of(final: Path, pid: int | str) -> Path:
    """The temporary sibling `atomic_path` writes `final` through in process `pid`."""
    return final.with_name(f".{final.name}.{pid}.tmp")


def remove_dead_temps(path: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary siblings of `path` (files or directories) that writers killed
    mid-write left: `.<name>.<pid>.tmp` being written, `.<name>.<pid>.old` being replaced
    (`publish_dir`), of a process no longer running here (a SIGKILL skips every cleanup);
    return them."""
    final = Path(path)
    return _remove_dead(final.parent, f".{glob.escape(final.name)}.*", final.name)


def remove_dead_temps_in(directory: str | os.PathLike[str]) -> list[Path]:
    """`remove_dead_temps` for every name in `directory` (its killed writers' leftovers)."""
    return _remove_dead(Path(directory), ".*.*")


def _remove_dead(directory: Path, pattern: str, name: str | None = None) -> list[Path]:
    removed = []
    for leftover in sorted(directory.glob(pattern)):
        head, _, suffix = leftover.name.rpartition(".")
        of, _, pid = head.rpartition(".")
        if suffix not in ("tmp", "old") or not pid.isdigit() or int(pid) == os.getpid():
            continue
        if name is not None and of != f".{name}":
            continue
        if _running(int(pid)):
            continue
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
        removed.append(leftover)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def current_umask() -> int:
    """The process's umask, read without changing it (Linux's /proc; elsewhere it is set and
    restored at once)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def honour_umask(path: Path) -> None:
    """Give `path` (a file, or a directory and everything under it) the mode a plain
    open() or mkdir() gives under the umask: writers that go through a private temporary
    file (safetensors writes 0600) must not make weights unreadable to a group that the
    umask lets read them."""
    mask = current_umask()
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        if item.is_symlink():
            continue
        item.chmod((0o777 if item.is_dir() else 0o666) & ~mask)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    """fsync every file under `path` (recursively) and the directories holding them."""
    for child in path.iterdir():
        if child.is_dir():
            fsync_tree(child)
        else:
            with open(child, "rb") as fh:
                os.fsync(fh.fileno())
    fsync_dir(path)


def publish_dir(tmp: Path, final: Path) -> None:
    """Make the complete directory `tmp` visible as `final` (a sibling), replacing any old one.

    The files are on disk before the rename; an existing `final` is moved aside first and
    removed only after the new one is in place, so `final` is at every moment either the
    old directory or the new one, never a mixture. Its files get the modes the umask allows
    (`honour_umask`)."""
    honour_umask(tmp)
    fsync_tree(tmp)
    old = final.with_name(f".{final.name}.{os.getpid()}.old")
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
    tmp.rename(final)
    fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)


def free_name(path: Path, tag: str) -> Path:
    """`<name>.<tag>-<n><suffix>` beside `path`, with the first n not taken: where something
    set aside (never deleted) goes."""
    n = 1
    while (target := path.with_name(f"{path.stem}.{tag}-{n}{path.suffix}")).exists():
        n += 1
    return target


def json_bytes(obj: Any) -> bytes:
    """`obj` as `write_json` writes it: indented, key-sorted JSON and a newline."""
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def write_json(path: str | os.PathLike[str], obj: Any, fix: str = FIX_SPACE) -> None:
    """Write `obj` as indented, key-sorted JSON (`json_bytes`), atomically (`fix`: what a full
    disk's `DiskFull` tells the user to do)."""
    data = json_bytes(obj)
    with atomic_path(path, needed=len(data), fix=fix) as tmp:
        tmp.write_bytes(data)


def read_json(path: str | os.PathLike[str]) -> Any:
    """Read a JSON file; a missing file raises FileNotFoundError naming it, one that is not
    JSON a ValueError (json.JSONDecodeError) naming it."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file (was the step that writes it run?)")
    text = p.read_text(errors="replace")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise json.JSONDecodeError(f"{p}: not valid JSON ({exc.msg})", exc.doc, exc.pos) from None


def read_json_object(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a JSON file that holds one object (a manifest, a record); anything else (a list, a
    number) is a ValueError naming the file."""
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise ValueError(
            f"{path}: holds a JSON {type(doc).__name__}, not an object: the file is damaged; "
            "rerun the step that writes it"
        )
    return doc
