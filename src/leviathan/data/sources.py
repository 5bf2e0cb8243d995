"""Document sources other than the embedded corpus: local text, any HF dataset, The Pile.

Each source yields `Document`s and describes itself in a source record that goes into
the corpus manifests (dataset id, config, revision and commit sha, split, data files,
limits; or local paths). Reading is streaming throughout: nothing holds a whole corpus.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leviathan.data.corpus import CorpusError, Document, decode_bytes
from leviathan.data.fetch_state import SourceChanged
from leviathan.data.jsonl import ZSTD_SUFFIXES, jsonl_lines

log = logging.getLogger(__name__)

JSONL_SUFFIXES = (".jsonl", ".jsonl.zst", ".json.zst", ".jsonl.zstd")

# The original Pile is no longer on the Hub; this is the default mirror: the Pile without the
# 5 of its 22 subsets its own paper does not clear for training (Books3, BookCorpus2,
# OpenSubtitles, YTSubtitles, OWT2; the mirror's dataset card). A RECON choice (README):
# every value is overridable from the config / command line, and `corpus.local_dir` takes
# the original Pile's files where one has them.
PILE_DATASET = "monology/pile-uncopyrighted"
PILE_TRAIN_SPLIT = "train"
PILE_VAL_SPLIT = "validation"
PILE_LOCAL_TRAIN_GLOB = "train/*.jsonl.zst"
PILE_LOCAL_VAL_GLOB = "val.jsonl.zst"


class HubUnreachableError(ConnectionError, ValueError):
    """The Hugging Face Hub (or a mirror) could not be reached for a dataset.

    Also a ValueError, so the CLI reports it as a user-fixable error without a traceback.
    """


def expand_paths(patterns: Sequence[str]) -> list[Path]:
    """Files matching the paths/globs (recursive `**` allowed), sorted and de-duplicated."""
    if not patterns:
        raise CorpusError("no input paths given: pass files, directories or globs")
    files: set[Path] = set()
    for pattern in patterns:
        matches = glob.glob(pattern, recursive=True)
        if not matches:
            raise CorpusError(f"{pattern}: matches no file; check the path or quote the glob")
        for match in map(Path, matches):
            if match.is_dir():
                files.update(q for q in match.rglob("*") if q.is_file())
            else:
                files.add(match)
    return sorted(files)


def _is_jsonl(path: Path) -> bool:
    return path.name.endswith(JSONL_SUFFIXES)


def _line_text(obj: Any, text_field: str, where: str) -> str:
    """The text of one JSON line's object: its `text_field`, which must be a string."""
    if not isinstance(obj, dict):
        raise CorpusError(f"{where}: a JSON {type(obj).__name__}, not an object with a text field")
    if text_field not in obj:
        raise CorpusError(
            f"{where}: no field {text_field!r} (fields: {sorted(obj)}); pass the right --text-field"
        )
    text = obj[text_field]
    if not isinstance(text, str):
        raise CorpusError(
            f"{where}: field {text_field!r} is {json.dumps(text)[:40]} (a JSON "
            f"{_JSON_TYPES.get(type(text), type(text).__name__)}), not a string; fix the line "
            "or pass the right --text-field"
        )
    return text


_JSON_TYPES = {
    type(None): "null",
    bool: "boolean",
    int: "number",
    float: "number",
    list: "array",
    dict: "object",
}


