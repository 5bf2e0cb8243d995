"""What each workflow rule does, as plain functions of the validated config (unit-tested;
the rule scripts only unpack `snakemake` and call these)."""

from __future__ import annotations

import ast
import functools
import math
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
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
    "gpus": 0,  # per node
    "gpu_model": None,
    "cpus_per_gpu": 8,
    "cpus": 2,
    "mem_mb": 4000,  # per node
    "runtime": 60,
    "nodes": 1,  # >1: one torchrun per node under srun, c10d rendezvous on the first node
    "rdzv_port": 29500,  # the rendezvous' TCP port on the first node (nodes > 1)
    # seconds between SLURM's early SIGTERM and the time limit (GPU jobs: --signal=TERM@<s>);
    # None: sized from the scale's checkpoint (preempt_grace_s)
    "signal_grace_s": None,
    "checkpoint_write_mb_s": 200,  # the run directory's sustained write rate (sizes the grace)
}
# SLURM settings a job may carry (snakemake-executor-plugin-slurm resource names); unset ones
# keep the profile's default-resources
SLURM_KEYS = ("slurm_partition", "slurm_account", "constraint", "qos", "slurm_extra")
# The grace covers a periodic save still being written, the preemption save and the end of the
# step in progress: two checkpoints at the write rate plus this margin.
GRACE_MARGIN_S = 60
LARGEST = ("o200k_base", "untied")  # the largest checkpoint of a scale outside any study


def scale_resources(config: Mapping[str, Any], scale: str) -> dict[str, Any]:
    """config.resources[<scale>] over RESOURCE_DEFAULTS (the config's own terms)."""
    return {**RESOURCE_DEFAULTS, **((config.get("resources") or {}).get(scale) or {})}


def _largest_checkpoint(config: Mapping[str, Any], scale: str) -> int:
    """Bytes of the largest checkpoint of a cell of `scale` (the configured studies' cells, or
    the scale's largest possible cell when no study has it)."""
    import json

    return _largest_checkpoint_cached(json.dumps(config, sort_keys=True, default=str), scale)


@functools.lru_cache(maxsize=64)
def _largest_checkpoint_cached(config_json: str, scale: str) -> int:
    import json

    from leviathan.workflow.grid import cells
    from leviathan.workflow.plan import cell_checkpoint_bytes

    config = json.loads(config_json)
    mine = [c for c in cells(config.get("studies") or {}) if c.scale == scale]
    return max(cell_checkpoint_bytes(config, c) for c in mine or [Cell(scale, *LARGEST, 0)])


def preempt_grace_s(config: Mapping[str, Any], scale: str) -> int:
    """Seconds a training job of `scale` needs between SLURM's early signal and its kill: two
    checkpoint writes (one periodic save in flight, then the preemption save) at the configured
    write rate, plus GRACE_MARGIN_S. A configured `signal_grace_s` below that is an error."""
    r = scale_resources(config, scale)
    mb_s = r["checkpoint_write_mb_s"]
    if mb_s is None or mb_s <= 0:
        raise ValueError(f"resources.{scale}.checkpoint_write_mb_s={mb_s!r}: must be > 0 (MB/s)")
    size = _largest_checkpoint(config, scale)
    needed = math.ceil(2 * size / (mb_s * 1e6)) + GRACE_MARGIN_S
    grace = r["signal_grace_s"]
    if grace is None:
        return needed
    if grace < needed:
        raise ValueError(
            f"resources.{scale}.signal_grace_s={grace} is shorter than the {needed} s needed to "
            f"write two {size / 1e9:.1f} GB checkpoints at {mb_s} MB/s plus {GRACE_MARGIN_S} s: "
            f"raise it, or leave it unset to size it from the checkpoint"
        )
    return int(grace)


def job_resources(spec: Mapping[str, Any]) -> dict[str, Any]:
    """One node's job resources from a spec in the config's terms (config.resources.<scale> or
    config.eval_resources.<scale>), in the SLURM executor plugin's terms: threads are CPUs of
    the job (cpus_per_gpu x gpus on GPU jobs); gpu/gpu_model/cpus_per_gpu only take effect on
    GPU jobs (gpu_model "" and cpus_per_gpu 0 are "unset" to the plugin); SLURM settings
    (SLURM_KEYS) are present only where the spec sets them."""
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


