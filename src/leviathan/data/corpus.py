"""On-disk corpus format: one `<split>.jsonl.zst` per split, each with a manifest.

Every line is `{"id": ..., "text": ...}`. Every source (embedded, text, hf, pile) yields
`Document`s and goes through `write_corpus`, which cleans the text (undecodable bytes and
lone surrogates become U+FFFD and are counted), drops empty documents (counted), routes
documents to splits, refuses to finish with an empty split, and writes each split
atomically followed by its manifest (kind "corpus").

Splits are either given by the source (e.g. a dataset's own validation split) or made by
`hash_split`: a stable hash of the document id, so adding or reordering documents never
moves another document between train and val.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import itertools
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple

import zstandard

from leviathan.data.fetch_state import (
    SourceChanged,
    SourceFiles,
    check_unchanged,
    load_state,
    remove_partial,
    save_state,
    stopped,
)
from leviathan.layout import (
    CORPUS_SUFFIX,
    corpus_file,
    fetch_state,
    manifest_path,
    partial_corpus_file,
)
from leviathan.manifest import invalidate_manifest, read_manifest, write_manifest
from leviathan.provenance import utc_now

log = logging.getLogger(__name__)

ZSTD_LEVEL = 3
# Source text per part of a fetch: a kill loses at most one part (seconds of work at the
# tens of MB/s a fetch reads; BENCHMARKS.md, "Rehearsal").
DEFAULT_PART_BYTES = 64 << 20
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class Document(NamedTuple):
    """One document: a stable id (used for hash splits) and its text."""

    id: str
    text: str


class CorpusError(ValueError):
    """A corpus is missing, empty or malformed."""


def clean_text(text: str) -> tuple[str, int]:
    """Replace lone surrogates (undecodable bytes, bad JSON escapes) by U+FFFD; count them."""
    cleaned, n = _LONE_SURROGATE.subn("\ufffd", text)
    return cleaned, n


def decode_bytes(data: bytes) -> str:
    """Decode UTF-8, keeping each undecodable byte as a lone surrogate.

    Sources use this so that `write_corpus` (via `clean_text`) is the one place that
    replaces undecodable bytes by U+FFFD and counts them.
    """
    return data.decode("utf-8", "surrogateescape")


def hash_fraction(doc_id: str) -> float:
    """A stable number in [0, 1) from a document id (sha256, independent of Python's hash)."""
    digest = hashlib.sha256(doc_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def hash_split(
    docs: Iterable[Document], val_fraction: float, train: str = "train", val: str = "val"
) -> Iterator[tuple[str, Document]]:
    """Route each document to `val` when hash_fraction(id) < val_fraction, else `train`."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction={val_fraction}: must be strictly between 0 and 1")
    for doc in docs:
        yield (val if hash_fraction(doc.id) < val_fraction else train), doc


def limit(
    docs: Iterable[Document], max_docs: int | None = None, max_bytes: int | None = None
) -> Iterator[Document]:
    """Stop after `max_docs` documents, or once `max_bytes` UTF-8 bytes have been yielded."""
    n_bytes = 0
    for n_docs, doc in enumerate(docs):
        if max_docs is not None and n_docs >= max_docs:
            return
        if max_bytes is not None and n_bytes >= max_bytes:
            return
        yield doc
        if max_bytes is not None:  # an encode per document costs a pass over the text
            n_bytes += len(doc.text.encode("utf-8", "surrogatepass"))


@dataclass
class SplitStats:
    """What was written to one split, and how far its source was read (the resume point)."""

    documents: int = 0
    text_bytes: int = 0
    replaced_chars: int = 0
    empty_skipped: int = 0
    consumed: int = 0  # documents read for this split, empty ones included
    raw_bytes: int = 0  # their UTF-8 bytes as read (what `limit` counts)
    content: Any = field(default_factory=hashlib.sha256, repr=False)

    def record(self) -> dict[str, Any]:
        return {
            "documents": self.documents,
            "text_bytes": self.text_bytes,
            "replaced_chars": self.replaced_chars,
            "empty_skipped": self.empty_skipped,
            "content_sha256": self.content.hexdigest(),
        }

    def state(self) -> dict[str, Any]:
        return {**self.record(), "consumed": self.consumed, "raw_bytes": self.raw_bytes}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> SplitStats:
        fields = ("documents", "text_bytes", "replaced_chars", "empty_skipped", "consumed")
        stats = cls(**{k: int(state[k]) for k in fields}, raw_bytes=int(state["raw_bytes"]))
        stats.content = _chained(state["content_sha256"])
        return stats


def _chained(previous_hex: str) -> Any:
    """The content hash of the next part: sha256 seeded with the previous parts' digest, so a
    resumed fetch (hashlib states cannot be saved) ends on the same digest as an unbroken one."""
    return hashlib.sha256(previous_hex.encode("ascii"))


class _SplitWriter:
    """Streams documents of one split into a zstd-compressed JSONL file, one zstd frame per
    part; `end_part` makes everything written so far durable and returns the file's length."""

    def __init__(self, path: Path, stats: SplitStats | None = None, length: int = 0) -> None:
        self.path = path
        self._raw: IO[bytes] = open(path, "r+b" if length else "wb")  # noqa: SIM115 (close())
        if length:
            self._raw.truncate(length)  # drop the tail of a part a kill interrupted
            self._raw.seek(length)
        self._zw = self._frame()
        self.stats = stats or SplitStats()

    def _frame(self) -> Any:
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL).stream_writer(self._raw, closefd=False)

    def add(self, doc: Document) -> int:
        """Write one document; return its UTF-8 bytes as read (before cleaning)."""
        text, n_bad = clean_text(doc.text)
        doc_id, _ = clean_text(doc.id)
        self.stats.replaced_chars += n_bad
        self.stats.consumed += 1
        if not text or text.isspace():  # = not text.strip(), without copying the text
            self.stats.empty_skipped += 1
            raw = len(doc.text.encode("utf-8", "surrogatepass"))
        else:
            data = text.encode("utf-8")
            raw = len(doc.text.encode("utf-8", "surrogatepass")) if n_bad else len(data)
            self.stats.documents += 1
            self.stats.text_bytes += len(data)
            for piece in (doc_id.encode(), b"\0", data, b"\0"):  # no concatenated copy
                self.stats.content.update(piece)
            line = json.dumps({"id": doc_id, "text": text}, ensure_ascii=False) + "\n"
            self._zw.write(line.encode("utf-8"))
        self.stats.raw_bytes += raw
        return raw

    def end_part(self) -> int:
        self._zw.close()  # type: ignore[no-untyped-call]  # ends the frame; the file stays open
        self._raw.flush()
        os.fsync(self._raw.fileno())
        self._zw = self._frame()
        self.stats.content = _chained(self.stats.content.hexdigest())
        return self._raw.tell()

    def close(self) -> None:
        self._zw.close()  # type: ignore[no-untyped-call]
        self._raw.flush()
        os.fsync(self._raw.fileno())
        self._raw.close()


# What a resumable stream is told: split -> (documents consumed, their UTF-8 bytes as read).
Progress = Mapping[str, tuple[int, int]]
Routed = Iterable[tuple[str, Document]]


class ResumableStream:
    """A routed document stream that can be entered at a recorded position: `position` is
    where the documents routed so far end (JSON; saved with each part of a fetch), and
    `routed` continues from such a position, or from the start where it is None."""

    def routed(self, progress: Progress, position: Any) -> Routed:
        raise NotImplementedError

    def position(self) -> Any:
        raise NotImplementedError


Source = Routed | Callable[[Progress], Routed] | ResumableStream


def _state(
    identity: dict[str, Any], writers: dict[str, _SplitWriter], routed: Source, files: Any
) -> dict[str, Any]:
    """Close the current part of every split (durably) and return the state that records
    them, with the source's position where it has one (a resume enters it there) and the
    record of its files (`fetch_state.SourceFiles`)."""
    # the state (content digest included) is taken before end_part starts the next part
    splits = {name: {**w.stats.state(), "length": w.end_part()} for name, w in writers.items()}
    state: dict[str, Any] = {"identity": identity, "splits": splits, "sources": files}
    if isinstance(routed, ResumableStream):
        state["position"] = routed.position()
    return state


def write_corpus(
    out_dir: str | os.PathLike[str],
    routed: Source,
    *,
    splits: Iterable[str],
    source: dict[str, Any],
    inputs: Sequence[dict[str, str]] | Callable[[], Sequence[dict[str, str]]] = (),
    config: dict[str, Any] | None = None,
    started: _dt.datetime | None = None,
    part_bytes: int = DEFAULT_PART_BYTES,
    files: Sequence[Path] = (),
) -> dict[str, dict[str, Any]]:
    """Write every (split, document) of `routed` and a manifest per split; return manifests.

    `splits` names every split that must come out non-empty; `source` describes where the
    text came from (dataset id/revision/config/split, local paths, Python version...).
    `inputs` (records from `input_record`) may be a callable, evaluated once every
    document has been read (for sources that learn which files they opened as they go).
    Nothing is renamed into place unless every split has at least one document.
    `config` (the fetch step's resolved settings) and `started` (when it began; default:
    now) go into every split's manifest.

    Resumable: each split is written to `.<split>.jsonl.zst.partial` in parts, one zstd
    frame per `part_bytes` of source text read; after each part every split is fsynced and
    the fetch state (`.fetch-state.json`: lengths, counts, content hash) is saved. A rerun
    of the same fetch (same splits, source and config) after an error or a kill truncates
    the files to the last complete part and continues from there: a `ResumableStream` is
    entered at the position saved with that part (finished files and shards are not read
    again), a callable is called with each split's progress (a source that can skip cheaply
    does so), and for a plain iterable the documents already consumed are read again and
    dropped. The result is the
    same, byte for byte, as an unbroken fetch. Complete files are renamed into place at the
    end and the state removed.

    One source: the state records the local `files` the source reads (size, modification
    time, and the sha256 of `inputs` where they are given as a sequence); a rerun over a
    changed file starts again from the start with a WARNING (`fetch_state`), and one that
    changed while it was read is refused. A full disk is `DiskFull`, one line; the part it
    cut short is removed and the complete ones kept for a rerun.
    """
    started = started or utc_now()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys(splits))
    identity = {"splits": names, "source": source, "config": config, "part_bytes": part_bytes}
    sources = SourceFiles(files, None if callable(inputs) else inputs)
    writers, files_record = _write_parts(out, identity, routed, part_bytes, sources)
    _publish(out, source, writers, sources, files_record)
    input_records = list(inputs() if callable(inputs) else inputs)
    return {
        name: _split_manifest(
            corpus_file(out, name),
            {"split": name, "source": source, **writer.stats.record(), "part_bytes": part_bytes},
            writer.stats.replaced_chars,
            inputs=input_records,
            config=config,
            started=started,
        )
        for name, writer in writers.items()
    }