class LocalFiles:
    """Documents of local files, in order, that a fetch resumes where it stopped.

    JSONL(.zst) files give one document per line (id `<id_base(path)>:<line number>`), any
    other file one document (id: its path). `position()` is where the documents yielded so
    far end: the file, its line and byte offset, the sha256 of the lines read of that file
    (`read_sha256`: decompressed, for a zstd one), and the sha256 of every file finished
    (computed from the bytes read, so a file is read once). `documents(skip, position)`
    continues there: finished files are not opened; an uncompressed JSONL file is entered at
    its byte offset, after its bytes before it are hashed again; a zstd one is decompressed
    again from its start to the line (a zstd stream can be entered only at a frame boundary,
    and a file compressed in one go, as the Pile's are, is one frame), which a log line says.
    Either way, what was read before is checked against `read_sha256`: a file changed there
    raises `SourceChanged` (the fetch starts again), and the file's sha256 is that of every
    byte read of it. Without a position, the first `skip` documents are passed over unparsed
    (a fetch state written before positions were saved).
    """

    def __init__(
        self,
        paths: Sequence[Path],
        text_field: str = "text",
        id_base: Callable[[Path], str] | None = None,
    ) -> None:
        self.paths, self.text_field = list(paths), text_field
        self.id_base = id_base or (lambda path: path.as_posix())
        self._at: dict[str, Any] = _file_start(0, [])
        self._read: Any = None  # sha256 of the current file's lines read so far

    def position(self) -> dict[str, Any]:
        inside = self._at["line"] and self._read is not None
        return dict(
            self._at,
            sha256=list(self._at["sha256"]),
            read_sha256=self._read.hexdigest() if inside else None,
        )

    def used(self) -> list[Path]:
        """The files read so far (those finished and the current one)."""
        return self.paths[: min(len(self.paths), self._at["file"] + 1)]

    def sha256(self, index: int) -> str | None:
        """The sha256 of file `index` where reading it whole gave it, else None."""
        known = self._at["sha256"]
        return known[index] if index < len(known) else None

    def documents(
        self, skip: int = 0, position: Mapping[str, Any] | None = None
    ) -> Iterator[Document]:
        if position is not None:
            self._at = {k: v for k, v in position.items() if k != "read_sha256"}
            self._at["sha256"] = list(position["sha256"])
            if position["file"]:
                log.info("%d finished file(s) skipped unread", position["file"])
        else:
            self._at = _file_start(0, [])
        expected = position.get("read_sha256") if position is not None else None
        return self._documents(Skip(skip if position is None else 0), expected)

    def _documents(self, skip: Skip, expected: str | None) -> Iterator[Document]:
        while self._at["file"] < len(self.paths):
            index, path = self._at["file"], self.paths[self._at["file"]]
            if _is_jsonl(path):
                yield from self._jsonl(index, path, skip, expected)
                expected = None
            elif skip.take():
                self._at = _file_start(index + 1, [*self._at["sha256"], None])
            else:
                data = path.read_bytes()
                self._at = _file_start(
                    index + 1, [*self._at["sha256"], hashlib.sha256(data).hexdigest()]
                )
                yield Document(path.as_posix(), decode_bytes(data))

    def _jsonl(
        self, index: int, path: Path, skip: Skip, expected: str | None
    ) -> Iterator[Document]:
        """The documents of one JSONL file, from the position's line on (what was read before
        it checked against `expected`); the position moves to the next file with the last
        line (a one-line look-ahead), so a finished file is never entered again."""
        line0, offset = self._at["line"], self._at["offset"]
        zstd = path.name.endswith(ZSTD_SUFFIXES)
        self._read = read = hashlib.sha256()
        digest = hashlib.sha256() if zstd else read  # the file as stored: compressed or not
        if zstd and line0:
            log.info(
                "%s: decompressing it again to line %d (a zstd stream is entered only at a frame boundary)",
                path,
                line0,
            )
        elif line0:
            _hash_prefix(path, offset, expected, read)
        lines = jsonl_lines(path, 0 if zstd else offset, digest if zstd else None)
        numbered = enumerate(lines, start=1) if zstd else enumerate(lines, start=line0 + 1)
        offset = 0 if zstd else offset
        base = self.id_base(path)
        for (lineno, line), last in _with_last(numbered):
            offset += len(line)
            read.update(line)
            if lineno < line0:  # zstd: a line read again to reach the position
                continue
            if lineno == line0:
                _check_read(path, lineno, expected, read)
                if not last:
                    continue
            if last:  # the file's hash is complete: the reader has read its end
                self._at = _file_start(index + 1, [*self._at["sha256"], digest.hexdigest()])
            else:
                self._at = {**self._at, "line": lineno, "offset": offset}
            if lineno == line0 or not line.strip() or skip.take():
                continue
            obj = _json_line(line, f"{path}:{lineno}")
            yield Document(f"{base}:{lineno}", _line_text(obj, self.text_field, f"{path}:{lineno}"))
        if self._at["file"] == index:  # an empty file, or one that ends before the position
            if line0 and zstd:
                raise SourceChanged(f"{path}: ends before line {line0}, where the fetch was")
            self._at = _file_start(index + 1, [*self._at["sha256"], digest.hexdigest()])


