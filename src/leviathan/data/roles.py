"""Which shard plays which part: a training shard given once, a validation shard held out.

A shard is known by its path and by the sha256 its manifest records (a copy under another name
is the same shard). Training refuses a training shard named twice and a validation shard that
is one of its training shards (`check_training_shards`); evaluation refuses a validation shard,
training counts or word counts that do not fit the shards the checkpoint's manifest records it
was trained on (`check_held_out`, `check_counted_from`). Each refusal is one line naming the
shard. Torch-free.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from leviathan.io import read_json
from leviathan.layout import manifest_path

PathLike = str | os.PathLike[str]


class ShardRoleError(ValueError):
    """A shard is given twice, or for validation where it is (or was) trained on."""


def recorded_sha(path: PathLike) -> str | None:
    """The sha256 a shard's manifest records (None: no readable manifest; the loader says so)."""
    try:
        manifest = read_json(manifest_path(path))
        return str(manifest["artifact"]["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _same(a: PathLike, b: PathLike, sha_a: str | None, sha_b: str | None) -> bool:
    return Path(a).resolve() == Path(b).resolve() or (sha_a is not None and sha_a == sha_b)


def check_training_shards(train: Sequence[PathLike], val: PathLike | None) -> None:
    """Refuse a training shard given twice and a validation shard among the training shards."""
    shas = [recorded_sha(p) for p in train]
    for i, (path, sha) in enumerate(zip(train, shas, strict=True)):
        for other, other_sha in zip(train[:i], shas[:i], strict=True):
            if _same(path, other, sha, other_sha):
                raise ShardRoleError(
                    f"{path}: given twice as a training shard (also as {other}): its tokens "
                    "would be trained on twice per epoch; name each shard once"
                )
    if val is None:
        return
    val_sha = recorded_sha(val)
    for path, sha in zip(train, shas, strict=True):
        if _same(val, path, val_sha, sha):
            raise ShardRoleError(
                f"{val}: the validation shard is also a training shard ({path}): its loss would "
                "measure memorisation; validate on the held-out split (val.bin)"
            )


def check_held_out(
    val: PathLike, val_sha: str, trained_on: Mapping[str, str], ckpt: PathLike
) -> None:
    """Refuse to evaluate checkpoint `ckpt` on a shard it was trained on (`trained_on`: sha256
    -> path of its training shards, as its manifest records them)."""
    if val_sha in trained_on:
        raise ShardRoleError(
            f"{val}: is a training shard of {ckpt} (recorded as {trained_on[val_sha]}): "
            "evaluate on the held-out split (val.bin of the same corpus and vocabulary)"
        )


def check_counted_from(
    what: PathLike, counted: str | None, trained_on: Mapping[str, str], ckpt: PathLike
) -> None:
    """Refuse training counts (`what`, counted from the shard of sha256 `counted`) that were not
    counted from a shard checkpoint `ckpt` was trained on (nothing to check where either is
    unrecorded)."""
    if counted is None or not trained_on or counted in trained_on:
        return
    raise ShardRoleError(
        f"{what}: counted from a shard of sha256 {counted[:12]}, not from the shards {ckpt} "
        f"was trained on ({', '.join(sorted(trained_on.values()))}): use the counts written "
        "beside its training shard (another corpus's counts would bucket the wrong frequencies)"
    )