def _write_parts(
    out: Path, identity: dict[str, Any], routed: Source, part_bytes: int, sources: SourceFiles
) -> tuple[dict[str, _SplitWriter], dict[str, Any]]:
    """Stream every document into its split's partial file (`_write_from`), resumed where an
    interrupted fetch of the same source stopped; where what it read has changed since, the
    fetch starts again from the start, with a WARNING. Returns the closed writers and the
    record of the source files when the fetch began."""
    state = load_state(out, identity, sources)
    files = state["sources"] if state else sources.record()
    try:
        return _write_from(out, identity, routed, part_bytes, state, files), files
    except SourceChanged as exc:
        if state is None:
            raise
        log.warning("%s: %s; the fetch starts again from the start", out, exc)
        remove_partial(out, identity["splits"])
        files = sources.record()
        return _write_from(out, identity, routed, part_bytes, None, files), files


def _write_from(
    out: Path,
    identity: dict[str, Any],
    routed: Source,
    part_bytes: int,
    state: dict[str, Any] | None,
    files: dict[str, Any],
) -> dict[str, _SplitWriter]:
    """Stream every document into its split's partial file from `state` (None: the start),
    saving the fetch state (with `files`, the source files' record) after each part; return
    the closed writers. On any error the files are closed and kept for a resume when a part
    was saved, else removed (`fetch_state.stopped`)."""
    names: list[str] = identity["splits"]
    writers: dict[str, _SplitWriter] = {}
    saved = {n: s["length"] for n, s in state["splits"].items()} if state else None
    try:
        for name in names:
            writers[name] = _resumed_writer(out, name, state)
        since = 0
        for split, doc in _resumed_stream(out, routed, writers, state):
            if split not in writers:
                raise CorpusError(f"document {doc.id!r} routed to unknown split {split!r}")
            since += writers[split].add(doc)
            if since >= part_bytes:
                new = _state(identity, writers, routed, files)
                save_state(out, new)
                saved, since = {n: s["length"] for n, s in new["splits"].items()}, 0
    except BaseException as exc:
        stopped(out, names, writers, saved, exc)
        raise
    for writer in writers.values():
        writer.close()
    return writers


