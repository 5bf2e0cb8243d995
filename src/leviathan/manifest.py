"""Manifests: the JSON record written next to every artifact (data, checkpoints).

The manifest of `X` is `X.json`. It records what the artifact is (sha256, size), what it
was made from (input paths and their sha256), the vocabulary (name, size, BPE file sha256,
EOT id) where one was used, step-specific fields (dtype, token/document counts, the
source of a corpus, a checkpoint's step) and the provenance every artifact shares
(`leviathan.provenance.record`): code version, environment (host, device, SLURM job,
package versions), the step's resolved config with its sha256, and start/end times.
`write_manifest` is the one function that writes them, so provenance can be extended in
one place; an artifact is complete only once its manifest exists (the manifest is always
written after the artifact has been renamed into place, or inside the temporary
directory that is renamed into place as a whole).

Manifests chain through their inputs: evaluation output -> checkpoint
(`model.safetensors.json`) -> token shards (`train.bin.json`, `val.bin.json`) -> raw
corpus (`train.jsonl.zst.json`) and the vocabulary's BPE file (its sha256 in `vocab`).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from leviathan import __version__
from leviathan.io import read_json, sha256_file, write_json
from leviathan.layout import manifest_path
from leviathan.provenance import record, utc_now
from leviathan.vocab import VocabSpec

MANIFEST_SCHEMA = 2  # 2: + the provenance record (code, env, config, config_sha256, times)


def display_path(path: str | os.PathLike[str]) -> str:
    """A path as recorded in manifests: relative to the working directory when inside it."""
    p = Path(path).absolute()
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def vocab_record(spec: VocabSpec, bpe_sha256: str | None = None) -> dict[str, Any]:
    """The vocabulary facts every token artifact carries."""
    return {
        "name": spec.name,
        "encoding": spec.encoding,
        "n_vocab": spec.n_vocab,
        "eot_id": spec.eot_id,
        "bpe_file": spec.bpe_file,
        "bpe_sha256": bpe_sha256 or spec.bpe_sha256,
    }


def input_record(
    path: str | os.PathLike[str],
    sha256: str | None = None,
    *,
    role: str | None = None,
    check: str | None = None,
) -> dict[str, str]:
    """One input of a step: its path and content hash (computed unless given), and role;
    `check`: what was checked of the file where the hash is not one computed from it now
    (e.g. a shard's sampled fingerprint: the hash is then its manifest's)."""
    rec = {"path": display_path(path), "sha256": sha256 or sha256_file(path)}
    if check is not None:
        rec["check"] = check
    return {"role": role, **rec} if role is not None else rec


def recorded_sha256(path: str | os.PathLike[str], artifact_type: str | None = None) -> str:
    """The sha256 of `path` as its manifest records it (no re-read of a large file);
    computed from the file where it has no manifest (of `artifact_type`, when given)."""
    mpath = manifest_path(path)
    if mpath.is_file():
        try:
            manifest = read_json(mpath)
        except ValueError:  # not JSON: not a manifest
            manifest = None
        sha = manifest.get("artifact", {}).get("sha256") if isinstance(manifest, dict) else None
        if sha and (artifact_type is None or manifest.get("kind") == artifact_type):
            return str(sha)
    return sha256_file(path)


def write_manifest(
    artifact: str | os.PathLike[str],
    *,
    artifact_type: str,
    inputs: Sequence[Mapping[str, str]] = (),
    vocab: Mapping[str, Any] | None = None,
    fields: Mapping[str, Any] | None = None,
    artifact_sha256: str | None = None,
    config: Mapping[str, Any] | None = None,
    started: _dt.datetime | None = None,
    device: str | None = None,
    recorded_path: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Write `<artifact>.json` atomically and return its content.

    `artifact` must already be complete under its final name, or inside a temporary
    directory that is renamed into place whole; then `recorded_path` is the artifact's
    final path, recorded instead of the temporary one. `inputs` are records from
    `input_record`; `vocab` one from `vocab_record`; `fields` the step's own facts.
    `artifact_sha256` avoids re-reading a large file whose hash was computed while writing.
    `config` (the step's resolved settings), `started` (when the step began) and `device`
    go into the provenance record (`leviathan.provenance.record`); the manifest's
    `finished_utc` is the time of writing it.
    """
    path = Path(artifact)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: cannot write a manifest for a missing artifact")
    final = Path(recorded_path) if recorded_path is not None else path
    sha256 = artifact_sha256 or sha256_file(path)
    finished = utc_now()
    manifest: dict[str, Any] = {
        "schema": MANIFEST_SCHEMA,
        "kind": artifact_type,
        "artifact": {
            "path": display_path(final),
            "name": final.name,
            "bytes": path.stat().st_size,
            "sha256": sha256,
        },
        "inputs": [dict(i) for i in inputs],
        "created_utc": finished.isoformat(timespec="seconds"),
        "software": {
            "leviathan": __version__,
            "python": platform.python_version(),
            "implementation": sys.implementation.name,
        },
        **record(config=config, started=started, finished=finished, device=device),
    }
    if vocab is not None:
        manifest["vocab"] = dict(vocab)
    for key, value in (fields or {}).items():
        if key in manifest:
            raise ValueError(f"manifest field {key!r} clashes with a reserved key")
        manifest[key] = value
    write_json(manifest_path(path), manifest)
    return manifest


def invalidate_manifest(artifact: str | os.PathLike[str]) -> None:
    """Remove the manifest of `artifact` (call just before replacing the artifact).

    Between the rename of a new artifact and the write of its manifest, the artifact then
    has no manifest at all, so it reads as incomplete instead of pairing with the old one.
    """
    manifest_path(artifact).unlink(missing_ok=True)


def read_manifest(
    artifact: str | os.PathLike[str], artifact_type: str | None = None
) -> dict[str, Any]:
    """Read the manifest of `artifact`, checking it exists and (optionally) its kind
    (`artifact_type`)."""
    path = Path(artifact)
    mpath = manifest_path(path)
    if not mpath.is_file():
        hint = (
            "the step that writes it did not finish; rerun it"
            if path.exists()
            else "the file does not exist either; run the step that writes it"
        )
        raise FileNotFoundError(f"{path}: no manifest {mpath.name} next to it ({hint})")
    manifest: dict[str, Any] = read_json(mpath)
    if artifact_type is not None and manifest.get("kind") != artifact_type:
        raise ValueError(
            f"{mpath}: is a {manifest.get('kind')!r} manifest, expected {artifact_type!r} "
            f"(pass the right file)"
        )
    return manifest
