"""What each workflow rule does, as plain functions of the validated config (unit-tested;
leviathan.study.rules unpacks `snakemake` and calls these): size the corpus to fetch (the fetch
is leviathan.data.fetch_dispatch's), tokenize it, count the validation text's words, evaluate a trained cell (through leviathan.eval.run's dispatcher,
on the device its job was given), group cells for sample efficiency. What a job asks of the
cluster is in leviathan.study.cluster, the training command in leviathan.study.launch."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from leviathan import layout
from leviathan.cells import Cell
from leviathan.checkpoint.files import state_file
from leviathan.eval.config import CHECKPOINT_EVALS, eval_config, eval_sections
from leviathan.eval.run import EvalFiles, run_evaluation, settings_key
from leviathan.study.cluster import eval_resources
from leviathan.study.corpus_size import corpus_bytes, fetch_max_bytes


def corpus_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """config.corpus as the fetch applies it: `max_bytes: auto` replaced by the size the
    configured studies need (leviathan.study.corpus_size), so a larger budget refetches."""
    return {**config["corpus"], "max_bytes": fetch_max_bytes(config)}


def tokenize_options(config: Mapping[str, Any], vocab: str) -> dict[str, Any]:
    """config.tokenize for one vocabulary, `max_bytes: auto` replaced by the training text its
    largest budget needs (budget x corpus.bytes_per_token x (1 + corpus.size_margin),
    leviathan.study.corpus_size), so a larger budget retokenizes."""
    options = dict(config.get("tokenize") or {})
    if options.get("max_bytes") == "auto":
        options["max_bytes"] = corpus_bytes(config).get(vocab)
    return options


# config.tokenize's keys that say how the job runs, not what the shards hold
TOKENIZE_HOW = ("threads", "processes")


def tokenize_content(config: Mapping[str, Any], vocab: str) -> dict[str, Any]:
    """`tokenize_options` less how the job runs (`TOKENIZE_HOW`): what the shards hold, the
    tokenize rule's rerun trigger."""
    options = tokenize_options(config, vocab)
    return {k: v for k, v in options.items() if k not in TOKENIZE_HOW}


def tokenize(
    corpus_dir: str | Path, vocab: str, out: str | Path, options: Mapping[str, Any]
) -> dict[str, Any]:
    from leviathan.data.prepare import tokenize_corpus

    return tokenize_corpus(
        corpus_dir,
        vocab,
        out,
        threads=options.get("threads"),
        processes=options.get("processes"),
        progress=False,
        max_train_bytes=options.get("max_bytes"),
    )


def word_counts(
    train: str | Path, val: str | Path, out: str | Path, config: Mapping[str, Any]
) -> None:
    from leviathan.eval.results import write_result
    from leviathan.eval.val import build_word_counts

    options = eval_sections(config).get("word_counts") or {}
    write_result(
        out, build_word_counts(train, val, max_train_tokens=options.get("max_train_tokens"))
    )


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


def evaluate(
    evaluation: str, run_dir: str | Path, out: str | Path, config: Mapping[str, Any], **inputs: Any
) -> None:
    """Run one evaluation of a trained cell and write its JSON (atomically); `inputs`: the
    rule's input files (val, counts, word_counts) by name.

    Work in progress survives a kill: `val` keeps its running sums in `layout.eval_partial`
    and lm-eval (tasks and WikiText) its request cache in `layout.lm_eval_cache`, both beside
    the output; a rerun continues from them and removes them once the output is written.
    The fused kernels are checked on the job's device first (runtime.kernel_check, as for
    training: `open_checkpoint`)."""
    from leviathan.eval.checkpoint import open_checkpoint, resolve_checkpoint
    from leviathan.eval.results import write_result
    from leviathan.io import read_json
    from leviathan.provenance import utc_now
    from leviathan.train.config import workflow_runtime

    started = utc_now()
    cfg = eval_config(config)
    if evaluation not in CHECKPOINT_EVALS:
        raise ValueError(
            f"unknown evaluation {evaluation!r}: use one of {', '.join(CHECKPOINT_EVALS)}"
        )
    state = read_json(state_file(resolve_checkpoint(run_dir)))  # no weights read yet
    scale = (state.get("train_config") or {}).get("scale")
    device = eval_device(config, str(scale)) if scale else eval_sections(config).get("device")
    check = workflow_runtime(config.get("runtime")).kernel_check
    ckpt, model = open_checkpoint(run_dir, device=device or "auto", kernel_check=check)
    settings = getattr(cfg, evaluation)
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
    write_result(out, run_evaluation(evaluation, ckpt, model, settings, started, files))
    layout.eval_partial(out).unlink(missing_ok=True)
    for db in Path(cache).parent.glob(Path(cache).name + "*"):
        db.unlink()


def sample_efficiency_groups(cells: list[Cell]) -> dict[tuple[str, str, int], list[Cell]]:
    """(scale, vocab, seed) groups with a tied baseline and another variant; tied first."""
    groups: dict[tuple[str, str, int], list[Cell]] = {}
    for cell in cells:
        groups.setdefault((cell.scale, cell.vocab, cell.seed), []).append(cell)
    return {
        key: sorted(group, key=lambda c: c.variant != "tied")
        for key, group in groups.items()
        if any(c.variant == "tied" for c in group) and len(group) > 1
    }