def _resumed_writer(out: Path, name: str, state: dict[str, Any] | None) -> _SplitWriter:
    """The writer of one split: fresh, or continuing after the last part `state` records."""
    split_state = state["splits"][name] if state else None
    return _SplitWriter(
        partial_corpus_file(out, name),
        SplitStats.from_state(split_state) if split_state else None,
        split_state["length"] if split_state else 0,
    )


def _resumed_stream(
    out: Path,
    routed: Source,
    writers: dict[str, _SplitWriter],
    state: dict[str, Any] | None,
) -> Routed:
    """The documents still to write: a ResumableStream is entered at the saved position, a
    callable source is told each split's progress, a plain iterable is read again from the
    start and the documents already consumed dropped."""
    progress = {n: (w.stats.consumed, w.stats.raw_bytes) for n, w in writers.items()}
    if state is not None:
        log.info("%s: resuming the fetch after %s documents", out, progress)
    if isinstance(routed, ResumableStream):
        return routed.routed(progress, state.get("position") if state else None)
    if callable(routed):
        return routed(progress)
    return itertools.islice(routed, sum(c for c, _ in progress.values()), None)


def _publish(
    out: Path,
    source: dict[str, Any],
    writers: dict[str, _SplitWriter],
    sources: SourceFiles,
    files: dict[str, Any],
) -> None:
    """Rename the complete splits into place (none unless every split has a document, and
    none where a source file changed while it was read: `files`, their record when the fetch
    began) and remove the fetch state."""
    names = list(writers)
    try:
        _check_not_empty(out, source, writers)
        check_unchanged(out, sources, files)
    except (CorpusError, SourceChanged):
        remove_partial(out, names)
        raise
    for name in names:  # replaced below: an old manifest must not pair with new data
        invalidate_manifest(corpus_file(out, name))
        os.replace(partial_corpus_file(out, name), corpus_file(out, name))
    fetch_state(out).unlink(missing_ok=True)


