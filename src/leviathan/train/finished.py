"""A finished run stays finished: its final checkpoint's state.json put back from its manifest.

The workflow declares `checkpoints/final/state.json` as a train job's output, and Snakemake
deletes a job's output before it reruns the job (after a touched shard, `--forcerun`, a changed
rule). The final's other files and its manifest are still there. Every checkpoint's manifest
records its state.json whole beside its sha256, so `reinstate_state`
(`leviathan.checkpoint.integrity`) writes it back exactly (the same bytes: checked against the
recorded sha256 before it is put in place). The rerun then verifies the final as any restore
does and completes at once without training (`log_finished`: one INFO line). A final without
state.json whose manifest cannot give it back (missing, unreadable, or a sha256 that does not
match) is damaged: the caller sets it aside with a WARNING, like any other damaged checkpoint.

Retraining a finished cell from scratch sets its run aside first (`set_aside_run`, under the
run's lock): `checkpoints/` becomes `checkpoints.stale-<n>/` with the metrics log inside it, kept,
never deleted; the next training of the cell starts at step 0 (`leviathan retrain`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from leviathan.checkpoint.files import checkpoints_dir
from leviathan.io import free_name
from leviathan.layout import manifest_path, metrics_file
from leviathan.lock import hold_lock

log = logging.getLogger("leviathan.train")


def log_finished(final: Path, step: int) -> None:
    """The one line a rerun of a finished run writes: nothing was trained."""
    log.info(
        "%s verified against its manifest (same config and data): the run finished at step %d; "
        "nothing to train",
        final,
        step,
    )


def set_aside_run(run_dir: Path) -> Path | None:
    """Move a run's checkpoints (and its metrics log, with its manifest, into them) to
    `checkpoints.stale-<n>/` beside them, under the run's lock (a run training there is refused,
    `leviathan.lock.FolderBusy`). None: the run has no checkpoints (nothing to set aside)."""
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return None
    with hold_lock(run_dir, "run directory", folder=True):
        if not root.is_dir():
            return None
        target = free_name(root, "stale")
        root.rename(target)
        metrics = metrics_file(run_dir)
        for path in (metrics, manifest_path(metrics)):
            if path.is_file():
                os.replace(path, target / path.name)
    return target
