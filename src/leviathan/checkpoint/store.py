"""Write a checkpoint atomically, find the newest whole one, prune the old ones.

`save_checkpoint` writes one from a host `Snapshot` (the weights, optimizer and RNG states and
the train state) under a temporary name and renames it into place once complete; `publish`
is its second half, which an FSDP run's writer shares (its optimizer shards written first, by
every rank). A full disk during a save is one line (`leviathan.io.DiskFull`); the older
checkpoints stay. `latest_checkpoint` finds the newest whole one (`final` first), `prune`
keeps the newest `keep_last` step checkpoints and `set_aside_damaged` moves a damaged one
out of the way (kept, `<name>.damaged-<n>`).
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from leviathan.checkpoint.files import (
    CHECKPOINT_KIND,
    FINAL,
    SHARDED_FORMAT,
    optim_file,
    rng_file,
    state_file,
    step_of,
    weights_file,
)
from leviathan.checkpoint.integrity import (
    STATE_FIELD,
    DamagedCheckpoint,
    file_hashes,
    write_checkpoint_manifest,
)
from leviathan.checkpoint.kept import list_kept
from leviathan.checkpoint.rng import rng_state
from leviathan.io import disk_full, free_name, no_space, publish_dir, read_json, write_json

OPTIM_FORMAT = "optim_format"  # state.json's record of how the optimizer state is stored
log = logging.getLogger("leviathan.train")


@dataclass(frozen=True)
class ManifestInfo:
    """What a checkpoint's manifest records beyond the checkpoint itself."""

    inputs: Sequence[Mapping[str, str]]  # {"role", "path", "sha256"} of the token shards
    started: _dt.datetime | None = None  # when the training process began
    device: str | None = None
    resumed_from: Mapping[str, Any] | None = None  # `Verified.record` of the restored one
    fields: Mapping[str, Any] = field(default_factory=dict)  # more fields, the writer's own


@dataclass(frozen=True)
class CheckpointRef:
    path: Path
    step: int


def to_host(obj: Any, copy: bool = True) -> Any:
    """`obj` (nested dicts/lists/tuples of tensors and plain values) with its tensors detached in
    host memory; `copy`: always copies, so later in-place updates of the originals do not reach
    it (without, host tensors are shared)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=copy)
    if isinstance(obj, dict):
        return {k: to_host(v, copy) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_host(v, copy) for v in obj)
    return obj


@dataclass(frozen=True)
class Snapshot:
    """Everything one checkpoint holds, in host memory, taken at the end of a step."""

    model_state: dict[str, torch.Tensor]
    optim_state: dict[str, Any]
    rng: dict[str, Any]
    state: dict[str, Any]

    @property
    def nbytes(self) -> int:
        return tensor_bytes([self.model_state, self.optim_state])


def tensor_bytes(obj: Any) -> int:
    """Bytes of the tensors in `obj` (nested dicts/lists/tuples): about a checkpoint's size."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def snapshot(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    copy: bool = True,
) -> Snapshot:
    """What a checkpoint holds, in host memory now (RNG states included); `copy`: a copy that
    training may go on from (for a background write), else sharing the host tensors."""
    return Snapshot(
        model_state=to_host(model.state_dict(), copy),
        optim_state=to_host(optimizer.state_dict(), copy),
        rng=rng_state(),
        state=state,
    )


def _save_torch(obj: Any, path: Path) -> None:
    """torch.save into a file this function closes, also when the write fails: a failed
    write's file, removed, then frees its space at once (torch's own writer, given a path, keeps
    its file open while the error's traceback lives, and with it the space of a full disk)."""
    with open(path, "wb") as fh:
        torch.save(obj, fh)


def temp_dir(root: Path, name: str, pid: int | None = None) -> Path:
    """Where checkpoint `root/name` is written before it is renamed into place (`pid`: the
    writer's, the main rank's for an FSDP run's writers)."""
    return root / f".{name}.{os.getpid() if pid is None else pid}.tmp"