def _hash_prefix(path: Path, offset: int, expected: str | None, read: Any) -> None:
    """Feed `read` with the first `offset` bytes of `path` (the lines a resumed fetch read
    before it stopped) and check them against `expected`."""
    with open(path, "rb") as fh:
        left = offset
        while left and (block := fh.read(min(left, 1 << 20))):
            read.update(block)
            left -= len(block)
    if left:
        raise SourceChanged(f"{path}: now shorter than the {offset:,} bytes the fetch had read")
    _check_read(path, None, expected, read)


def _check_read(path: Path, line: int | None, expected: str | None, read: Any) -> None:
    if expected is None or read.hexdigest() != expected:
        where = f"its first {line} lines" if line is not None else "its bytes before the position"
        raise SourceChanged(f"{path}: {where} are not those the interrupted fetch read")


def _file_start(index: int, sha256: list[str | None]) -> dict[str, Any]:
    return {"file": index, "line": 0, "offset": 0, "sha256": sha256}


def _with_last(items: Iterable[Any]) -> Iterator[tuple[Any, bool]]:
    """Each item with whether it is the last one (one item read ahead)."""
    it = iter(items)
    try:
        previous = next(it)
    except StopIteration:
        return
    for item in it:
        yield previous, False
        previous = item
    yield previous, True


def _json_line(line: bytes, where: str) -> Any:
    text_line = decode_bytes(line)  # bad bytes: replaced and counted by write_corpus
    try:
        return json.loads(text_line)
    except json.JSONDecodeError as exc:
        raise CorpusError(f"{where}: not valid JSON ({exc.msg})") from None


class Skip:
    """Documents still to pass over, unparsed, before a source yields (a resumed fetch)."""

    def __init__(self, n: int = 0) -> None:
        self.remaining = n

    def take(self) -> bool:
        """True (and one fewer left) while documents remain to be skipped."""
        if self.remaining > 0:
            self.remaining -= 1
            return True
        return False


def text_source(paths: Sequence[Path]) -> dict[str, Any]:
    return {"kind": "text", "paths": [p.as_posix() for p in paths]}


@dataclass(frozen=True)
class HFSpec:
    """Which Hub (or local-builder) dataset split to read."""

    dataset: str  # hub id ("Salesforce/wikitext") or builder ("json", "text", "parquet")
    split: str
    config: str | None = None
    revision: str | None = None
    data_files: tuple[str, ...] | None = None
    text_field: str = "text"


def _hub_fix(spec: HFSpec) -> str:
    return (
        f"could not reach the Hugging Face Hub for dataset {spec.dataset!r}. Fixes: set "
        f"HF_ENDPOINT to a reachable mirror; or download the files elsewhere and pass a local "
        f"path (`leviathan data fetch pile --local-dir DIR`, `leviathan data fetch text ...`, "
        f"or `leviathan data fetch hf --dataset json --data-files ...`); or pre-fill the HF "
        f"cache (HF_HOME) on a connected machine and set HF_DATASETS_OFFLINE=1"
    )


def _row_text(row: dict[str, Any], spec: HFSpec, index: int) -> str:
    try:
        return str(row[spec.text_field])
    except KeyError:
        raise CorpusError(
            f"dataset {spec.dataset!r} split {spec.split!r} row {index}: no field "
            f"{spec.text_field!r} (fields: {sorted(row)}); pass the right --text-field"
        ) from None


