"""What each workflow job asks of the cluster: its Snakemake resources and SLURM settings,
from config.resources (training), config.eval_resources (evaluation) and config.rule_resources
(every other rule), with the preemption grace a training job needs to write its checkpoint."""

from __future__ import annotations

import ast
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from leviathan.study.resolve import largest_checkpoint_bytes
from leviathan.values import split_assignment

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
    "parallel": "ddp",  # ddp | fsdp (sharded: leviathan.train.fsdp)
}
# SLURM settings a job may carry (snakemake-executor-plugin-slurm resource names); unset ones
# keep the profile's default-resources
SLURM_KEYS = ("slurm_partition", "slurm_account", "constraint", "qos", "slurm_extra")
# The grace covers a periodic save still being written, the preemption save and the end of the
# step in progress: two checkpoints at the write rate plus this margin.
GRACE_MARGIN_S = 60


def scale_resources(config: Mapping[str, Any], scale: str) -> dict[str, Any]:
    """config.resources[<scale>] over RESOURCE_DEFAULTS (the config's own terms)."""
    return {**RESOURCE_DEFAULTS, **((config.get("resources") or {}).get(scale) or {})}


def preempt_grace_s(config: Mapping[str, Any], scale: str) -> int:
    """Seconds a training job of `scale` needs between SLURM's early signal and its kill: two
    checkpoint writes (one periodic save in flight, then the preemption save) at the configured
    write rate, plus GRACE_MARGIN_S. A configured `signal_grace_s` below that is an error."""
    r = scale_resources(config, scale)
    mb_s = r["checkpoint_write_mb_s"]
    if mb_s is None or mb_s <= 0:
        raise ValueError(f"resources.{scale}.checkpoint_write_mb_s={mb_s!r}: must be > 0 (MB/s)")
    size = largest_checkpoint_bytes(config, scale)
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
        try:
            key, expr = split_assignment(arg, "default-resources", "NAME=EXPR")
        except ValueError:  # not an assignment: Snakemake's own parser reports it
            continue
        if key == name:
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
