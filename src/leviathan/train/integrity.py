"""Checkpoint integrity: every file's sha256 recorded in the manifest at save, checked at restore.

A checkpoint's manifest (`model.safetensors.json`) records the weights' sha256 as its artifact
and, in `files`, the sha256 of optim.pt, rng.pt and state.json (manifests written before `files`
existed record state.json as `state_sha256` only). `verify_checkpoint` re-hashes each recorded
file before a restore and raises `DamagedCheckpoint` naming the first file that is missing,
unreadable or changed; `read_checkpoint_files` then loads it, turning a file its loader cannot
parse into the same error. The files are hashed in parallel (hashlib releases the GIL), so a
check takes about the time of the largest file: optim.pt, two thirds of a checkpoint.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from leviathan.io import read_json, sha256_file
from leviathan.layout import OPTIM, RNG, STATE, WEIGHTS, manifest_path
from leviathan.manifest import display_path, write_manifest

HASHED_FILES = (OPTIM, RNG, STATE)  # the manifest's `files`, beside its artifact (the weights)
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
    unrecorded: tuple[str, ...]  # files a manifest of an older version records no hash for

    def record(self, step: int) -> dict[str, Any]:
        """What a later checkpoint's manifest records of the one its run resumed from."""
        return {
            "path": display_path(self.path),
            "step": step,
            "manifest_sha256": self.manifest_sha256,
            "verified": list(self.files),
            "unrecorded": list(self.unrecorded),
        }


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
    hashes.update({str(k): str(v) for k, v in (manifest.get("files") or {}).items()})
    if STATE not in hashes and manifest.get("state_sha256"):
        hashes[STATE] = str(manifest["state_sha256"])
    return hashes


def recorded_manifest(checkpoint: Path) -> tuple[dict[str, str], str]:
    """The file hashes `checkpoint`'s manifest records (`recorded_hashes`) and the manifest's
    own sha256; a manifest missing, not JSON or without them raises `DamagedCheckpoint`."""
    mpath = manifest_path(checkpoint / WEIGHTS)
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


def _loaders(device: str) -> dict[str, tuple[str, Callable[[Path], Any]]]:
    return {
        "model": (WEIGHTS, lambda p: load_file(p, device=device)),
        "optim": (OPTIM, lambda p: torch.load(p, map_location=device, weights_only=True)),
        "rng": (RNG, lambda p: torch.load(p, weights_only=True)),
        "state": (STATE, read_json),
    }


def read_checkpoint_files(
    checkpoint: Path, device: torch.device | str = "cpu", keys: Collection[str] | None = None
) -> dict[str, Any]:
    """{'model', 'optim', 'rng', 'state'} of a checkpoint (those of `keys` only, where given;
    safe loaders only); a file that cannot be read or parsed raises `DamagedCheckpoint`."""
    loaded: dict[str, Any] = {}
    for key, (name, load) in _loaders(str(device)).items():
        if keys is not None and key not in keys:
            continue
        try:
            loaded[key] = load(checkpoint / name)
        except FileNotFoundError as exc:
            raise DamagedCheckpoint(checkpoint, name, "missing") from exc
        except Exception as exc:  # noqa: BLE001 - each loader has its own errors (torch, safetensors, json)
            raise DamagedCheckpoint(checkpoint, name, f"unreadable ({exc})") from exc
    if not isinstance(loaded["state"], dict) or not isinstance(loaded["state"].get("step"), int):
        raise DamagedCheckpoint(checkpoint, STATE, "unreadable (no step)")
    return loaded


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
        tmp / WEIGHTS,
        artifact_type=artifact_type,
        recorded_path=final / WEIGHTS,
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
            "state_sha256": files[STATE],
            "model_config": state["model_config"],
            **(extra or {}),
        },
    )
