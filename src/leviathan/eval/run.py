"""The evaluations of one trained checkpoint: which kinds there are (CHECKPOINT_EVALS), which
the config runs and with what settings, the device a job uses, the one dispatcher the workflow's
rules and `leviathan eval` run them through (`run_evaluation`), and a rule's evaluation of a
trained cell, written atomically (`evaluate`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leviathan import layout
from leviathan.workflow.cluster import eval_resources

# The evaluations of one trained checkpoint: each is a rule (eval_<kind>), a section of
# config.evaluate (<kind>) and a leviathan.eval config (EvalConfig.<kind>).
CHECKPOINT_EVALS = ("val", "wikitext", "lm_eval")


def eval_sections(config: Mapping[str, Any]) -> dict[str, Any]:
    """config.evaluate: which evaluations run (a null section is off) and their settings."""
    return dict(config.get("evaluate") or {})


def eval_config(config: Mapping[str, Any]) -> Any:
    """The `leviathan.eval` config of the workflow (raises on a bad key, before any job)."""
    from leviathan.eval.config import EvalConfig

    sections = eval_sections(config)
    return EvalConfig.from_dict({k: sections.get(k) or {} for k in CHECKPOINT_EVALS})


def enabled_evals(config: Mapping[str, Any]) -> list[str]:
    """The checkpoint evaluations the config runs: `val` always, the others unless null."""
    sections = eval_sections(config)
    return [k for k in CHECKPOINT_EVALS if k == "val" or sections.get(k) is not None]


@dataclass(frozen=True)
class EvalFiles:
    """The files one evaluation reads or keeps beside its output; None: not used."""

    val: str | os.PathLike[str] | None = None  # val: the validation token shard
    counts: str | os.PathLike[str] | None = None  # val: training id counts (token buckets)
    word_counts: str | os.PathLike[str] | None = None  # val: word counts (word buckets)
    partial: str | os.PathLike[str] | None = None  # val: running sums that survive a kill
    cache: str | None = None  # wikitext, lm_eval: lm-eval's request cache
    samples: str | os.PathLike[str] | None = None  # lm_eval: the per-sample log (JSONL)
    harness_dir: str | os.PathLike[str] | None = None  # lm_eval: lm-eval's own output layout


def run_evaluation(
    kind: str, ckpt: Any, model: Any, settings: Any, started: Any, files: EvalFiles
) -> dict[str, Any]:
    """One evaluation (`kind`, one of CHECKPOINT_EVALS) of an open checkpoint (`ckpt`, `model`:
    leviathan.eval.checkpoint.open_checkpoint) with its `settings` (EvalConfig.<kind>); the
    result document, not yet written. The workflow's rules and `leviathan eval` both run
    their evaluations through this."""
    if kind == "val":
        from leviathan.eval.val import evaluate_val

        if files.val is None:
            raise ValueError("the val evaluation needs a validation shard (--val)")
        return evaluate_val(
            ckpt,
            model,
            files.val,
            counts=files.counts,
            word_counts=files.word_counts,
            cfg=settings,
            started=started,
            partial=files.partial,
        )
    if kind == "wikitext":
        from leviathan.eval.wikitext import evaluate_wikitext

        return evaluate_wikitext(ckpt, model, settings, started=started, cache=files.cache)
    if kind == "lm_eval":
        from leviathan.eval.lm_eval_tasks import run_lm_eval

        return run_lm_eval(
            ckpt,
            model,
            settings,
            samples_out=files.samples,
            harness_dir=files.harness_dir,
            started=started,
            cache=files.cache,
        )
    raise ValueError(f"unknown evaluation {kind!r}: use one of {', '.join(CHECKPOINT_EVALS)}")


def eval_device(config: Mapping[str, Any], scale: str) -> str:
    """The device an evaluation job uses: config.evaluate.device, except that a job given GPUs
    must find one (checked before anything is loaded), and never silently runs on the CPU."""
    import torch

    device = str(eval_sections(config).get("device", "auto"))
    gpus = eval_resources(config, scale)["gpu"]
    if gpus and device in ("auto", "cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            f"this {scale} evaluation job was given {gpus} GPU(s) (config.eval_resources.{scale}) "
            "but CUDA sees none here: run it on a GPU node (check the SLURM profile's gres), or "
            f"set eval_resources.{scale}.gpus: 0 to evaluate on the CPU"
        )
    return device


def settings_key(*parts: Any) -> str:
    """A hash naming what an evaluation computes (checkpoint, precision, settings)."""
    import hashlib
    import json
    from dataclasses import asdict, is_dataclass

    plain = [asdict(p) if is_dataclass(p) and not isinstance(p, type) else p for p in parts]
    return hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()


def evaluate(
    kind: str, run_dir: str | Path, out: str | Path, config: Mapping[str, Any], **inputs: Any
) -> None:
    """Run one evaluation of a trained cell and write its JSON (atomically); `inputs`: the
    rule's input files (val, counts, word_counts) by name.

    Work in progress survives a kill: `val` keeps its running sums in `layout.eval_partial`
    and lm-eval (tasks and WikiText) its request cache in `layout.lm_eval_cache`, both beside
    the output; a rerun continues from them and removes them once the output is written."""
    from leviathan.eval.checkpoint import open_checkpoint, resolve_checkpoint
    from leviathan.eval.results import write_result
    from leviathan.io import read_json
    from leviathan.provenance import utc_now

    started = utc_now()
    cfg = eval_config(config)
    if kind not in CHECKPOINT_EVALS:
        raise ValueError(f"unknown evaluation {kind!r}: use one of {', '.join(CHECKPOINT_EVALS)}")
    state = read_json(resolve_checkpoint(run_dir) / layout.STATE)  # no weights read yet
    scale = (state.get("train_config") or {}).get("scale")
    device = eval_device(config, str(scale)) if scale else eval_sections(config).get("device")
    ckpt, model = open_checkpoint(run_dir, device=device or "auto")
    settings = getattr(cfg, kind)
    cache = str(layout.lm_eval_cache(out, settings_key(ckpt.sha256, model.precision, settings)))
    files = EvalFiles(
        val=inputs.get("val"),
        counts=inputs.get("counts"),
        word_counts=inputs.get("word_counts"),
        partial=layout.eval_partial(out),
        cache=cache,
        samples=layout.lm_eval_samples(out),
        harness_dir=layout.lm_eval_harness_dir(out),
    )
    write_result(out, run_evaluation(kind, ckpt, model, settings, started, files))
    layout.eval_partial(out).unlink(missing_ok=True)
    for db in Path(cache).parent.glob(Path(cache).name + "*"):
        db.unlink()
