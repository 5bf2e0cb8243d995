"""Kept checkpoints: a run's weights at log-spaced steps (`runtime.checkpoint.keep_at`), kept for good.

Where training dynamics are studied (losses of the frequency buckets along training, the tokens
one variant needs to reach another's loss), the weights of intermediate steps must outlive the
run. A kept checkpoint is a directory `checkpoints/kept/step_<N>/` (leviathan.checkpoint.files.kept_dir)
holding
  model.safetensors        the weights after N optimizer steps (N = 0: the initial weights)
  state.json               step, tokens, loader state, train and model configs, code: what
                           `leviathan eval` reads to rebuild the model (no optimizer nor RNG
                           state: a kept checkpoint is evaluated, never resumed from)
  model.safetensors.json   the manifest (kind "kept_checkpoint"): the weights' sha256 and, in
                           `files`, state.json's, with the token shards and the train config
It is written like a step checkpoint (temporary directory, renamed into place whole; by the
background writer where checkpoints are), outside the reach of `keep_last` and of
`drop_steps_at_final`, which only ever remove `checkpoints/step_*`. A step reached again after
a resume (the run died past it) is written again, replacing the earlier directory whole.
Every checkpoint's manifest lists the kept ones on disk when it was written (`kept`: step,
path, sha256), so the final checkpoint's manifest records all of them. A kept checkpoint whose
manifest cannot be read (not JSON, no weights' sha256) is set aside as `step_<N>.damaged-<n>`
with a WARNING, as a damaged step checkpoint is, and the run goes on without it.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from leviathan.checkpoint.files import (
    KEPT_KIND,
    STATE,
    WEIGHTS,
    kept_dir,
    state_file,
    step_dir,
    step_of,
    weights_file,
)
from leviathan.checkpoint.integrity import (
    DamagedCheckpoint,
    manifest_file,
    recorded_manifest,
    write_checkpoint_manifest,
)
from leviathan.io import (
    disk_full,
    free_name,
    no_space,
    publish_dir,
    remove_dead_temps_in,
    sha256_file,
    write_json,
)
from leviathan.manifest import display_path

log = logging.getLogger("leviathan.train")


def write_kept(
    checkpoints: Path,
    step: int,
    model_state: dict[str, torch.Tensor],
    state: dict[str, Any],
    info: Any | None,
) -> Path:
    """Write kept checkpoint `step` under `checkpoints/kept/` atomically; `info`: the run's
    `store.ManifestInfo` (None: no manifest, as for a checkpoint written without one).
    What killed writers left there is removed first; a full disk is `DiskFull` (one line),
    with nothing left of the attempt."""
    root = kept_dir(checkpoints)
    root.mkdir(parents=True, exist_ok=True)
    remove_dead_temps_in(root)
    final = step_dir(root, step)
    tmp = root / f".{final.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        weights = {k: v.detach().contiguous().cpu() for k, v in model_state.items()}
        save_file(weights, weights_file(tmp))
        write_json(state_file(tmp), state)
        if info is not None:
            files = {STATE: sha256_file(state_file(tmp))}
            write_checkpoint_manifest(tmp, final, state, info, artifact_type=KEPT_KIND, files=files)
        publish_dir(tmp, final)
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)  # the space it took, before measuring
        needed = sum(t.numel() * t.element_size() for t in model_state.values())
        if no_space(exc, root, needed):
            fix = (
                "free space there, then rerun the training command: it resumes from its newest "
                "checkpoint and writes this kept one again"
            )
            raise disk_full(final, needed, fix) from exc
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def list_kept(checkpoints: Path) -> list[dict[str, Any]]:
    """The kept checkpoints under `checkpoints/kept/`, by step: {step, path, sha256} (sha256
    of the weights, as their manifest records it; None where none was written). One whose
    manifest cannot be read is set aside (`set_aside_kept`) and not listed."""
    root = kept_dir(checkpoints)
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        step = step_of(p)
        if step is None or not state_file(p).is_file():
            continue
        sha = None
        if manifest_file(p).is_file():
            try:
                sha = recorded_manifest(p)[0][WEIGHTS]
            except DamagedCheckpoint as exc:
                set_aside_kept(exc)
                continue
        out.append({"step": step, "path": display_path(p), "sha256": sha})
    return sorted(out, key=lambda r: r["step"])


def set_aside_kept(damage: DamagedCheckpoint) -> Path:
    """Move a damaged kept checkpoint to `step_<N>.damaged-<n>` beside it (kept, never
    deleted), with a WARNING: the run goes on, and its later manifests no longer list it."""
    target = free_name(damage.checkpoint, "damaged")
    damage.checkpoint.rename(target)
    log.warning(
        "kept checkpoint %s is damaged (%s: %s): set aside as %s; the run goes on without "
        "it (a rerun that resumes from before its step writes it again)",
        damage.checkpoint,
        damage.file,
        damage.reason,
        target,
    )
    return target
