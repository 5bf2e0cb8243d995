"""Document sources other than the embedded corpus: local text, any HF dataset, The Pile.

Each source yields `Document`s and describes itself in a source record that goes into
the corpus manifests (dataset id, config, revision and commit sha, split, data files,
limits; or local paths). Reading is streaming throughout: nothing holds a whole corpus.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leviathan.data.corpus import CorpusError, Document, decode_bytes, jsonl_lines

JSONL_SUFFIXES = (".jsonl", ".jsonl.zst", ".json.zst", ".jsonl.zstd")

# The original Pile is no longer on the Hub; this is the default mirror (without the
# copyrighted subsets). Every value is overridable from the config / command line.
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


def jsonl_documents(
    path: Path, text_field: str = "text", id_base: str | None = None, skip: Skip | None = None
) -> Iterator[Document]:
    """One document per JSON line; id `<id_base or path>:<line number>`. `skip`: lines
    passed over without parsing them, as a resumed fetch asks."""
    base = id_base if id_base is not None else path.as_posix()
    skip = skip or Skip()
    for lineno, line in enumerate(jsonl_lines(path), start=1):
        if not line.strip() or skip.take():
            continue
        text_line = decode_bytes(line)  # bad bytes: replaced and counted by write_corpus
        try:
            obj = json.loads(text_line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        yield Document(f"{base}:{lineno}", _line_text(obj, text_field, f"{path}:{lineno}"))


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


def text_documents(
    paths: Sequence[Path], text_field: str = "text", skip: int = 0
) -> Iterator[Document]:
    """Local files: JSONL(.zst) files give one document per line, others one per file.
    The first `skip` documents are passed over without parsing or reading them."""
    left = Skip(skip)
    for path in paths:
        if _is_jsonl(path):
            yield from jsonl_documents(path, text_field, skip=left)
        elif not left.take():
            yield Document(path.as_posix(), decode_bytes(path.read_bytes()))


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


def hf_documents(spec: HFSpec) -> Iterator[Document]:
    """Stream a split with `datasets.load_dataset(..., streaming=True)`; id `<split>/<row>`."""
    import datasets

    try:
        ds = datasets.load_dataset(
            spec.dataset,
            spec.config,
            split=spec.split,
            revision=spec.revision,
            data_files=list(spec.data_files) if spec.data_files else None,
            streaming=True,
        )
        for index, row in enumerate(ds):
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


def hub_commit(spec: HFSpec) -> str | None:
    """Commit sha of the dataset revision on the Hub, or None when unknown/offline."""
    if spec.data_files or "/" not in spec.dataset or os.path.exists(spec.dataset):
        return None  # a local builder ("json", "text", ...) or a local folder
    try:
        from huggingface_hub import HfApi

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


def pile_local_documents(
    root: Path, pattern: str, opened: list[Path] | None = None, skip: int = 0
) -> Iterator[Document]:
    """Documents of the Pile's own `*.jsonl.zst` files under `root` matching `pattern`.

    Files are read in sorted order; each file is appended to `opened` when first read, so
    a partial (limited) read records only the files it used. The first `skip` documents
    are passed over without parsing them.
    """
    if not root.is_dir():
        raise CorpusError(
            f"{root}: Pile directory not found; pass the folder that holds "
            f"{PILE_LOCAL_TRAIN_GLOB} and {PILE_LOCAL_VAL_GLOB}"
        )
    files = sorted(root.glob(pattern))
    if not files:
        raise CorpusError(f"{root}: no files match {pattern!r}; check --local-dir and the globs")
    left = Skip(skip)
    for path in files:
        if opened is not None:
            opened.append(path)
        yield from jsonl_documents(path, "text", path.relative_to(root).as_posix(), left)