class HubSplit:
    """One dataset split streamed through `datasets` (`load_dataset(..., streaming=True)`),
    id `<split>/<row>`, that a fetch resumes where it stopped.

    `position()` is the stream's own resumable state (`IterableDataset.state_dict()`: the
    shard and the row in it) after the last row yielded; `documents(skip, position)` loads
    it (`load_state_dict`), so finished shards are neither downloaded nor read again and
    the current one is read from its start to the row (`datasets` skips rows by reading
    them). Without a position the first `skip` rows are read again and dropped.
    """

    def __init__(self, spec: HFSpec) -> None:
        self.spec = spec
        self._ds: Any = None
        self._position: Any = None

    def position(self) -> Any:
        return self._ds.state_dict() if self._ds is not None else self._position

    def documents(self, skip: int = 0, position: Any = None) -> Iterator[Document]:
        self._position = position
        return self._rows(skip, position)

    def _rows(self, skip: int, position: Any) -> Iterator[Document]:
        spec = self.spec
        try:
            ds = _load_stream(spec)
            self._ds = ds
            rows = self._entered(ds, skip, position)
            for index, row in enumerate(rows, start=skip):
                yield Document(f"{spec.split}/{index}", _row_text(row, spec, index))
        except (ConnectionError, TimeoutError) as exc:
            raise HubUnreachableError(f"{_hub_fix(spec)} (cause: {exc})") from exc
        except (FileNotFoundError, ValueError) as exc:
            if isinstance(exc, CorpusError):
                raise
            raise CorpusError(
                f"dataset {spec.dataset!r} (config {spec.config!r}, split {spec.split!r}): {exc}; "
                f"check the dataset id, config, split names (--split/--train-split/--val-split) "
                f"and data files"
            ) from exc

    def _entered(self, ds: Any, skip: int, position: Any) -> Iterable[Any]:
        """The rows of `ds` after `position` (its saved state), else after the first `skip`."""
        spec = self.spec
        if position is not None and hasattr(ds, "load_state_dict"):
            ds.load_state_dict(position)
            log.info(
                "dataset %r split %r: entering the stream at its saved state %s (finished "
                "shards are not read again)",
                spec.dataset,
                spec.split,
                json.dumps(position)[:400],
            )
            return ds  # type: ignore[no-any-return]
        if skip:
            log.info(
                "dataset %r split %r: reading the first %d rows again to skip them (no saved "
                "stream state%s)",
                spec.dataset,
                spec.split,
                skip,
                "" if position is None else ": this datasets version cannot load one",
            )
        return itertools.islice(ds, skip, None)


def _load_stream(spec: HFSpec) -> Any:
    import datasets  # here: seconds to import, and only a Hub fetch needs it

    return datasets.load_dataset(
        spec.dataset,
        spec.config,
        split=spec.split,
        revision=spec.revision,
        data_files=list(spec.data_files) if spec.data_files else None,
        streaming=True,
    )


def hf_documents(spec: HFSpec) -> Iterator[Document]:
    """Stream a split with `datasets.load_dataset(..., streaming=True)`; id `<split>/<row>`."""
    return HubSplit(spec).documents()


def hub_commit(spec: HFSpec) -> str | None:
    """Commit sha of the dataset revision on the Hub, or None when unknown/offline."""
    if spec.data_files or "/" not in spec.dataset or os.path.exists(spec.dataset):
        return None  # a local builder ("json", "text", ...) or a local folder
    try:
        from huggingface_hub import HfApi  # here, as `datasets` above

        info = HfApi().dataset_info(spec.dataset, revision=spec.revision, timeout=30)
        return info.sha
    except Exception:  # offline, gated, mirror without the API: recorded as unknown
        return None


def hf_source(spec: HFSpec, limits: dict[str, Any]) -> dict[str, Any]:
    """Source record of a dataset split: id, config, revision, commit sha, data files."""
    record: dict[str, Any] = {
        "kind": "hf",
        "dataset": spec.dataset,
        "config": spec.config,
        "split": spec.split,
        "revision": spec.revision,
        "commit_sha": hub_commit(spec),
        "text_field": spec.text_field,
        "limits": limits,
    }
    if spec.data_files:
        record["data_files"] = list(spec.data_files)
    if endpoint := os.environ.get("HF_ENDPOINT"):
        record["endpoint"] = endpoint
    return record


def pile_local_files(root: Path, pattern: str) -> LocalFiles:
    """The Pile's own `*.jsonl.zst` files under `root` matching `pattern`, in sorted order
    (ids `<path under root>:<line>`); a limited read records only the files it used
    (`LocalFiles.used`)."""
    if not root.is_dir():
        raise CorpusError(
            f"{root}: Pile directory not found; pass the folder that holds "
            f"{PILE_LOCAL_TRAIN_GLOB} and {PILE_LOCAL_VAL_GLOB}"
        )
    files = sorted(root.glob(pattern))
    if not files:
        raise CorpusError(f"{root}: no files match {pattern!r}; check --local-dir and the globs")
    return LocalFiles(files, "text", lambda path: path.relative_to(root).as_posix())
