"""`leviathan data fetch`: turn a text source into a corpus directory.

Every function writes `<out>/<split>.jsonl.zst` plus manifests through `write_corpus`
and returns the manifests by split. Train/val come either from the source's own splits
or from `hash_split` on the document ids (`val_fraction`).
"""

from __future__ import annotations

import datetime as _dt
import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Protocol

from leviathan.data.corpus import (
    DEFAULT_PART_BYTES,
    Document,
    Progress,
    ResumableStream,
    Routed,
    hash_split,
    limit,
    write_corpus,
)
from leviathan.data.embedded import embedded_documents, embedded_source
from leviathan.data.sources import (
    PILE_DATASET,
    PILE_LOCAL_TRAIN_GLOB,
    PILE_LOCAL_VAL_GLOB,
    PILE_TRAIN_SPLIT,
    PILE_VAL_SPLIT,
    HFSpec,
    HubSplit,
    LocalFiles,
    expand_paths,
    hf_source,
    pile_local_files,
    text_source,
)
from leviathan.manifest import input_record
from leviathan.provenance import utc_now

DEFAULT_VAL_FRACTION = 0.05

Manifests = dict[str, dict[str, Any]]
Limits = tuple[int | None, int | None]  # (max_docs, max_bytes)


def _limits_record(limits: Limits) -> dict[str, int | None]:
    return {"max_docs": limits[0], "max_bytes": limits[1]}


def _config(source: str, **settings: Any) -> dict[str, Any]:
    """The resolved settings of a fetch (the manifests' `config`): what decides the corpus,
    not where it is written nor how fast (output directory, worker counts)."""
    return {"step": "fetch", "source": source, **settings}


def _spec_record(spec: HFSpec) -> dict[str, Any]:
    rec = asdict(spec)
    rec["data_files"] = list(spec.data_files) if spec.data_files else None
    return rec


def _route(split: str, docs: Iterable[Document]) -> Iterator[tuple[str, Document]]:
    for doc in docs:
        yield split, doc


class DocumentSource(Protocol):
    """Documents a fetch resumes: `documents(skip, position)` continues at a position that
    `position()` gave (None: after passing over the first `skip`)."""

    def documents(self, skip: int, position: Any) -> Iterable[Document]: ...

    def position(self) -> Any: ...


class _Rereading:
    """Documents that can skip only by reading them again (the embedded corpus)."""

    def __init__(self, docs: Callable[[], Iterable[Document]]) -> None:
        self._docs = docs

    def documents(self, skip: int, position: Any) -> Iterable[Document]:
        return itertools.islice(self._docs(), skip, None)

    def position(self) -> Any:
        return None


def _limited(
    docs: DocumentSource, limits: Limits, done: tuple[int, int], position: Any
) -> Iterator[Document]:
    """`limit` of documents resumed after `done` = (documents, bytes) already read, at
    `position`; a limit already reached reads nothing."""
    (max_docs, max_bytes), (n, nbytes) = limits, done
    left_docs = None if max_docs is None else max_docs - n
    left_bytes = None if max_bytes is None else max_bytes - nbytes
    stream = docs.documents(n, position)  # sets the source's position, reads nothing yet
    if (left_docs is not None and left_docs <= 0) or (left_bytes is not None and left_bytes <= 0):
        return iter(())
    return limit(stream, left_docs, left_bytes)


class _HashSplitStream(ResumableStream):
    """One document source hash-split into train/val, resumable at its position."""

    def __init__(self, docs: DocumentSource, limits: Limits, val_fraction: float) -> None:
        self.docs, self.limits, self.val_fraction = docs, limits, val_fraction

    def routed(self, progress: Progress, position: Any) -> Routed:
        done = tuple(sum(p[i] for p in progress.values()) for i in (0, 1))
        docs = _limited(self.docs, self.limits, (done[0], done[1]), position)
        return hash_split(docs, self.val_fraction)

    def position(self) -> Any:
        return self.docs.position()


class _SplitStream(ResumableStream):
    """One document source per split, read one after the other, each resumable at its own
    position."""

    def __init__(self, docs: Mapping[str, DocumentSource], limits: Mapping[str, Limits]) -> None:
        self.docs, self.limits = docs, limits

    def routed(self, progress: Progress, position: Any) -> Routed:
        at = position or {}
        return itertools.chain.from_iterable(
            _route(name, _limited(docs, self.limits[name], progress[name], at.get(name)))
            for name, docs in self.docs.items()
        )

    def position(self) -> Any:
        return {name: docs.position() for name, docs in self.docs.items()}


