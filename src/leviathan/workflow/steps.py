"""What each workflow rule does, as plain functions of the validated config (unit-tested;
the rule scripts only unpack `snakemake` and call these)."""

from __future__ import annotations

import ast
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from leviathan import layout
from leviathan.workflow.grid import Cell


def corpus_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """config.corpus as the fetch applies it: `max_bytes: auto` replaced by the size the
    configured studies need (leviathan.workflow.plan), so a larger budget refetches."""
    from leviathan.workflow.plan import fetch_max_bytes

    return {**config["corpus"], "max_bytes": fetch_max_bytes(config)}


def fetch_corpus(corpus: Mapping[str, Any], out: str | Path) -> dict[str, Any]:
    """Write the configured corpus to `out` (<split>.jsonl.zst + manifests)."""
    from leviathan.data import fetch
    from leviathan.data.sources import HFSpec

    kind = corpus["kind"]
    limits = (corpus.get("max_docs"), corpus.get("max_bytes"))
    parts = {"part_bytes": corpus["part_bytes"]} if corpus.get("part_bytes") else {}
    if kind == "embedded":
        return fetch.fetch_embedded(out, val_fraction=corpus["val_fraction"], **parts)
    if kind == "text":
        if not corpus.get("paths"):
            raise ValueError("corpus.kind=text needs corpus.paths (files, directories or globs)")
        return fetch.fetch_text(
            out,
            corpus["paths"],
            val_fraction=corpus["val_fraction"],
            text_field=corpus["text_field"],
            limits=limits,
            **parts,
        )
    if kind == "hf":
        if not corpus.get("dataset"):
            raise ValueError("corpus.kind=hf needs corpus.dataset (a Hub id or json/text/parquet)")

        def spec(split: str) -> HFSpec:
            files = tuple(corpus["data_files"]) if corpus.get("data_files") else None
            return HFSpec(
                dataset=corpus["dataset"],
                split=split,
                config=corpus.get("config"),
                revision=corpus.get("revision"),
                data_files=files,
                text_field=corpus["text_field"],
            )

        train_split = corpus.get("train_split") or "train"
        if corpus.get("val_split"):
            specs = {"train": spec(train_split), "val": spec(corpus["val_split"])}
            return fetch.fetch_hf(out, specs, limits=limits, **parts)
        return fetch.fetch_hf(
            out,
            {"train": spec(train_split)},
            val_fraction=corpus["val_fraction"],
            limits=limits,
            **parts,
        )
    if kind == "pile":
        options = {
            k: corpus[k]
            for k in ("dataset", "config", "revision", "train_split", "val_split", "local_dir")
            if corpus.get(k)
        }
        return fetch.fetch_pile(out, train_limits=limits, val_limits=limits, **options, **parts)
    raise ValueError(f"corpus.kind={kind!r}: use embedded, text, hf or pile")


def tokenize_options(config: Mapping[str, Any], vocab: str) -> dict[str, Any]:
    """config.tokenize for one vocabulary, `max_bytes: auto` replaced by the training text its
    largest budget needs (budget x corpus.bytes_per_token x (1 + corpus.size_margin),
    leviathan.workflow.plan.corpus_bytes), so a larger budget retokenizes."""
    from leviathan.workflow.plan import corpus_bytes

    options = dict(config.get("tokenize") or {})
    if options.get("max_bytes") == "auto":
        options["max_bytes"] = corpus_bytes(config).get(vocab)
    return options


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


# A training job's resources where config.resources[<scale>] is silent (their one home).
RESOURCE_DEFAULTS: dict[str, Any] = {
    "gpus": 0,
    "gpu_model": None,
    "cpus_per_gpu": 8,
    "cpus": 2,
    "mem_mb": 4000,
    "runtime": 60,
}
# SLURM settings a job may carry (snakemake-executor-plugin-slurm resource names); unset ones
# keep the profile's default-resources
SLURM_KEYS = ("slurm_partition", "slurm_account", "constraint", "qos", "slurm_extra")


def resources(config: Mapping[str, Any], scale: str) -> dict[str, Any]:
    """A training job's Snakemake resources for a scale, in the SLURM executor plugin's terms.

    threads: CPUs of the job (cpus_per_gpu x gpus on GPU jobs); gpu/gpu_model/cpus_per_gpu
    only take effect on GPU jobs (gpu_model "" and cpus_per_gpu 0 are "unset" to the plugin).
    SLURM settings (SLURM_KEYS) are present only where the scale sets them.
    """
    return job_resources(config.get("resources", {}).get(scale) or {})


