"""Fetch one evaluation dataset into data/eval/<key>/ (leviathan.data.eval_data): the rule
fetch_eval_data, run by the data step where the Hub is reachable.

Each split the evaluation reads is streamed from the dataset (`datasets.load_dataset(...,
streaming=True)` with lm-eval's own path, config name and options) and written to
`<split>.parquet` through a temporary file, with the dataset's features in the file's schema
(so `datasets` reads them back as the Hub serves them). After each split `.fetched.json`
records it: a killed fetch resumes after the last whole split, and a rerun of a finished
fetch downloads nothing whose file still matches its record. `source.json` comes last.

`mirror`: a local folder holding the dataset repositories as the Hub lays them out
(`<mirror>/<owner>/<name>/`, e.g. a `git clone` of each): the same loader reads them
instead of the Hub.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from leviathan import layout
from leviathan.data.eval_data import Need, identity, task_config
from leviathan.io import atomic_path, sha256_file
from leviathan.provenance import utc_now

BATCH_ROWS = 1000  # rows a parquet row group holds (the largest paper split is ~10k rows)


class EvalDataError(ValueError):
    """A dataset an evaluation needs could not be fetched (one line, with the fix)."""


def fetch_need(need: Need, mirror: str | Path | None = None) -> dict[str, Any]:
    """Fetch the need's splits (resuming after the last whole one); write and return source.json."""
    cfg = task_config(need)
    ident = identity(cfg, need.num_fewshot)
    where = str(Path(mirror) / str(ident["dataset"])) if mirror else str(ident["dataset"])
    if mirror is None:
        from leviathan.eval.hub import require_hub

        require_hub(
            f"{ident['dataset']} (read by {need.evaluation} task {need.task})",
            "Run the data step on a node where the Hub is reachable (a login or transfer node)",
        )
    done = _progress(need.key, ident)
    for split in ident["splits_read"]:
        if split in done:
            continue
        path = layout.eval_data_split(need.key, split)
        rows = write_split(where, ident, split, path)
        done[split] = {
            "file": path.name,
            "rows": rows,
            "bytes": path.stat().st_size,
            "sha256": sha256_file(path),
        }
        _write_json(
            layout.eval_data_dir(need.key) / layout.EVAL_DATA_PROGRESS, {**ident, "splits": done}
        )
    source = {**ident, "splits": done, "read_from": where, "fetched_at": utc_now().isoformat()}
    source["datasets_version"] = _datasets_version()
    _write_json(need.source, source)
    return source


def _progress(key: str, ident: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The splits fetched before whose files still match their record (same dataset only)."""
    path = layout.eval_data_dir(key) / layout.EVAL_DATA_PROGRESS
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or {k: doc.get(k) for k in ident} != dict(ident):
        return {}  # another dataset, config or lm-eval version: fetched afresh
    kept = {}
    for split, rec in (doc.get("splits") or {}).items():
        f = layout.eval_data_split(key, split)
        if f.is_file() and sha256_file(f) == rec.get("sha256"):
            kept[split] = rec
    return kept


def write_split(where: str, ident: Mapping[str, Any], split: str, path: Path) -> int:
    """Stream one split of the dataset at `where` into a parquet file (atomically); its rows."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    kwargs = {k: v for k, v in ident["dataset_kwargs"].items() if k != "data_files"}
    try:
        ds = datasets.load_dataset(where, ident["name"], split=split, streaming=True, **kwargs)
    except Exception as exc:
        raise _fetch_error(where, ident, split, exc) from exc
    features = ds.features
    rows, writer = 0, None
    with atomic_path(path) as tmp:
        try:
            for batch in ds.iter(batch_size=BATCH_ROWS):
                table = (
                    pa.Table.from_pydict(features.encode_batch(batch), schema=features.arrow_schema)
                    if features is not None
                    else pa.Table.from_pydict(batch, schema=writer.schema if writer else None)
                )
                writer = writer or pq.ParquetWriter(tmp, table.schema)
                writer.write_table(table)
                rows += table.num_rows
        except Exception as exc:
            raise _fetch_error(where, ident, split, exc) from exc
        finally:
            if writer is not None:
                writer.close()
        if writer is None:
            raise EvalDataError(f"{where} ({ident['name']}): split {split!r} has no rows")
    return rows


def _fetch_error(where: str, ident: Mapping[str, Any], split: str, exc: Exception) -> Exception:
    """One line: which dataset and split failed to load, why, and what to do."""
    from leviathan.eval.hub import is_connection_error

    what = f"{where} ({ident['name'] or 'default config'}, split {split!r}, for {ident['task']})"
    if is_connection_error(exc):
        return EvalDataError(
            f"cannot download {what}: {type(exc).__name__}: {exc}. Run the data step where the "
            "Hub is reachable; it resumes after the splits already fetched"
        )
    return EvalDataError(f"cannot read {what}: {type(exc).__name__}: {exc}")


def _write_json(path: Path, doc: Mapping[str, Any]) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def _datasets_version() -> str:
    import datasets

    return str(datasets.__version__)