def _inputs(files: LocalFiles, paths: Sequence[Path] | None = None) -> list[dict[str, str]]:
    """Input records of local files (`paths`, default: those read), each sha256 taken from the
    read where it read the file whole, else computed."""
    index = {p: i for i, p in enumerate(files.paths)}
    return [input_record(p, files.sha256(index[p])) for p in (paths or files.used())]


def fetch_embedded(
    out: str | os.PathLike[str],
    val_fraction: float = DEFAULT_VAL_FRACTION,
    workers: int | None = None,
    part_bytes: int = DEFAULT_PART_BYTES,
) -> Manifests:
    """The embedded stdlib corpus, split by document-id hash."""
    started = utc_now()
    source = {**embedded_source(), "val_fraction": val_fraction}
    docs = _Rereading(lambda: embedded_documents(workers=workers))
    return write_corpus(
        out,
        _HashSplitStream(docs, (None, None), val_fraction),
        splits=("train", "val"),
        source=source,
        config=_config("embedded", val_fraction=val_fraction),
        started=started,
        part_bytes=part_bytes,
    )


def fetch_text(
    out: str | os.PathLike[str],
    patterns: Sequence[str],
    val_fraction: float = DEFAULT_VAL_FRACTION,
    text_field: str = "text",
    limits: Limits = (None, None),
    part_bytes: int = DEFAULT_PART_BYTES,
) -> Manifests:
    """Local files/globs (one document per file, or per line of JSONL[.zst]), hash split.
    Resumable (write_corpus): a resumed fetch skips the files it finished unread and enters
    the current one at its byte offset (`LocalFiles`)."""
    started = utc_now()
    config = _config(
        "text",
        patterns=list(patterns),
        val_fraction=val_fraction,
        text_field=text_field,
        limits=_limits_record(limits),
    )
    paths = expand_paths(patterns)
    source = {**text_source(paths), "val_fraction": val_fraction, "limits": _limits_record(limits)}
    files = LocalFiles(paths, text_field)
    return write_corpus(
        out,
        _HashSplitStream(files, limits, val_fraction),
        splits=("train", "val"),
        source=source,
        inputs=lambda: _inputs(files, paths),
        config=config,
        started=started,
        part_bytes=part_bytes,
        files=paths,
    )


def fetch_hf(
    out: str | os.PathLike[str],
    specs: Mapping[str, HFSpec],
    val_fraction: float | None = None,
    limits: Limits = (None, None),
    part_bytes: int = DEFAULT_PART_BYTES,
) -> Manifests:
    """Dataset splits through `datasets` streaming, resumable: a resumed fetch enters each
    stream at the state saved with the last part (`HubSplit`: finished shards are not read
    again).

    `specs` maps each output split name to the dataset split it comes from. With
    `val_fraction`, exactly one spec is given and is hash-split into train/val.
    `limits` (max_docs, max_bytes) apply to every dataset split read.
    """
    started = utc_now()
    if not specs:
        raise ValueError("no dataset split given: pass e.g. --split train=train")
    config = _config(
        "hf",
        splits={name: _spec_record(s) for name, s in specs.items()},
        val_fraction=val_fraction,
        limits=_limits_record(limits),
    )
    local = [f for s in specs.values() for f in _local_files(s)]
    inputs = [input_record(f) for f in local]  # hashed before the read: a resume compares them
    if val_fraction is not None:
        if len(specs) != 1:
            raise ValueError(f"val_fraction needs exactly one dataset split, got {sorted(specs)}")
        spec = next(iter(specs.values()))
        source = {
            "kind": "hf",
            "val_fraction": val_fraction,
            "splits": {"train+val": hf_source(spec, _limits_record(limits))},
        }
        return write_corpus(
            out,
            _HashSplitStream(HubSplit(spec), limits, val_fraction),
            splits=("train", "val"),
            source=source,
            inputs=inputs,
            config=config,
            started=started,
            part_bytes=part_bytes,
            files=local,
        )
    source = {
        "kind": "hf",
        "splits": {name: hf_source(s, _limits_record(limits)) for name, s in specs.items()},
    }
    docs = {name: HubSplit(spec) for name, spec in specs.items()}
    return write_corpus(
        out,
        _SplitStream(docs, dict.fromkeys(specs, limits)),
        splits=specs.keys(),
        source=source,
        inputs=inputs,
        config=config,
        started=started,
        part_bytes=part_bytes,
        files=local,
    )