def job_resources(spec: Mapping[str, Any]) -> dict[str, Any]:
    """`resources` of one job spec (config.resources.<scale> or config.eval_resources.<scale>)."""
    r = {**RESOURCE_DEFAULTS, **spec}
    gpu_job = r["gpus"] > 0
    return {
        "gpu": r["gpus"],
        "gpu_model": (r["gpu_model"] or "") if gpu_job else "",
        "cpus_per_gpu": r["cpus_per_gpu"] if gpu_job else 0,
        "threads": r["cpus_per_gpu"] * r["gpus"] if gpu_job else r["cpus"],
        "mem_mb": r["mem_mb"],
        "runtime": r["runtime"],
    } | {key: r[key] for key in SLURM_KEYS if r.get(key) is not None}


def train_slurm_keys(config: Mapping[str, Any], section: str = "resources") -> list[str]:
    """The SLURM settings some scale's training jobs set (the train rule declares these)."""
    scales = (config.get(section) or {}).values()
    return [key for key in SLURM_KEYS if any((r or {}).get(key) is not None for r in scales)]


def eval_slurm_keys(config: Mapping[str, Any]) -> list[str]:
    """The SLURM settings some scale's evaluation jobs set (the evaluation rules declare these)."""
    return train_slurm_keys(config, "eval_resources")


def default_resource(args: Sequence[str] | None, name: str) -> Any:
    """The value of `name` in Snakemake's default-resources (`name=expr` strings, as the profile
    or --default-resources give them), or None. A rule that declares a resource hides the
    default for every job of the rule, so a scale without its own setting falls back to this."""
    for arg in args or ():
        key, sep, expr = arg.partition("=")
        if sep and key.strip() == name:
            try:
                return ast.literal_eval(expr.strip())
            except (ValueError, SyntaxError):  # a bare word: Snakemake takes it as a string
                return expr.strip()
    return None


def rule_resources(config: Mapping[str, Any], rule: str) -> dict[str, Any]:
    """A non-training rule's resources (config.rule_resources.<rule>, threads apart)."""
    job = dict((config.get("rule_resources") or {}).get(rule) or {})
    job.pop("threads", None)
    return job


def rule_threads(config: Mapping[str, Any], rule: str, default: int = 1) -> int:
    return int(((config.get("rule_resources") or {}).get(rule) or {}).get("threads", default))


def _kv(key: str, value: Any) -> str:
    import json

    return f"{key}={json.dumps(value) if not isinstance(value, str) else value}"


def train_overrides(config: Mapping[str, Any], cell: Cell) -> dict[str, Any]:
    """config.train[<scale>], then config.train[<cell key>] (one cell's own overrides)."""
    train = config.get("train") or {}
    return {**(train.get(cell.scale) or {}), **(train.get(cell.key) or {})}


def launcher_args(config: Mapping[str, Any], scale: str) -> str:
    """How `python` starts training: torchrun on one node when the job has several GPUs."""
    gpus = resources(config, scale)["gpu"]
    if gpus > 1:
        return shlex.join(
            ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(gpus)]
        )
    return ""


def cell_args(cell: Cell, config: Mapping[str, Any], tokens: str, run_dir: str) -> str:
    """`leviathan train` arguments that define the cell's run (its identity): a change here
    reruns the cell. Overrides come from config.train[<scale>] and config.train[<cell>]."""
    shards = layout.shards(tokens)
    args = [
        "--scale",
        cell.scale,
        "--vocab",
        cell.vocab,
        "--variant",
        cell.variant,
        "--seed",
        str(cell.seed),
        "--train",
        shards["train"],
        "--val",
        shards["val"],
        "--run-dir",
        run_dir,
    ]
    for key, value in sorted(train_overrides(config, cell).items()):
        args += ["--set", _kv(key, value)]
    return shlex.join(args)


def runtime_args(config: Mapping[str, Any]) -> str:
    """`--runtime` arguments: the workflow's runtime (leviathan.train.config.workflow_runtime)
    where it differs from RuntimeConfig's defaults; how training runs, not what it computes.
    Kept out of the rule's params, so changing them (logging, threads, ...) reruns nothing."""
    from dataclasses import asdict

    from leviathan.train.config import RuntimeConfig, workflow_runtime

    defaults, resolved = asdict(RuntimeConfig()), asdict(workflow_runtime(config.get("runtime")))
    args: list[str] = []
    for key, value in sorted(resolved.items()):
        if value != defaults[key]:
            args += ["--runtime", _kv(key, value)]
    return shlex.join(args)


def train_command(
    cell: Cell, config: Mapping[str, Any], tokens: str, run_dir: str, python: str = sys.executable
) -> str:
    """The whole command of a cell's training job (the train rule's script execs these pieces)."""
    parts = [
        shlex.quote(python),
        launcher_args(config, cell.scale),
        "-m leviathan.cli train",
        cell_args(cell, config, tokens, run_dir),
        runtime_args(config),
    ]
    return " ".join(p for p in parts if p)


# ---------------------------------------------------------------- evaluation

EVAL_KINDS = ("val", "wikitext", "lm_eval")


def eval_sections(config: Mapping[str, Any]) -> dict[str, Any]:
    """config.evaluate: which evaluations run (a null section is off) and their settings."""
    return dict(config.get("evaluate") or {})


