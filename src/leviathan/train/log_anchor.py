"""The metrics log anchored twice: by the checkpoints that close it and by its own manifest.

A checkpoint's manifest records the log as it was when the checkpoint was written
(`metrics_log`: the sha256 of its bytes up to its last record of a step at or before the
checkpoint's, `log_prefix`), so the final checkpoint, whose manifest every evaluation records,
also fixes every validation loss of the run. When training finishes, the log gets its own
manifest (`metrics.jsonl.json`, kind "metrics_log": the whole file's sha256, the final
checkpoint it ends with, the code version), and the last validation record must equal the
`val_loss` of the final's hashed state.json.

`log_problems` says what of this does not hold; sample efficiency refuses a log with any
(`verify_log`), a finished run rerun refuses to anchor an edited log (`anchor_log`), and
`leviathan audit` reports each. A rewind at a resume keeps the records up to the restored
checkpoint byte for byte, so those anchors still hold after any number of restarts. Torch-free:
the report and the audit read logs too.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from leviathan.anchor import ChangedArtifact, anchor_problem
from leviathan.checkpoint.files import STATE, final_dir, state_file, weights_file
from leviathan.io import read_json
from leviathan.layout import manifest_path, metrics_file
from leviathan.manifest import display_path, input_record, recorded_sha256, write_manifest

LOG_MANIFEST = "metrics_log"  # the manifest kind of a finished run's metrics log
PREFIX_FIELD = "metrics_log"  # a checkpoint manifest's record of the log it closes


def _records(data: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    """(end offset, record) of every whole record line of a log's bytes (a line still being
    written, or not a JSON object, is skipped)."""
    end = 0
    for line in data.splitlines(keepends=True):
        end += len(line)
        if not line.endswith(b"\n"):
            return
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            yield end, rec


def _step(rec: Mapping[str, Any]) -> int:
    try:
        return int(rec.get("step") or 0)
    except (TypeError, ValueError):
        return 0


def log_prefix(log: Path, step: int) -> dict[str, Any] | None:
    """What a checkpoint of step `step` records of its run's log: {path, step, bytes, sha256}
    of the log up to its last record of a step <= `step` (None: the run has no log)."""
    if not log.is_file():
        return None
    data = log.read_bytes()
    size = max((end for end, rec in _records(data) if _step(rec) <= step), default=0)
    return {
        "path": display_path(log),
        "step": step,
        "bytes": size,
        "sha256": hashlib.sha256(data[:size]).hexdigest(),
    }


def prefix_problem(log: Path, recorded: Mapping[str, Any]) -> str | None:
    """Why `log` does not begin with the records a checkpoint's manifest fixed (None: it does)."""
    size, step = int(recorded.get("bytes") or 0), recorded.get("step")
    if not log.is_file():
        return f"missing: the checkpoint of step {step} records its first {size} bytes"
    with open(log, "rb") as fh:
        head = fh.read(size)
    if len(head) < size:
        return (
            f"holds {len(head)} bytes, fewer than the {size} of its records up to step {step} "
            "that the checkpoint recorded"
        )
    actual = hashlib.sha256(head).hexdigest()
    if actual != recorded.get("sha256"):
        return (
            f"its records up to step {step} hash to {actual[:12]}, not the "
            f"{str(recorded.get('sha256'))[:12]} the checkpoint of step {step} recorded: "
            "they were edited"
        )
    return None


def final_val_problem(log: Path, state: Mapping[str, Any]) -> str | None:
    """Why the log's last validation record disagrees with the final checkpoint's state.json
    (None: it agrees, or the run recorded no validation loss)."""
    val, step = state.get("val_loss"), _step(state)
    if val is None or not log.is_file():
        return None
    last = [r for _, r in _records(log.read_bytes()) if r.get("kind") == "val" and _step(r) <= step]
    if not last:
        return f"has no validation record up to step {step}; its final {STATE} has val_loss {val}"
    if last[-1].get("val_loss") != val:
        return (
            f"its last validation record (step {_step(last[-1])}) has val_loss "
            f"{last[-1].get('val_loss')}, its final checkpoint's {STATE} {val}: it was edited"
        )
    return None


def final_records(run: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The final checkpoint's manifest and state.json of run `run` (None where absent)."""
    final = final_dir(run)
    mpath, state = manifest_path(weights_file(final)), state_file(final)
    return (
        read_json(mpath) if mpath.is_file() else None,
        read_json(state) if state.is_file() else None,
    )


def log_problems(run: Path) -> list[str]:
    """What of the log's anchors does not hold (see the module docstring): its own manifest,
    the final checkpoint's record of it, the final's validation loss. Empty: all that exist hold."""
    log = metrics_file(run)
    problems = []
    if manifest_path(log).is_file() and (why := anchor_problem(log)):
        problems.append(why)
    manifest, state = final_records(run)
    recorded = (manifest or {}).get(PREFIX_FIELD)
    if recorded and (why := prefix_problem(log, recorded)):
        problems.append(f"{log}: {why}")
    if state and (why := final_val_problem(log, state)):
        problems.append(f"{log}: {why}")
    return problems


def log_fix(run: Path) -> str:
    return (
        f"restore the log training wrote (e.g. `dvc checkout {metrics_file(run)}`) or retrain "
        f"the cell (remove {run})"
    )


def verify_log(run: Path) -> None:
    """Refuse (`ChangedArtifact`) a run's log that is not as training wrote it."""
    problems = log_problems(run)
    if problems:
        raise ChangedArtifact(f"{problems[0]}; {log_fix(run)}")


def anchor_log(
    run: Path,
    *,
    config: Mapping[str, Any] | None = None,
    started: _dt.datetime | None = None,
    device: str | None = None,
) -> None:
    """Write the log's manifest once training has finished (the final checkpoint is written and
    the log closed), after checking the log against the final checkpoint; a log that already
    has one must still be that file. Nothing is written for a run whose final checkpoint
    records no log (written before logs were anchored)."""
    log = metrics_file(run)
    verify_log(run)
    manifest, _ = final_records(run)
    if manifest_path(log).is_file() or manifest is None or not manifest.get(PREFIX_FIELD):
        return
    weights = weights_file(final_dir(run))
    write_manifest(
        log,
        artifact_type=LOG_MANIFEST,
        inputs=[input_record(weights, recorded_sha256(weights), role="final_checkpoint")],
        config=config,
        started=started,
        device=device,
        fields={"final_step": manifest.get("step"), "closed_by": manifest[PREFIX_FIELD]},
    )