def resources(config: Mapping[str, Any], scale: str) -> dict[str, Any]:
    """A training job's Snakemake resources for a scale: `job_resources` of
    config.resources.<scale>, and slurm_extra on GPU or multi-node jobs: a GPU job asks for SIGTERM `preempt_grace_s` before its time limit
    (`--signal=TERM@<s>`, to the job's steps, where the trainer and Snakemake handle it); a job
    of several nodes asks for them in slurm_extra (`--nodes`, one task per node, the GPUs per
    node), with the plugin's own gpu unset, and its threads, memory and GPUs count per node.
    """
    r = scale_resources(config, scale)
    gpu_job, nodes = r["gpus"] > 0, r["nodes"]
    out = job_resources(r)
    extra: list[str] = []
    if nodes > 1:
        extra += [f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1"]
        if gpu_job:
            model = f"{r['gpu_model']}:" if r["gpu_model"] else ""
            extra.append(f"--gpus-per-node={model}{r['gpus']}")
        out |= {"gpu": 0, "gpu_model": "", "cpus_per_gpu": 0}
    if gpu_job or nodes > 1:
        extra.append(f"--signal=TERM@{preempt_grace_s(config, scale)}")
    if extra:
        out["slurm_extra"] = " ".join([*(r.get("slurm_extra") or "").split(), *extra])
    return out


def train_slurm_keys(config: Mapping[str, Any]) -> list[str]:
    """The SLURM settings some scale's training jobs set (the train rule declares these)."""
    return _slurm_keys(resources(config, scale) for scale in config.get("resources") or {})


def _slurm_keys(jobs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The SLURM settings that some of `jobs` (their resources) carry."""
    carried = {key for job in jobs for key in job}
    return [key for key in SLURM_KEYS if key in carried]


def train_slurm_value(config: Mapping[str, Any], scale: str, key: str, fallback: Any) -> Any:
    """A training job's SLURM setting `key`; where the scale does not set it, `fallback` (the
    profile's default-resources value, which the rule's own declaration would hide). Flags the
    workflow adds to slurm_extra (signal, nodes) come after the fallback's."""
    job = resources(config, scale)
    if key not in job:
        return fallback
    own = scale_resources(config, scale).get(key)
    if key == "slurm_extra" and own is None and fallback:
        return f"{fallback} {job[key]}"
    return job[key]


def eval_slurm_keys(config: Mapping[str, Any]) -> list[str]:
    """The SLURM settings some scale's evaluation jobs set (the evaluation rules declare these)."""
    scales = {*(config.get("resources") or {}), *(config.get("eval_resources") or {})}
    return _slurm_keys(eval_resources(config, scale) for scale in sorted(scales))


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
    """How a training job starts Python, up to `-m leviathan.cli train`: `{python}` alone;
    torchrun on one node when the job has several GPUs; on several nodes, `srun` starting one
    torchrun per node (one task per node, the node's GPUs and CPUs, `--overlap` with the job
    step the rule runs in) that meet at a c10d rendezvous on the first node. `{python}`,
    `{rdzv_host}` and `{rdzv_id}` are filled in by the job (`launch_argv`): the interpreter, the
    host the rule runs on (the allocation's first node) and the SLURM job id. On one node the
    words are those after the interpreter (unchanged from earlier versions: no cell reruns)."""
    r = scale_resources(config, scale)
    gpus, nodes = r["gpus"], r["nodes"]
    if nodes > 1:
        srun = ["srun", "--overlap", f"--nodes={nodes}", f"--ntasks={nodes}"]
        srun += ["--ntasks-per-node=1", "--kill-on-bad-exit=1", "--mem=0"]
        cpus = r["cpus_per_gpu"] * gpus if gpus else r["cpus"]
        srun += [f"--cpus-per-task={cpus}", *([f"--gpus-per-node={gpus}"] if gpus else [])]
        torchrun = ["{python}", "-m", "torch.distributed.run", f"--nnodes={nodes}"]
        torchrun += [f"--nproc-per-node={max(1, gpus)}", "--rdzv-backend=c10d"]
        torchrun += [f"--rdzv-endpoint={{rdzv_host}}:{r['rdzv_port']}", "--rdzv-id={rdzv_id}"]
        return shlex.join(srun + torchrun)
    if gpus > 1:  # (one node: the interpreter comes first, so `{python}` is left implicit)
        return shlex.join(
            ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(gpus)]
        )
    return ""


def launch_argv(launch: str, *, python: str, rdzv_host: str, rdzv_id: str) -> list[str]:
    """`launcher_args`' words with what only the running job knows filled in (the interpreter
    first where the launcher does not place it)."""
    values = {"python": python, "rdzv_host": rdzv_host, "rdzv_id": rdzv_id}
    words = shlex.split(launch)
    if "{python}" not in words:
        words.insert(0, "{python}")
    return [word.format(**values) for word in words]


def launch_env(config: Mapping[str, Any], scale: str) -> dict[str, str]:
    """Environment of a training job's launcher: torchrun, which forwards SLURM's SIGTERM to
    its workers, waits the preemption grace for them before killing them (its default: 30 s)."""
    r = scale_resources(config, scale)
    if r["nodes"] > 1 or r["gpus"] > 1:
        return {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(preempt_grace_s(config, scale))}
    return {}


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
    """The whole command of a cell's training job (the train rule's script execs these pieces);
    what only the running job knows is shown as <first node> and <job id>."""
    launch = launch_argv(
        launcher_args(config, cell.scale),
        python=python,
        rdzv_host="<first node>",
        rdzv_id="<job id>",
    )
    parts = [
        shlex.join(launch),
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
    if int(spec.get("nodes") or 1) > 1:
        raise ValueError(
            f"config.eval_resources.{scale}.nodes={spec['nodes']}: an evaluation job runs on one "
            "node (one GPU is enough for the study's models): set nodes: 1 or leave it out"
        )
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
