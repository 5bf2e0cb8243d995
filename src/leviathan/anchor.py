"""Artifacts checked against the manifests their producers wrote, before anything builds on them.

Every artifact's producer writes its manifest when it finishes (`leviathan.manifest`): an
evaluation output (`leviathan.eval.results.write_result`), a metrics log at the end of training
(`leviathan.train.log_anchor`), a corpus, a token shard, a checkpoint. A consumer reads the
artifact only once `check_anchored` has found it to be the file its manifest records; one that
changed since is refused in one line (`ChangedArtifact`) naming the file, its manifest and the
fix. So an edited file cannot pass into a table, a comparison or another evaluation by being
read again: the report, sample efficiency and the val evaluation check each input this way, and
`leviathan audit` checks the same manifests.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from leviathan.checkpoint.files import STATE, weights_file
from leviathan.io import read_json, sha256_file
from leviathan.layout import (
    along_group,
    eval_cell_key,
    is_along,
    is_sample_efficiency,
    manifest_path,
    record_cell_key,
    sample_efficiency_group,
)

EVALUATION_MANIFEST = "evaluation"  # the manifest kind of every evaluation output
# the `kind` of every evaluation output (leviathan.eval.results)
EVALUATION_KINDS = frozenset(
    {"val", "wikitext", "lm_eval", "sample_efficiency", "word_counts", "along"}
)


class ChangedArtifact(ValueError):
    """A file is missing its manifest, or is not the file its manifest records."""


def read_anchor(path: str | os.PathLike[str], fix: str) -> dict[str, Any]:
    """The manifest beside `path`; a missing or unreadable one raises `ChangedArtifact`."""
    p = Path(path)
    mpath = manifest_path(p)
    try:
        manifest = read_json(mpath)
    except FileNotFoundError:
        raise ChangedArtifact(
            f"{p}: no manifest {mpath.name} beside it, so nothing records what its producer "
            f"wrote: {fix}"
        ) from None
    except (OSError, ValueError) as exc:
        raise ChangedArtifact(f"{mpath}: not a readable manifest ({exc}): {fix}") from None
    if not isinstance(manifest, Mapping) or not isinstance(manifest.get("artifact"), Mapping):
        raise ChangedArtifact(f"{mpath}: not a manifest (no artifact record): {fix}")
    return dict(manifest)


def anchor_problem(path: str | os.PathLike[str]) -> str | None:
    """Why `path` is not the file its manifest records (None: it is). Its manifest must exist."""
    recorded = str(
        read_anchor(path, "rewrite it with the step that makes it")["artifact"].get("sha256")
    )
    actual = sha256_file(path)
    if actual == recorded:
        return None
    return (
        f"{path}: sha256 {actual[:12]} != {recorded[:12]} recorded in its manifest "
        f"{manifest_path(path).name}: the file changed since its producer wrote it"
    )


def check_anchored(path: str | os.PathLike[str], fix: str) -> dict[str, Any]:
    """Refuse `path` unless its sha256 is the one its manifest records; return the manifest.
    `fix`: how to make the file whole again (e.g. the command that rewrites it)."""
    manifest = read_anchor(path, fix)
    why = anchor_problem(path)
    if why is not None:
        raise ChangedArtifact(f"{why}; {fix}")
    return manifest


def evaluation_fix(path: str | os.PathLike[str]) -> str:
    """What to do about an evaluation output that is not as its evaluation wrote it."""
    return (
        f"rerun the evaluation that writes it (in the workflow: snakemake {path} --force "
        "--profile profiles/local)"
    )


def check_evaluation(path: str | os.PathLike[str], doc: Any) -> None:
    """An evaluation output as a consumer reads it: as its evaluation wrote it (its manifest),
    and, where it sits in a cell's evaluation directory, of that cell's checkpoint."""
    check_anchored(path, evaluation_fix(path))
    check_cell(path, doc)


def _input_cell(path: str) -> tuple[str, ...]:
    """(scale, vocab, variant, seed<k>) of a run's log or a cell's evaluation, by its path."""
    p = Path(path)
    key = eval_cell_key(p)
    return tuple(key.split("/")) if key else p.parent.parts[-4:]


def check_group(path: str | os.PathLike[str], doc: Any) -> None:
    """A comparison of a (scale, vocab, seed) group (sample efficiency, along training) must
    compare runs of that group."""
    if not (is_sample_efficiency(path) or is_along(path)) or not isinstance(doc, Mapping):
        return
    group = (sample_efficiency_group if is_sample_efficiency(path) else along_group)(path)
    for inp in doc.get("inputs") or []:
        cell = _input_cell(str(inp.get("path")))
        if len(cell) == 4 and (cell[0], cell[1], cell[3]) != group:
            raise ChangedArtifact(
                f"{path}: compares {inp.get('path')}, a run of another group than "
                f"{'/'.join(group)} (a copied or swapped output): {evaluation_fix(path)}"
            )


def check_cell(path: str | os.PathLike[str], doc: Any) -> None:
    """An evaluation under results/eval/<study>/<cell>/ must name that cell's checkpoint; a
    group's comparison must compare that group's runs."""
    check_group(path, doc)
    sits_in = eval_cell_key(path)
    ckpt = doc.get("checkpoint") if isinstance(doc, Mapping) else None
    if sits_in is None or not isinstance(ckpt, Mapping):
        return
    named = record_cell_key(ckpt)
    if named != sits_in:
        raise ChangedArtifact(
            f"{path}: evaluates the checkpoint of cell {named} but fills the row of {sits_in} "
            f"(a copied or swapped evaluation): {evaluation_fix(path)}"
        )


def is_evaluation(doc: Any) -> bool:
    """Whether a parsed JSON document is an evaluation output."""
    return isinstance(doc, Mapping) and doc.get("kind") in EVALUATION_KINDS and "results" in doc


def check_state(path: str | os.PathLike[str]) -> None:
    """A checkpoint's state.json as its checkpoint's manifest records it (where it has one)."""
    mpath = manifest_path(weights_file(Path(path).parent))
    if not mpath.is_file():
        return
    manifest = read_json(mpath)
    recorded = (manifest.get("files") or {}).get(STATE)
    actual = sha256_file(path)
    if recorded and actual != recorded:
        raise ChangedArtifact(
            f"{path}: sha256 {actual[:12]} != {str(recorded)[:12]} recorded in its checkpoint's "
            f"manifest {mpath.name}: it changed since training wrote it; rerun the training "
            "command, which sets a damaged checkpoint aside and resumes from the newest intact one"
        )


def check_report_input(path: str | os.PathLike[str], doc: Any) -> None:
    """What the report reads, checked before a number is taken from it: an evaluation output
    against its manifest and its cell (`check_evaluation`), a final checkpoint's state.json
    against the checkpoint's manifest (`check_state`)."""
    if is_evaluation(doc):
        check_evaluation(path, doc)
    elif Path(path).name == STATE:
        check_state(path)
