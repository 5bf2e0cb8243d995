"""The evaluations of one trained checkpoint (which the config runs: leviathan.eval.config's
enabled_evals): their settings as a rule's params, and the one dispatcher the workflow's rules
(`leviathan.study.actions.evaluate`) and `leviathan eval` run them through
(`run_evaluation`)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any

from leviathan.eval.config import CHECKPOINT_EVALS
from leviathan.train.config import workflow_runtime

# settings of an evaluation that say how it runs, not what it computes
NOT_RESULT_SETTINGS = ("persist_seconds",)


def result_settings(cfg: Any, evaluation: str) -> dict[str, Any]:
    """An evaluation's settings (`cfg`: eval_config's) as plain values, for its rule's params:
    Snakemake's params rerun trigger compares builtin values only (a dataclass there would be
    skipped, and a changed setting would rerun nothing); NOT_RESULT_SETTINGS left out."""
    settings = asdict(getattr(cfg, evaluation))
    return {k: v for k, v in settings.items() if k not in NOT_RESULT_SETTINGS}


def along_enabled(config: Mapping[str, Any]) -> bool:
    """Whether the config evaluates along training; on without runtime.checkpoint.keep_at is an error."""
    if not (config.get("evaluate") or {}).get("along"):
        return False

    if not workflow_runtime(config.get("runtime")).checkpoint.keep_at:
        raise ValueError(
            "evaluate.along: true needs runtime.checkpoint.keep_at (the kept checkpoints it "
            "evaluates), e.g. runtime: {checkpoint: {keep_at: log2:512:1000}}"
        )
    return True


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
    evaluation: str, ckpt: Any, model: Any, settings: Any, started: Any, files: EvalFiles
) -> dict[str, Any]:
    """One evaluation (`evaluation`, one of CHECKPOINT_EVALS) of an open checkpoint (`ckpt`,
    `model`: leviathan.eval.checkpoint.open_checkpoint) with its `settings`
    (EvalConfig.<evaluation>); the result document, not yet written. The workflow's rules
    and `leviathan eval` both run their evaluations through this. WikiText and lm-eval read the
    datasets the data step fetched into data/eval/ where the config gives no data_files of its
    own (leviathan.eval.fetched), else the Hub."""
    from leviathan.eval.fetched import use_fetched  # the data layer: off the GPU image's path

    settings = use_fetched(evaluation, settings)
    if evaluation == "val":
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
    if evaluation == "wikitext":
        from leviathan.eval.wikitext import evaluate_wikitext

        return evaluate_wikitext(ckpt, model, settings, started=started, cache=files.cache)
    if evaluation == "lm_eval":
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
    raise ValueError(f"unknown evaluation {evaluation!r}: use one of {', '.join(CHECKPOINT_EVALS)}")


def settings_key(*parts: Any) -> str:
    """A hash naming what an evaluation computes (checkpoint, precision, settings)."""

    plain = [asdict(p) if is_dataclass(p) and not isinstance(p, type) else p for p in parts]
    return hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()
