"""`leviathan data inspect`: summarise and check data artifacts (corpus, shard, counts)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from leviathan.data.counts import load_counts
from leviathan.data.shards import ShardError, open_shard
from leviathan.io import sha256_file
from leviathan.layout import CORPUS_SUFFIX, COUNTS, SHARD_SUFFIX, manifest_path
from leviathan.manifest import read_manifest

ARTIFACT_SUFFIXES = (SHARD_SUFFIX, Path(COUNTS).suffix, CORPUS_SUFFIX)


def _verify(path: Path, manifest: dict[str, Any]) -> str:
    actual = sha256_file(path)
    if actual != manifest["artifact"]["sha256"]:
        raise ShardError(
            f"{path}: sha256 {actual} != manifest {manifest['artifact']['sha256']}; "
            f"the file changed after it was written; re-run the step that made it"
        )
    return "sha256 ok"


def _describe(path: Path, verify: bool, decode: int) -> list[str]:
    manifest = read_manifest(path)
    artifact_type = manifest["kind"]
    lines = [f"{path} [{artifact_type}] sha256 {manifest['artifact']['sha256'][:16]}..."]
    if artifact_type == "corpus":
        src = manifest["source"].get("kind")
        lines.append(
            f"  split {manifest['split']}: {manifest['documents']} documents, "
            f"{manifest['text_bytes']} bytes, {manifest['replaced_chars']} replaced "
            f"chars, source {src}"
        )
    elif artifact_type == "tokens":
        shard = open_shard(path)
        vocab = manifest["vocab"]
        lines.append(
            f"  {len(shard)} tokens ({manifest['dtype']}), {manifest['documents']} "
            f"documents, vocab {vocab['name']} (n_vocab {vocab['n_vocab']}, EOT "
            f"{vocab['eot_id']})"
        )
        if decode:
            from leviathan.data.tokenizers import load_tokenizer

            ids = np.asarray(shard.tokens[:decode]).tolist()
            lines.append(
                f"  first {len(ids)} tokens: {load_tokenizer(vocab['name']).decode(ids)!r}"
            )
    elif artifact_type == "counts":
        counts = load_counts(path)
        top = np.argsort(counts)[::-1][:5]
        lines.append(
            f"  {counts.size} ids, total {int(counts.sum())}, "
            f"{int(np.count_nonzero(counts))} seen; top ids {top.tolist()}"
        )
    if verify:
        lines.append("  " + _verify(path, manifest))
    return lines


def inspect_path(path: str | os.PathLike[str], verify: bool = False, decode: int = 0) -> str:
    """A multi-line report on one artifact, or on every artifact in a directory."""
    p = Path(path)
    if p.is_dir():
        found = sorted(q for q in p.iterdir() if q.name.endswith(ARTIFACT_SUFFIXES))
        if not found:
            raise FileNotFoundError(
                f"{p}: holds no data artifacts ({', '.join(ARTIFACT_SUFFIXES)})"
            )
        lines = []
        for q in found:
            if not manifest_path(q).is_file():
                lines.append(f"{q} [INCOMPLETE: no manifest; rerun the step that writes it]")
                continue
            lines += _describe(q, verify, decode)
        return "\n".join(lines)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or directory")
    return "\n".join(_describe(p, verify, decode))
