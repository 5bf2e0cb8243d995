"""Checkpoint integrity: every file's sha256 recorded in the manifest at save, checked at restore.

A checkpoint's manifest (`manifest_file`) records the weights' sha256 as its artifact and, in
`files`, the sha256 of every other file of the checkpoint (`files.HASHED_FILES`, or an FSDP
run's shards). `verify_checkpoint` re-hashes each recorded
file before a restore and raises `DamagedCheckpoint` naming the first file that is missing,
unreadable or changed; `read.read_checkpoint_files` then loads it, turning a file its loader
cannot parse into the same error. The files are hashed in parallel (hashlib releases the GIL), so a
check takes about the time of the largest file: optim.pt, two thirds of a checkpoint.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leviathan.checkpoint.files import (
    HASHED_FILES,
    STATE,
    WEIGHTS,
    PathLike,
    state_file,
    weights_file,
)
from leviathan.io import json_bytes, read_json, sha256_file, write_json
from leviathan.layout import manifest_path
from leviathan.manifest import display_path, write_manifest

STATE_FIELD = "state"  # a checkpoint manifest's copy of its state.json
_SHA256 = re.compile(r"[0-9a-f]{64}")


class DamagedCheckpoint(Exception):
    """One file of a checkpoint is missing, unreadable or not what its manifest records."""

    def __init__(self, checkpoint: Path, file: str, reason: str) -> None:
        super().__init__(f"{checkpoint / file}: {reason}")
        self.checkpoint, self.file, self.reason = checkpoint, file, reason


@dataclass(frozen=True)
class Verified:
    """A checkpoint whose recorded files all hash as its manifest says."""

    path: Path
    manifest_sha256: str
    files: tuple[str, ...]  # the files checked
    unrecorded: tuple[str, ...]  # files of HASHED_FILES it has none of (a kept or sharded one)

    def record(self, step: int) -> dict[str, Any]:
        """What a later checkpoint's manifest records of the one its run resumed from."""
        return {
            "path": display_path(self.path),
            "step": step,
            "manifest_sha256": self.manifest_sha256,
            "verified": list(self.files),
            "unrecorded": list(self.unrecorded),
        }


def manifest_file(checkpoint: PathLike) -> Path:
    """A checkpoint's manifest: beside its weights, the artifact it describes."""
    return manifest_path(weights_file(checkpoint))


def file_hashes(directory: Path, names: Sequence[str] = HASHED_FILES) -> dict[str, str]:
    """The manifest's `files`: the sha256 of each checkpoint file beside the weights (`names`,
    relative to the checkpoint: a sharded one's `optim/` files, `dcp_checkpoint`)."""
    found = _hash_all([directory / n for n in names])
    for sha in found:
        if isinstance(sha, OSError):
            raise sha
    return dict(zip(names, found, strict=True))  # type: ignore[arg-type]


def recorded_hashes(manifest: Mapping[str, Any]) -> dict[str, str]:
    """Every file's sha256 a checkpoint manifest records, by file name."""
    hashes = {WEIGHTS: str(manifest["artifact"]["sha256"])}
    hashes.update({str(k): str(v) for k, v in manifest["files"].items()})
    return hashes


def recorded_manifest(checkpoint: Path) -> tuple[dict[str, str], str]:
    """The file hashes `checkpoint`'s manifest records (`recorded_hashes`) and the manifest's
    own sha256; a manifest missing, not JSON or without them raises `DamagedCheckpoint`."""
    mpath = manifest_file(checkpoint)
    if not mpath.is_file():
        raise DamagedCheckpoint(
            checkpoint, mpath.name, "missing: nothing records its files' hashes"
        )
    try:
        hashes = recorded_hashes(read_json(mpath))
        if not all(_SHA256.fullmatch(sha) for sha in hashes.values()):
            raise ValueError("a recorded sha256 is not 64 hex digits")
        return hashes, sha256_file(mpath)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        why = f"no key {exc}" if isinstance(exc, KeyError) else str(exc)
        raise DamagedCheckpoint(checkpoint, mpath.name, f"unreadable ({why})") from exc


def _sha_or_error(path: Path) -> str | OSError:
    try:
        return sha256_file(path)
    except OSError as exc:
        return exc


def _hash_all(paths: list[Path]) -> list[str | OSError]:
    with ThreadPoolExecutor(max(1, len(paths)), thread_name_prefix="leviathan-sha") as pool:
        return list(pool.map(_sha_or_error, paths))


def verify_checkpoint(checkpoint: Path) -> Verified:
    """Check every file `checkpoint`'s manifest records against its sha256."""
    hashes, manifest_sha = recorded_manifest(checkpoint)
    actual = _hash_all([checkpoint / name for name in hashes])
    for (name, recorded), found in zip(hashes.items(), actual, strict=True):
        if isinstance(found, FileNotFoundError):
            raise DamagedCheckpoint(checkpoint, name, "missing")
        if isinstance(found, OSError):
            raise DamagedCheckpoint(checkpoint, name, f"unreadable ({found.strerror or found})")
        if found != recorded:
            raise DamagedCheckpoint(
                checkpoint,
                name,
                f"sha256 {found[:12]} != {recorded[:12]} recorded in its manifest: the file changed",
            )
    unrecorded = tuple(n for n in (WEIGHTS, *HASHED_FILES) if n not in hashes)
    return Verified(checkpoint, manifest_sha, tuple(hashes), unrecorded)


def write_checkpoint_manifest(
    tmp: Path,
    final: Path,
    state: Mapping[str, Any],
    info: Any,
    *,
    artifact_type: str,
    files: Mapping[str, str],
    extra: Mapping[str, Any] | None = None,
) -> None:
    """The manifest of the weights in checkpoint directory `tmp` (to be published as `final`):
    what every checkpoint records (its run's inputs, config, start and device from `info`, a
    `checkpoint.ManifestInfo`; its step, tokens, fingerprint, model config and the hashes of
    the `files` beside the weights), then `extra`."""
    write_manifest(
        weights_file(tmp),
        artifact_type=artifact_type,
        recorded_path=weights_file(final),
        inputs=info.inputs,
        config=state["train_config"],
        started=info.started,
        device=info.device,
        fields={
            "checkpoint_dir": display_path(final),
            "step": state["step"],
            "tokens": state["tokens"],
            "train_fingerprint": state["train_fingerprint"],
            "files": dict(files),
            "model_config": state["model_config"],
            **(extra or {}),
        },
    )


def reinstate_state(checkpoint: Path) -> DamagedCheckpoint | None:
    """Put back the state.json of `checkpoint` (a run's final) where it is missing, from its
    manifest's copy (`STATE_FIELD`: the bytes its sha256 records). None: nothing to do (no such
    folder, or an empty one), or done; the damage otherwise, for the caller to set aside."""
    if not checkpoint.is_dir() or state_file(checkpoint).exists() or not any(checkpoint.iterdir()):
        return None  # an empty one: Snakemake makes an output's folder before the job runs
    try:
        hashes, _ = recorded_manifest(checkpoint)
        state = read_json(manifest_file(checkpoint)).get(STATE_FIELD)
    except DamagedCheckpoint as exc:
        return exc
    if state is None:
        return DamagedCheckpoint(checkpoint, STATE, "missing, and its manifest does not record it")
    data = json_bytes(state)  # as write_json wrote state.json
    if hashlib.sha256(data).hexdigest() != hashes.get(STATE):
        return DamagedCheckpoint(
            checkpoint, STATE, "missing, and its manifest's copy does not hash as it records"
        )
    write_json(state_file(checkpoint), state)  # atomic: a whole state.json or none
    return None
