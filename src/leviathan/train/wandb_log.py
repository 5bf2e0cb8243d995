"""Weights & Biases: one W&B run per training run, continued across preemption and resumes.

With `runtime.wandb.enabled` the metrics log's `train`, `val` and `end` records go to W&B as
well (`<kind>/<key>` at the record's step), with the resolved train, model and runtime configs and
the provenance (code version, the token shards' sha256s) as the run's config. The W&B run's id
is made at the first start and stored in the run directory (`wandb.json`), so a preempted,
requeued or resumed run continues the same W&B run (`resume="allow"`) instead of starting
another. W&B's own files go to `<run dir>/wandb/`.

Each step once, none lost. W&B writes what it is sent to its transaction log
(`wandb/*/run-<id>.wandb`, online too: `wandb sync` uploads from it) in its own time, so a
SIGKILL can lose records the run had sent. `wandb.json`'s `last_step` is therefore advanced only
once W&B has them: when the W&B run is finished (the end of a run, a preemption, an error). At a
start, the steps W&B has are the larger of `last_step` and the last history step its
transaction logs hold (read up to their first chunk cut short); the records of the metrics log
after that step are sent again, and a later record of a step W&B has (a run killed after its
last checkpoint recomputes them) is not. The rest of the `runtime.wandb` block (`WandbConfig`) says
where: `mode` is W&B's mode (online, offline: written locally for `wandb sync`, disabled;
unset: W&B's default or $WANDB_MODE); `project` and `entity` name where it goes. Optional: `pip install 'leviathan[wandb]'`.
"""

from __future__ import annotations

import secrets
import struct
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from leviathan.io import read_json, write_json
from leviathan.train.config import WandbConfig

RUN_FILE = "wandb.json"  # in the run directory: {"id", "project", "entity", "last_step"}
SENT_RECORD_TYPES = ("train", "val", "end")  # metrics records sent, by their "kind" field
# W&B's transaction log: a header, then LevelDB's log format (32 KiB blocks of chunks, each a
# crc32 of its type and data, a length and a type: 1 whole, 2 first, 3 middle, 4 last part)
_MAGIC, _HEADER, _BLOCK, _CHUNK = b":W&B", 7, 32768, struct.Struct("<IHB")


def _scalars(record: Mapping[str, Any]) -> dict[str, float]:
    record_type = record.get("kind", "train")
    return {
        f"{record_type}/{k}": float(v)
        for k, v in record.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("step", "time")
    }


class WandbRun:
    """The W&B run of a training run directory: opened (created or resumed) at the start,
    fed the metrics records, finished at the end (or at a preemption)."""

    def __init__(
        self,
        run_dir: Path,
        settings: WandbConfig,
        *,
        config: Mapping[str, Any],
        name: str,
    ) -> None:
        """`settings`: the run's `runtime.wandb` block (where the W&B run goes: project, entity,
        mode); `config`: what the W&B run records as its config."""
        try:
            import wandb
        except ImportError as exc:  # wandb is optional
            raise ValueError(
                "runtime.wandb.enabled=true needs the wandb package: pip install 'leviathan[wandb]'"
            ) from exc
        self.file = run_dir / RUN_FILE
        known = read_json(self.file) if self.file.is_file() else {}
        self.id = str(known.get("id") or secrets.token_hex(4))
        # steps up to this one W&B already has: at its last finish, or in its files
        self.sent = max(int(known.get("last_step", -1)), persisted_step(run_dir, self.id))
        self._last = self.sent
        (run_dir / "wandb").mkdir(parents=True, exist_ok=True)
        project, entity = settings.project, settings.entity
        self.run = wandb.init(
            project=project,
            entity=entity,
            mode=settings.mode,  # type: ignore[arg-type]
            id=self.id,
            resume="allow",
            name=name,
            dir=str(run_dir),
            config=dict(config),
            settings=wandb.Settings(console="off", x_disable_stats=True),
        )
        self.run.config.update(dict(config), allow_val_change=True)
        self._save(project, entity)

    def _save(self, project: str | None = None, entity: str | None = None) -> None:
        known = read_json(self.file) if self.file.is_file() else {}
        write_json(
            self.file,
            {
                "id": self.id,
                "project": project or known.get("project"),
                "entity": entity if project else known.get("entity"),
                "last_step": self._last,
            },
        )

    def write(self, record: Mapping[str, Any]) -> None:
        """One metrics record; those of steps W&B already has from an earlier attempt are not
        sent again."""
        if record.get("kind") not in SENT_RECORD_TYPES or "step" not in record:
            return
        step = int(record["step"])
        if step <= self.sent:
            return
        self.run.log(_scalars(record), step=step)
        self._last = max(self._last, step)

    def close(self, exit_code: int = 0) -> None:
        """Finish the W&B run (W&B then has every record sent), then record its last step."""
        self.run.finish(exit_code=exit_code)
        self._save()


def open_run(
    run_dir: Path, cfg: Any, model_cfg: Any, runtime: Any, info: Any, shards: list[Any]
) -> WandbRun:
    """The W&B run of a training run (`runtime.wandb`): created, or the stored one resumed;
    its config the train, model and runtime configs, the world size and the provenance."""
    from dataclasses import asdict

    from leviathan.provenance import code_version

    config = {
        "train": cfg.to_dict(),
        "model": model_cfg.to_dict(),
        "runtime": asdict(runtime),
        "world_size": info.world_size,
        "provenance": {"code": code_version(), "data": shards},
    }
    name = f"{cfg.scale}/{cfg.vocab}/{cfg.variant}/seed{cfg.seed}"
    return WandbRun(run_dir, runtime.wandb, config=config, name=name)


def persisted_step(run_dir: Path, run_id: str) -> int:
    """The last history step of W&B run `run_id` in its transaction logs under `run_dir`
    (every attempt's, online or offline); -1: none."""
    logs = {p.resolve() for p in (run_dir / "wandb").glob(f"*/run-{run_id}.wandb")}
    return max((step for path in logs for step in history_steps(path)), default=-1)


def history_steps(path: Path) -> Iterator[int]:
    """The step of each history record of a `.wandb` transaction log, up to its first chunk
    that is cut short or fails its checksum (a writer killed mid-write)."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2 as pb

    for data in _log_records(path.read_bytes()):
        record = pb.Record()
        try:
            record.ParseFromString(data)
        except DecodeError:
            return
        if record.WhichOneof("record_type") == "history":
            yield int(record.history.step.num)


def _log_records(data: bytes) -> Iterator[bytes]:
    """The whole records of a transaction log's bytes (LevelDB's log format after W&B's header)."""
    if not data.startswith(_MAGIC):
        return
    pos, pending = _HEADER, b""
    while pos + _CHUNK.size <= len(data):
        if _BLOCK - pos % _BLOCK < _CHUNK.size:  # a block's tail too short for a chunk: padding
            pos += _BLOCK - pos % _BLOCK
            continue
        crc, length, kind = _CHUNK.unpack_from(data, pos)
        chunk = data[pos + _CHUNK.size : pos + _CHUNK.size + length]
        if not 1 <= kind <= 4 or len(chunk) < length or zlib.crc32(bytes([kind]) + chunk) != crc:
            return
        pos += _CHUNK.size + length
        if kind in (1, 2):
            pending = b""
        pending += chunk
        if kind in (1, 4):
            yield pending