def eval_config(config: Mapping[str, Any]) -> Any:
    """The `leviathan.eval` config of the workflow (raises on a bad key, before any job)."""
    from leviathan.eval.config import EvalConfig

    sections = eval_sections(config)
    return EvalConfig.from_dict({k: sections.get(k) or {} for k in EVAL_KINDS})


def enabled_evals(config: Mapping[str, Any]) -> list[str]:
    sections = eval_sections(config)
    return [k for k in EVAL_KINDS if k == "val" or sections.get(k) is not None]


def eval_resources(config: Mapping[str, Any], scale: str) -> dict[str, Any]:
    """An evaluation job's resources for a scale (config.eval_resources.<scale>), in the terms
    of `resources`. Evaluation runs where training ran: a scale that trains on GPUs must say
    what its evaluation jobs get; a CPU-trained scale without an entry evaluates with its
    training job's resources."""
    spec = (config.get("eval_resources") or {}).get(scale)
    if spec is None:
        train = resources(config, scale)
        if train["gpu"]:
            raise ValueError(
                f"config.eval_resources has no entry for scale {scale!r}, which trains on "
                f"{train['gpu']} GPU(s): add eval_resources: {{{scale}: {{gpus: 1, gpu_model: "
                f"{train['gpu_model'] or 'h100'}, cpus_per_gpu: 8, mem_mb: 64000, runtime: 240}}}}"
            )
        return train
    return job_resources(spec)


def eval_rule_resources(
    config: Mapping[str, Any], default_args: Sequence[str] | None
) -> dict[str, Any]:
    """The evaluation rules' `resources:`, each a function of the job's wildcards (its scale).
    A SLURM setting that some scale's eval_resources sets falls back, for the other scales, to
    the profile's default-resources value (`default_args`), as training's do."""

    def pick(key: str, fallback: Any = None, required: bool = True) -> Any:
        def value(wildcards: Any) -> Any:
            job = eval_resources(config, wildcards.scale)
            return job[key] if required else job.get(key, fallback)

        return value

    keys = ("gpu", "gpu_model", "cpus_per_gpu", "mem_mb", "runtime")
    out = {key: pick(key) for key in keys}
    for key in eval_slurm_keys(config):
        out[key] = pick(key, default_resource(default_args, key), required=False)
    return out


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
    """Run one evaluation of a trained cell and write its JSON (atomically).

    Work in progress survives a kill: `val` keeps its running sums in `layout.eval_partial`
    and lm-eval (tasks and WikiText) its request cache in `layout.lm_eval_cache`, both beside
    the output; a rerun continues from them and removes them once the output is written."""
    from leviathan.eval.checkpoint import open_checkpoint, resolve_checkpoint
    from leviathan.eval.results import write_result
    from leviathan.io import read_json
    from leviathan.provenance import utc_now

    started = utc_now()
    cfg = eval_config(config)
    if kind not in EVAL_KINDS:
        raise ValueError(f"unknown evaluation {kind!r}: use one of {', '.join(EVAL_KINDS)}")
    state = read_json(resolve_checkpoint(run_dir) / layout.STATE)  # no weights read yet
    scale = (state.get("train_config") or {}).get("scale")
    device = eval_device(config, str(scale)) if scale else eval_sections(config).get("device")
    ckpt, model = open_checkpoint(run_dir, device=device or "auto")
    partial = layout.eval_partial(out)
    section = getattr(cfg, kind)
    cache = str(layout.lm_eval_cache(out, settings_key(ckpt.sha256, model.precision, section)))
    if kind == "val":
        from leviathan.eval.validation import evaluate_val

        result = evaluate_val(
            ckpt,
            model,
            inputs["val"],
            counts=inputs.get("counts"),
            word_counts=inputs.get("word_counts"),
            cfg=cfg.val,
            started=started,
            partial=partial,
        )
    elif kind == "wikitext":
        from leviathan.eval.wikitext import evaluate_wikitext

        result = evaluate_wikitext(ckpt, model, cfg.wikitext, started=started, cache=cache)
    else:
        from leviathan.eval.lm_eval_tasks import run_lm_eval

        result = run_lm_eval(
            ckpt,
            model,
            cfg.lm_eval,
            samples_out=layout.lm_eval_samples(out),
            harness_dir=layout.lm_eval_harness_dir(out),
            started=started,
            cache=cache,
        )
    write_result(out, result)
    partial.unlink(missing_ok=True)
    for db in Path(cache).parent.glob(Path(cache).name + "*"):
        db.unlink()


def word_counts(
    train: str | Path, val: str | Path, out: str | Path, config: Mapping[str, Any]
) -> None:
    from leviathan.eval.results import write_result
    from leviathan.eval.validation import build_word_counts

    options = eval_sections(config).get("word_counts") or {}
    write_result(
        out, build_word_counts(train, val, max_train_tokens=options.get("max_train_tokens"))
    )


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
