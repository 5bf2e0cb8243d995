"""The run's metrics log (`metrics.jsonl`): append-only JSONL with optional TensorBoard, DVCLive
and W&B views, its rewind to a checkpoint, and reading it back. Torch-free (TensorBoard's writer
is imported only when asked for): the report and the workflow's status read the log too.

The log is written one whole record per `write` call, appended and flushed at once (no buffer to
lose); a write that fails (a full disk) is cut back to the last whole record and raises
`leviathan.io.DiskFull`. A line that is still not a whole record (a kill in the middle of a
write) is set aside, with a WARNING naming both files, when the run restarts, finished or not."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from leviathan.io import NO_SPACE, disk_full, free_name

log = logging.getLogger("leviathan.train")


class MetricsLog:
    """Append-only JSONL (one object per line) plus optional live views of the same scalars:
    TensorBoard (`tensorboard_dir`) and DVCLive (`dvclive_dir`: `<kind>/<key>.tsv` per scalar
    under plots/metrics/, the latest values in metrics.json; `dvc plots show <dir>/plots/metrics`
    or the VS Code DVC extension draws them while training runs)."""

    def __init__(
        self,
        path: Path,
        tensorboard_dir: Path | None = None,
        dvclive_dir: Path | None = None,
        wandb: Any | None = None,
    ) -> None:
        """`wandb`: a `train.wandb_log.WandbRun` that gets every record too, the log's earlier
        ones first where it does not have them yet (a killed attempt's; None: no W&B)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._wandb = wandb
        if wandb is not None and path.is_file():
            for _, record in _split_records(path.read_text(errors="replace"))[0]:
                wandb.write(record)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._tb = None
        if tensorboard_dir is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:  # tensorboard is optional
                raise ValueError(
                    "runtime.tensorboard=true needs the tensorboard package: pip install tensorboard"
                ) from exc
            self._tb = SummaryWriter(str(tensorboard_dir))
        self._live = _dvclive(dvclive_dir) if dvclive_dir is not None else None

    def write(self, record: dict[str, Any]) -> None:
        record = {"time": round(time.time(), 3), **record}
        self._append((json.dumps(record, sort_keys=True) + "\n").encode())
        if self._tb is not None and "step" in record:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key not in ("step", "time"):
                    self._tb.add_scalar(
                        f"{record.get('kind', 'train')}/{key}", value, record["step"]
                    )
        if self._live is not None and "step" in record:
            self._live.step = int(record["step"])
            for key, value in _scalars(record):
                self._live.log_metric(f"{record.get('kind', 'train')}/{key}", value)
            self._live.make_summary()
        if self._wandb is not None:
            self._wandb.write(record)

    def _append(self, data: bytes) -> None:
        """Append one whole record; on failure cut the file back to what it was."""
        size = os.fstat(self._fd).st_size
        try:
            view = memoryview(data)
            while view:  # a short write (a disk filling up) then raises on the next call
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            os.ftruncate(self._fd, size)
            if exc.errno in NO_SPACE:
                fix = "free space there, then rerun: the run resumes from its newest checkpoint"
                raise disk_full(self.path, len(data), fix) from exc
            raise

    def close(self) -> None:
        os.close(self._fd)
        if self._tb is not None:
            self._tb.close()
        if self._live is not None:
            self._live.end()
        if self._wandb is not None:
            self._wandb.close()


def _scalars(record: dict[str, Any]) -> list[tuple[str, float]]:
    return [
        (k, float(v))
        for k, v in record.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("step", "time")
    ]


def _dvclive(directory: Path) -> Any:
    """A DVCLive logger that only writes its directory: no dvc.yaml edits, no DVC experiment
    commits, no report (the project's dvc.yaml and `dvc exp` stay the user's). Resumes appending
    when training resumes."""
    try:
        from dvclive import Live
    except ImportError as exc:  # dvclive is optional
        raise ValueError(
            "runtime.dvclive=true needs the dvclive package: pip install 'leviathan[live]'"
        ) from exc
    return Live(dir=str(directory), resume=True, report=None, save_dvc_exp=False, dvcyaml=False)


def rewind_metrics(path: Path, step: int, aside: Path) -> int:
    """Keep in `path` only the records of the run up to `step` (the checkpoint a run resumes
    from; 0: a fresh start keeps nothing); move the others to `aside` (kept, never deleted).

    A run directory then holds the metrics of exactly the run its checkpoints belong to: no
    points of a set-aside run, and no steps logged after the newest checkpoint by a run that
    died (they are recomputed). Lines that are no whole record are set aside too
    (`set_aside_torn`). Returns the number of records moved.
    """
    if not path.is_file():
        return 0
    text = path.read_text(errors="replace")
    records, torn = _split_records(text)
    keep: list[str] = []
    moved: list[str] = []
    for line, rec in records:
        (keep if step > 0 and int(rec.get("step", 0)) <= step else moved).append(line)
    if moved:
        aside.parent.mkdir(parents=True, exist_ok=True)
        with open(aside, "a") as fh:
            fh.writelines(line + "\n" for line in moved)
    # appended to next: a new file, never the old one edited, where it may be a hard link into
    # DVC's cache (docs/dvc.md)
    _rewrite(path, text, keep, torn, force=bool(moved) or path.stat().st_nlink > 1)
    return len(moved)


def set_aside_torn(path: Path) -> int:
    """Move the lines of `path` that are no whole record (a write cut short by a kill or a full
    disk) to `metrics.torn-<n>.jsonl`, with a WARNING naming both files, and keep every whole
    record: what a finished run's rerun does to its log. Returns the number of lines moved."""
    if not path.is_file():
        return 0
    text = path.read_text(errors="replace")
    records, torn = _split_records(text)
    _rewrite(path, text, [line for line, _ in records], torn, force=False)
    return len(torn)


def _rewrite(path: Path, text: str, keep: list[str], torn: list[str], *, force: bool) -> None:
    """Write `keep` (whole records) as a new `path`, the `torn` lines set aside with a WARNING;
    only where something changes (`force`, torn lines, no final newline)."""
    if torn:
        torn_file = free_name(path, "torn")
        torn_file.write_text("".join(line + "\n" for line in torn))
        log.warning(
            "%s: %d line(s) not a whole record (a write cut short by a kill or a full disk): "
            "set aside as %s",
            path,
            len(torn),
            torn_file,
        )
    if force or torn or not text.endswith("\n"):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in keep))
        tmp.replace(path)


