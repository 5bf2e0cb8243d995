"""The state of an unfinished fetch, and what makes a resume the fetch of one source.

A fetch saves, after each part, `.fetch-state.json` beside its partial split files: the
fetch's identity (splits, source record, settings), each split's length and counts, the
source's position, and the identity of the local files it reads (`SourceFiles`): each file's
size and modification time, and the sha256 of the files a fetch hashes before it reads them
(a `datasets` builder's data files). A rerun resumes only where all of these still hold;
where a file changed, it says so in a WARNING and starts the fetch again from the start, so
a corpus never holds the text of two versions of one file under one input hash. What was
read of the file a fetch stopped in is checked as the resume enters it
(`leviathan.data.sources.LocalFiles`: a `SourceChanged` there restarts the fetch too).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from leviathan.io import atomic_path, disk_full, no_space
from leviathan.layout import fetch_state, partial_corpus_file

log = logging.getLogger("leviathan.data.corpus")


class SourceChanged(ValueError):
    """A source file is not the one an interrupted fetch read (a resume starts again)."""


def _stat(path: Path) -> dict[str, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


@dataclass(frozen=True)
class SourceFiles:
    """The local files a fetch reads (`paths`), and the sha256 known of them before reading
    (`inputs`: manifest input records, or None where they are hashed as they are read)."""

    paths: Sequence[Path] = ()
    inputs: Sequence[Mapping[str, Any]] | None = field(default=None)

    def record(self) -> dict[str, Any]:
        """What the fetch state records of them now."""
        return {
            "files": {p.as_posix(): _stat(p) for p in self.paths},
            "inputs": None if self.inputs is None else [dict(r) for r in self.inputs],
        }

    def changed(self, recorded: Mapping[str, Any]) -> str | None:
        """Which file differs from a `record()` taken earlier, and how (None: none)."""
        now = self.record()
        was_files, now_files = recorded["files"], now["files"]
        for name in sorted(set(was_files) | set(now_files)):
            was, is_ = was_files.get(name), now_files.get(name)
            if was != is_:
                return f"{name} ({_what(was, is_)})"
        if recorded["inputs"] is not None and now["inputs"] is not None:
            was_sha = {r["path"]: r.get("sha256") for r in recorded["inputs"]}
            for r in now["inputs"]:
                if was_sha.get(r["path"]) != r.get("sha256"):
                    return (
                        f"{r['path']} (sha256 {was_sha.get(r['path'])} then, {r.get('sha256')} now)"
                    )
        return None


def _what(was: Mapping[str, int] | None, now: Mapping[str, int] | None) -> str:
    if was is None or now is None:
        return "it was not there then" if was is None else "it is gone"
    if was["size"] != now["size"]:
        return f"{was['size']:,} bytes then, {now['size']:,} now"
    return "same size, modified since"


def load_state(out: Path, identity: dict[str, Any], sources: SourceFiles) -> dict[str, Any] | None:
    """The state of an unfinished fetch of the same corpus from the same files into `out`, or
    None (then any leftover of another fetch is removed; a WARNING where only the files
    changed)."""
    path = fetch_state(out)
    try:
        state = json.loads(path.read_text())
        ok = state["identity"] == json.loads(json.dumps(identity)) and all(
            partial_corpus_file(out, name).stat().st_size >= state["splits"][name]["length"]
            for name in identity["splits"]
        )
        changed = sources.changed(state["sources"]) if ok else None
    except (OSError, ValueError, KeyError, TypeError):
        ok, state, changed = False, None, None
    if changed:
        log.warning(
            "%s: %s changed since the interrupted fetch read it; the fetch starts again from "
            "the start",
            out,
            changed,
        )
    if ok and not changed:
        return state  # type: ignore[no-any-return]
    remove_partial(out, identity["splits"])
    return None


def remove_partial(out: Path, names: Iterable[str]) -> None:
    """Remove the fetch state and the partial split files of `names` in `out`."""
    for p in (fetch_state(out), *(partial_corpus_file(out, n) for n in names)):
        p.unlink(missing_ok=True)


def cut_partial(out: Path, lengths: Mapping[str, int]) -> None:
    """Cut each split's partial file back to `lengths` (its last complete part): what a part
    cut short wrote is given back, and a rerun resumes from the state as saved."""
    for name, length in lengths.items():
        path = partial_corpus_file(out, name)
        if path.is_file() and path.stat().st_size > length:
            os.truncate(path, length)


def save_state(out: Path, state: Mapping[str, Any]) -> None:
    """Record `state` atomically (the last complete part of every split)."""
    with atomic_path(fetch_state(out)) as tmp:
        tmp.write_text(json.dumps(state, sort_keys=True))


def check_unchanged(out: Path, sources: SourceFiles, recorded: Mapping[str, Any]) -> None:
    """Refuse (`SourceChanged`) a corpus whose source files changed while the fetch read them
    (`recorded`: their record when it began)."""
    changed = sources.changed(recorded)
    if changed:
        raise SourceChanged(
            f"{out}: {changed} changed while the fetch read it; nothing was written: rerun the "
            "fetch once the file stays as it is"
        )


class _Writer(Protocol):
    path: Path

    def close(self) -> None: ...


def stopped(
    out: Path,
    names: Sequence[str],
    writers: Mapping[str, _Writer],
    saved: Mapping[str, int] | None,
    exc: BaseException,
) -> None:
    """After an error in a fetch: close its files; keep them for a resume where a part was
    saved (cut back to it: `saved`, each split's length), else remove them. A full disk is
    raised as `DiskFull`, one line; a `SourceChanged` leaves them to the caller (it starts
    again)."""
    written = 0
    for writer in writers.values():
        with contextlib.suppress(OSError):  # a full disk fails the close's flush again
            writer.close()
        written += writer.path.stat().st_size if writer.path.is_file() else 0
    if isinstance(exc, SourceChanged):
        return
    if saved is None:
        remove_partial(out, names)
    else:
        cut_partial(out, saved)
    if no_space(exc):
        kept = "it resumes after its last complete part" if saved else "it starts again"
        fix = f"free space there, then rerun the fetch: {kept}"
        raise disk_full(out, written, fix, more_than=True) from exc
    if saved is not None:
        log.warning("%s: fetch interrupted; rerun it to resume from its last part", out)