def _split_manifest(
    path: Path,
    fields: dict[str, Any],
    replaced_chars: int,
    *,
    inputs: list[dict[str, str]],
    config: dict[str, Any] | None,
    started: _dt.datetime,
) -> dict[str, Any]:
    """Write the manifest (kind "corpus") of one published split and return it."""
    if replaced_chars:
        log.warning("%s: replaced %d undecodable characters by U+FFFD", path, replaced_chars)
    return write_manifest(
        path, artifact_type="corpus", inputs=inputs, fields=fields, config=config, started=started
    )


def _check_not_empty(out: Path, source: dict[str, Any], writers: dict[str, _SplitWriter]) -> None:
    empty = [name for name, w in writers.items() if w.stats.documents == 0]
    if not empty:
        return
    total = sum(w.stats.documents for w in writers.values())
    skipped = sum(w.stats.empty_skipped for w in writers.values())
    what = source.get("kind", "corpus")
    if total == 0:
        raise CorpusError(
            f"{what} corpus for {out} has no non-empty documents ({skipped} empty skipped): "
            f"check the input paths/dataset and the text field"
        )
    raise CorpusError(
        f"split(s) {', '.join(empty)} of {out} would be empty ({total} documents in all): "
        f"raise the val fraction / limits or use a larger corpus"
    )


def read_corpus_manifest(corpus_dir: str | os.PathLike[str], split: str) -> dict[str, Any]:
    """The manifest of one split, with a clear error when the split is missing."""
    path = corpus_file(corpus_dir, split)
    if not path.is_file():
        found = sorted(
            q.name[: -len(CORPUS_SUFFIX)] for q in Path(corpus_dir).glob(f"*{CORPUS_SUFFIX}")
        )
        raise CorpusError(
            f"{path}: no split {split!r} in corpus {corpus_dir} (found: {found or 'nothing'}); "
            f"run `leviathan data fetch ... --out {corpus_dir}` or pick another split"
        )
    return read_manifest(path, artifact_type="corpus")


def corpus_splits(corpus_dir: str | os.PathLike[str]) -> list[str]:
    """Names of the complete splits (file + manifest) in a corpus directory."""
    d = Path(corpus_dir)
    if not d.is_dir():
        raise CorpusError(f"{d}: corpus directory not found; run `leviathan data fetch` first")
    return sorted(
        p.name[: -len(CORPUS_SUFFIX)]
        for p in d.glob(f"*{CORPUS_SUFFIX}")
        if manifest_path(p).is_file()
    )