def save_checkpoint(
    root: Path,
    name: str,
    *,
    model_state: dict[str, torch.Tensor],
    optim_state: dict[str, Any],
    state: dict[str, Any],
    manifest: ManifestInfo | None = None,
    rng: dict[str, Any] | None = None,
) -> Path:
    """Write checkpoint `root/name` atomically (temp dir + rename) and return its path.

    With `manifest`, the manifest is written inside the temporary directory after state.json,
    so a visible checkpoint always has it. `rng`: the RNG states to record (default: the
    current ones). A full disk raises `DiskFull` (one line: the path, the bytes, the fix);
    nothing is left of the attempt and older checkpoints are untouched.
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    tmp = temp_dir(root, name)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        _save_torch(optim_state, optim_file(tmp))
        publish(tmp, final, model_state, rng if rng is not None else rng_state(), state, manifest)
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)  # the space it took, before measuring
        needed = tensor_bytes([model_state, optim_state])
        if no_space(exc, root, needed):
            fix = (
                "free space there (or lower runtime.checkpoint.keep_last), then rerun: it resumes from "
                f"the newest checkpoint left, {_newest(root)}"
            )
            raise disk_full(final, needed, fix) from exc
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def publish(
    tmp: Path,
    final: Path,
    model_state: dict[str, torch.Tensor],
    rng: dict[str, Any],
    state: dict[str, Any],
    manifest: ManifestInfo | None,
    files: Sequence[str] | None = None,
) -> None:
    """Write the weights, RNG states, state.json and (with `manifest`) the manifest into `tmp`,
    which holds the optimizer state already, then rename it to `final` (an old one replaced
    whole). `files`: those the manifest hashes beside the weights (default: HASHED_FILES)."""
    save_file({k: v.detach().contiguous().cpu() for k, v in model_state.items()}, weights_file(tmp))
    _save_torch(rng, rng_file(tmp))
    write_json(state_file(tmp), state)
    if manifest is not None:
        hashes = file_hashes(tmp) if files is None else file_hashes(tmp, files)
        write_checkpoint_manifest(
            tmp,
            final,
            state,
            manifest,
            artifact_type=CHECKPOINT_KIND,
            files=hashes,
            extra={
                "resumed_from": dict(manifest.resumed_from) if manifest.resumed_from else None,
                "kept": list_kept(final.parent),  # the kept checkpoints written so far (kept.py)
                **manifest.fields,
                STATE_FIELD: state,  # state.json whole, for a rerun that finds it deleted
            },
        )
    publish_dir(tmp, final)  # on disk, then renamed


def _newest(root: Path) -> str:
    ref = latest_checkpoint(root)
    return str(ref.path) if ref else "none (it starts afresh)"


def list_checkpoints(root: Path) -> list[CheckpointRef]:
    """Complete step checkpoints under `root`, oldest first (`final` not included)."""
    if not root.is_dir():
        return []
    refs = []
    for p in root.iterdir():
        step = step_of(p)
        if step is not None and p.is_dir() and state_file(p).is_file():
            refs.append(CheckpointRef(p, step))
    return sorted(refs, key=lambda r: r.step)


def latest_checkpoint(root: Path) -> CheckpointRef | None:
    """The newest complete checkpoint: `final` if present, else the highest step (a `final`
    whose state.json cannot be read has step -1: verifying it sets it aside)."""
    final = root / FINAL
    if state_file(final).is_file():
        try:
            step = int(read_json(state_file(final))["step"])
        except (OSError, ValueError, KeyError, TypeError):
            step = -1
        return CheckpointRef(final, step)
    refs = list_checkpoints(root)
    return refs[-1] if refs else None


def prune(root: Path, keep_last: int, keep: Path | None = None) -> None:
    """Keep the newest `keep_last` step checkpoints (and `final`, and `keep`: the one just
    written, whatever `keep_last` says); remove stale temp dirs."""
    refs = [r for r in list_checkpoints(root) if keep is None or r.path != keep]
    kept = max(0, keep_last - (keep is not None and step_of(keep) is not None))
    for ref in refs[: max(0, len(refs) - kept)]:
        shutil.rmtree(ref.path, ignore_errors=True)
    # leftovers of writers killed mid-write (another pid: never renamed into place)
    for p in root.iterdir():
        if (
            p.name.startswith(".")
            and p.name.endswith((".tmp", ".old"))
            and f".{os.getpid()}." not in p.name
        ):
            shutil.rmtree(p, ignore_errors=True)


def is_sharded_checkpoint(path: Path) -> bool:
    """Whether checkpoint `path` holds its optimizer state sharded (an FSDP run's, DCP); False
    where its state.json cannot be read (the integrity check names it)."""
    try:
        return read_json(state_file(path)).get(OPTIM_FORMAT) == SHARDED_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def set_aside_damaged(damage: DamagedCheckpoint) -> dict[str, str]:
    """Set a damaged checkpoint aside as `<name>.damaged-<n>` (kept), a WARNING; its record."""
    target = free_name(damage.checkpoint, "damaged")
    damage.checkpoint.rename(target)
    where, file, reason = str(damage.checkpoint), damage.file, damage.reason
    log.warning(
        "checkpoint %s is damaged (%s: %s): set aside as %s; trying the next older one",
        *(where, file, reason, target),
    )
    return {"checkpoint": where, "set_aside": str(target), "file": file, "reason": reason}