def _local_files(spec: HFSpec) -> list[Path]:
    return expand_paths(spec.data_files) if spec.data_files else []


def fetch_pile(
    out: str | os.PathLike[str],
    *,
    dataset: str = PILE_DATASET,
    config: str | None = None,
    revision: str | None = None,
    train_split: str = PILE_TRAIN_SPLIT,
    val_split: str = PILE_VAL_SPLIT,
    local_dir: str | os.PathLike[str] | None = None,
    train_glob: str = PILE_LOCAL_TRAIN_GLOB,
    val_glob: str = PILE_LOCAL_VAL_GLOB,
    train_limits: Limits = (None, None),
    val_limits: Limits = (None, None),
    part_bytes: int = DEFAULT_PART_BYTES,
) -> Manifests:
    """The Pile: a Hub mirror through `datasets` streaming, or a local folder of its files.

    The Pile's own validation split is used as val. Limits allow partial downloads.
    Resumable (write_corpus): local files finished are not read again, a Hub stream is
    entered at its saved state.
    """
    limits = {"train": train_limits, "val": val_limits}
    started = utc_now()
    if local_dir is not None:
        globs = {"train": train_glob, "val": val_glob}
        return _fetch_pile_local(out, Path(local_dir), globs, limits, started, part_bytes)
    base = HFSpec(dataset=dataset, split=train_split, config=config, revision=revision)
    specs = {"train": base, "val": replace(base, split=val_split)}
    return _fetch_pile_hf(out, specs, limits, started, part_bytes)


def _pile_limits(limits: Mapping[str, Limits]) -> dict[str, Any]:
    """The limits of a Pile fetch as its step config records them."""
    return {
        "train_limits": _limits_record(limits["train"]),
        "val_limits": _limits_record(limits["val"]),
    }


def _fetch_pile_local(
    out: str | os.PathLike[str],
    root: Path,
    globs: Mapping[str, str],
    limits: Mapping[str, Limits],
    started: _dt.datetime,
    part_bytes: int,
) -> Manifests:
    """The Pile from a local folder of its `*.jsonl.zst` files (`globs`: train and val)."""
    source: dict[str, Any] = {
        "kind": "pile-local",
        "local_dir": root.as_posix(),
        "train_glob": globs["train"],
        "val_glob": globs["val"],
        "limits": {name: _limits_record(limits[name]) for name in ("train", "val")},
    }
    config = _config(
        "pile-local",
        local_dir=root.as_posix(),
        train_glob=globs["train"],
        val_glob=globs["val"],
        **_pile_limits(limits),
    )
    docs = {name: pile_local_files(root, globs[name]) for name in ("train", "val")}
    return write_corpus(
        out,
        _SplitStream(docs, limits),
        splits=("train", "val"),
        source=source,
        inputs=lambda: [r for files in docs.values() for r in _inputs(files)],
        config=config,
        started=started,
        part_bytes=part_bytes,
        files=[p for files in docs.values() for p in files.paths],
    )


def _fetch_pile_hf(
    out: str | os.PathLike[str],
    specs: Mapping[str, HFSpec],
    limits: Mapping[str, Limits],
    started: _dt.datetime,
    part_bytes: int,
) -> Manifests:
    """The Pile from a Hub mirror through `datasets` streaming (`specs`: train and val)."""
    base, val = specs["train"], specs["val"]
    step_config = _config(
        "pile-hf",
        dataset=base.dataset,
        config=base.config,
        revision=base.revision,
        train_split=base.split,
        val_split=val.split,
        **_pile_limits(limits),
    )
    source = {
        "kind": "pile-hf",
        "splits": {name: hf_source(specs[name], _limits_record(limits[name])) for name in specs},
    }
    return write_corpus(
        out,
        _SplitStream({name: HubSplit(spec) for name, spec in specs.items()}, limits),
        splits=("train", "val"),
        source=source,
        config=step_config,
        started=started,
        part_bytes=part_bytes,
    )
