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
`leviathan.provenance.record`, the same function that fills every manifest. The evaluation
writes the output's manifest beside it when it finishes (`write_result`: `<output>.json`, kind
"evaluation", with the output's sha256 and its inputs'), and every reader checks the output
against it (`read_result`, the report): an output edited afterwards is refused, and
`leviathan audit` says so even where a table was rebuilt from it.

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

from leviathan.anchor import EVALUATION_MANIFEST, check_evaluation
from leviathan.checkpoint.files import state_file, weights_file
from leviathan.eval.standin import is_stand_in
from leviathan.io import read_json, sha256_file, write_json
from leviathan.layout import manifest_path
from leviathan.manifest import display_path, invalidate_manifest, read_manifest, write_manifest
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


def manifest_inputs(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What an evaluation output's manifest records as its inputs: the data it read (role, path,
    sha256) and, where it evaluated one, the checkpoint's weights and state."""
    inputs = [
        {k: i[k] for k in ("role", "path", "sha256") if k in i} for i in result.get("inputs", [])
    ]
    ckpt = result.get("checkpoint")
    if isinstance(ckpt, Mapping) and ckpt.get("path"):
        inputs.append(
            {
                "role": "checkpoint",
                "path": weights_file(ckpt["path"]).as_posix(),
                "sha256": ckpt["sha256"],
            }
        )
        inputs.append(
            {
                "role": "checkpoint_state",
                "path": state_file(ckpt["path"]).as_posix(),
                "sha256": ckpt.get("state_sha256"),
            }
        )
    return inputs


def write_result(path: str | os.PathLike[str], result: Mapping[str, Any]) -> Path:
    """Write an evaluation output atomically (strict JSON: no NaN/inf), then its manifest
    (`<output>.json`, kind "evaluation": the output's sha256, its inputs' and the code version),
    and return its path. Until the manifest is written the output has none, so it reads as
    unfinished, never as paired with an older manifest. A full disk is `DiskFull`, one line."""
    _check_finite(result)
    invalidate_manifest(path)
    write_json(path, result, fix="free space there, then rerun the evaluation")
    started = result.get("started_utc")
    write_manifest(
        path,
        artifact_type=EVALUATION_MANIFEST,
        inputs=manifest_inputs(result),
        config=result.get("config"),
        started=_dt.datetime.fromisoformat(started) if isinstance(started, str) else None,
        device=(result.get("env") or {}).get("device"),
        fields={"evaluation": result.get("kind")},
    )
    return Path(path)


def read_result(path: str | os.PathLike[str], evaluation: str | None = None) -> dict[str, Any]:
    """An evaluation output, refused (`leviathan.anchor.ChangedArtifact`) unless it is the file
    its manifest records and, in a cell's evaluation directory, of that cell's checkpoint."""
    result: dict[str, Any] = read_json(path)
    check_evaluation(path, result)
    if evaluation is not None and result.get("kind") != evaluation:
        raise ValueError(
            f"{path}: is a {result.get('kind')!r} evaluation output, expected {evaluation!r}"
        )
    return result