def _split_records(text: str) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The lines of a metrics log that are whole records (each with it parsed), and the others."""
    records: list[tuple[str, dict[str, Any]]] = []
    torn: list[str] = []
    for line in filter(str.strip, text.splitlines()):
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if isinstance(rec, dict):
            records.append((line, rec))
        else:
            torn.append(line)
    return records, torn


def read_metrics(path: Path, record_type: str | None = None) -> list[dict[str, Any]]:
    """Records of a metrics JSONL, optionally only those of one `record_type` (their kind:
    "train", "val", ...). A line that is no whole record is a one-line ValueError naming the
    line and the fix."""
    rows = []
    for n, line in enumerate(Path(path).read_text(errors="replace").splitlines(), 1):
        if line.strip():
            try:
                rec = json.loads(line)
            except ValueError as exc:
                rec, why = None, str(exc)
            else:
                why = f"a JSON {type(rec).__name__}, not a record"
            if not isinstance(rec, dict):
                raise ValueError(
                    f"{path}:{n}: not a whole JSON record ({why}): a write cut short; rerun the "
                    "run's training command, which sets such lines aside (a workflow cell's: "
                    "`leviathan config show --cell SCALE/VOCAB/VARIANT/seedN` prints it)"
                )
            rows.append(rec)
    return [r for r in rows if record_type is None or r.get("kind") == record_type]
