"""The one format of every evaluation output: a JSON object written atomically.

    {
      "schema": 2, "kind": "val" | "wikitext" | "lm_eval" | "sample_efficiency" | "word_counts",
      "checkpoint": {path, sha256 (of model.safetensors), manifest (its model.safetensors.json),
                     step, tokens, scale, vocab, variant, seed, model_config, ...} | null,
      "inputs": [{"role", "path", "sha256", "manifest"?}, ...],   data it used, with manifests
      "config": {...}, "config_sha256": "...",                    the evaluation's settings
      "results": {...},
      "stand_in_data": [paths],   inputs that are the offline stand-ins (workflow/resources/smoke/)
      "code": {leviathan, git_commit, git_dirty, git_diff},
      "env": {python, implementation, torch, cuda, host, device, slurm_job_id, packages},
      "started_utc": "...", "finished_utc": "...", "created_utc": "...", "seconds": ...
    }

`code`, `env`, `config`, `config_sha256`, `started_utc` and `finished_utc` come from
`leviathan.provenance.record`, the same function that fills every manifest. An output's own
sha256 is recorded by whoever consumes it (the report tables).

The fields of `results` that others read (the report's tables, the evaluation along training)
are named here once: RFC 6901 JSON pointers into an output (VAL_LOSS, ..., `lm_eval_metric`)
and the keys of the val output's frequency buckets (FREQUENCY_KEYS).
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leviathan.eval.standin import is_stand_in
from leviathan.io import read_json, sha256_file, write_json
from leviathan.layout import manifest_path
from leviathan.manifest import display_path, read_manifest
from leviathan.provenance import record

if TYPE_CHECKING:  # the report reads results without torch
    from leviathan.eval.checkpoint import Checkpoint

SCHEMA = 2  # 2: + config_sha256, started_utc/finished_utc, env.packages, checkpoint.manifest

# The val output's frequency-stratified loss: token-level and word-level buckets
FREQUENCY_KEYS = ("frequency_tokens", "frequency_words")


def lm_eval_metric(task: str, metric: str) -> str:
    """A task's metric in the lm_eval output (lm-eval's name, e.g. "acc,none")."""
    return f"/results/tasks/{task}/metrics/{metric}"


def frequency_bucket(key: str, i: int) -> str:
    """The `i`-th log10 bucket of the val output's `key` (one of FREQUENCY_KEYS)."""
    return f"/results/{key}/log10/{i}"


def group_field(field: str) -> str:
    """A field of a per-(scale, vocab, seed) comparison output (sample efficiency, along
    training), e.g. `baseline/target_val_loss`."""
    return f"/results/{field}"


def group_run_field(i: int, field: str) -> str:
    """A field of the `i`-th run record of a per-(scale, vocab, seed) comparison output."""
    return f"/results/runs/{i}/{field}"


# The fields the report's tables read (JSON pointers into the val, wikitext, lm_eval outputs).
# WikiText-103 perplexity per word (lm-eval's wikitext metric): independent of the tokenizer,
# so vocabularies and the paper compare; token-level perplexity is in the evaluation JSON too
WIKITEXT_PPL = "/results/word_perplexity"
VAL_LOSS = "/results/overall/loss"
VAL_TARGETS = "/results/overall/targets"  # the validation tokens a loss rests on (its sample)
VAL_BPB = "/results/overall/bits_per_byte"
LAMBADA_PPL = lm_eval_metric("lambada_openai", "perplexity,none")


def perplexity(loss: float | None) -> float | None:
    """exp(loss), or None where the loss is missing or exp overflows (JSON has no inf)."""
    if loss is None or not math.isfinite(loss):
        return None
    try:
        return math.exp(loss)
    except OverflowError:
        return None


def file_record(
    path: str | os.PathLike[str], role: str, *, sha256: str | None = None
) -> dict[str, Any]:
    """An input file: its role, path, sha256 and, where it has one, its manifest."""
    p = Path(path)
    rec: dict[str, Any] = {"role": role, "path": display_path(p)}
    if manifest_path(p).is_file():
        manifest = read_manifest(p)
        rec["manifest"] = manifest
        rec["sha256"] = sha256 or manifest.get("artifact", {}).get("sha256") or sha256_file(p)
    else:
        rec["sha256"] = sha256 or sha256_file(p)
    return rec


def envelope(
    evaluation: str,
    *,
    checkpoint: Checkpoint | None,
    inputs: Sequence[Mapping[str, Any]],
    config: Mapping[str, Any],
    results: Mapping[str, Any],
    seconds: float | None = None,
    device: str | None = None,
    started: _dt.datetime | None = None,
) -> dict[str, Any]:
    """An evaluation output; `started` is when the evaluation (command) began."""
    prov = record(config=config, started=started, device=device)
    return {
        "schema": SCHEMA,
        "kind": evaluation,
        "checkpoint": checkpoint.record() if checkpoint is not None else None,
        "inputs": [dict(i) for i in inputs],
        "results": dict(results),
        "stand_in_data": sorted({str(i["path"]) for i in inputs if is_stand_in(i["path"])}),
        **prov,
        "created_utc": prov["finished_utc"],
        "seconds": None if seconds is None else round(seconds, 3),
    }


def _check_finite(obj: Any, where: str = "$") -> None:
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"non-finite value {obj} at {where}: not representable in JSON")
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            _check_finite(v, f"{where}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_finite(v, f"{where}[{i}]")


def write_result(path: str | os.PathLike[str], result: Mapping[str, Any]) -> Path:
    """Write an evaluation output atomically (strict JSON: no NaN/inf) and return its path; a
    full disk is `DiskFull`, one line."""
    _check_finite(result)
    write_json(path, result, fix="free space there, then rerun the evaluation")
    return Path(path)


def read_result(path: str | os.PathLike[str], evaluation: str | None = None) -> dict[str, Any]:
    result: dict[str, Any] = read_json(path)
    if evaluation is not None and result.get("kind") != evaluation:
        raise ValueError(
            f"{path}: is a {result.get('kind')!r} evaluation output, expected {evaluation!r}"
        )
    return result
