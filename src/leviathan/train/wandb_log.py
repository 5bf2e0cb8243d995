"""Weights & Biases: one W&B run per training run, continued across preemption and resumes.

With `runtime.wandb.enabled` the metrics log's `train`, `val` and `end` records go to W&B as
well (`<kind>/<key>` at the record's step), with the resolved train, model and runtime configs and
the provenance (code version, the token shards' sha256s) as the run's config. The W&B run's id
is made at the first start and stored in the run directory (`wandb.json`, with the last step
sent), so a preempted, requeued or resumed run continues the same W&B run (`resume="allow"`)
instead of starting another; the records of steps it already sent (a run killed after its last
checkpoint recomputes them) are not sent again, so W&B's history holds each step once. W&B's
own files go to `<run dir>/wandb/`. The rest of the `runtime.wandb` block (`WandbConfig`) says
where: `mode` is W&B's mode (online, offline: written locally for `wandb sync`, disabled;
unset: W&B's default or $WANDB_MODE); `project` and `entity` name where it goes. Optional: `pip install 'leviathan[wandb]'`.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from leviathan.io import read_json, write_json
from leviathan.train.config import WandbConfig

RUN_FILE = "wandb.json"  # in the run directory: {"id", "project", "entity", "last_step"}
SENT_RECORD_TYPES = ("train", "val", "end")  # metrics records sent, by their "kind" field


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
        self.sent = int(known.get("last_step", -1))  # steps up to this one W&B already has
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
        if step > self._last:
            self._last = step
            self._save()

    def close(self, exit_code: int = 0) -> None:
        self.run.finish(exit_code=exit_code)
