"""The command of a cell's training job: the launcher (the interpreter, torchrun, or srun with
one torchrun per node), `leviathan train` with the cell's arguments and the workflow's runtime,
and the launcher's environment. The train rule's script execs `train_argv`; `leviathan config
show --cell` prints `train_command`, the same words."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from typing import Any

from leviathan import layout
from leviathan.cells import Cell
from leviathan.study.cluster import preempt_grace_s, scale_resources
from leviathan.study.resolve import cell_train_config, train_overrides
from leviathan.train.config import NOT_IDENTITY
from leviathan.values import format_assignment


def launcher_args(config: Mapping[str, Any], scale: str) -> str:
    """How a training job starts Python, up to `-m leviathan.cli train`: `{python}` alone;
    torchrun on one node when the job has several GPUs; on several nodes, `srun` starting one
    torchrun per node (one task per node, the node's GPUs and CPUs, `--overlap` with the job
    step the rule runs in) that meet at a c10d rendezvous on the first node. `{python}`,
    `{rdzv_host}` and `{rdzv_id}` are filled in by the job (`launch_argv`): the interpreter, the
    host the rule runs on (the allocation's first node) and the SLURM job id. On one node the
    interpreter is left implicit: these words are the train rule's `launch` param, part of a
    cell's identity, so a single-node cell's stay the same wherever Python is installed."""
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
    if gpus > 1:
        return shlex.join(
            ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(gpus)]
        )
    return ""


# torchrun, as a cell's launch words name it; what runs it: the same launcher with a preempted
# run's exit status, 128 + signal, instead of torchrun's 1 (leviathan.torchrun)
TORCHRUN, TORCHRUN_AS_RUN = "torch.distributed.run", "leviathan.torchrun"


def launch_argv(launch: str, *, python: str, rdzv_host: str, rdzv_id: str) -> list[str]:
    """`launcher_args`' words with what only the running job knows filled in (the interpreter
    first where the launcher does not place it), torchrun run as `leviathan.torchrun` (the
    words, a cell's identity, stay torchrun's)."""
    values = {"python": python, "rdzv_host": rdzv_host, "rdzv_id": rdzv_id}
    words = shlex.split(launch)
    if "{python}" not in words:
        words.insert(0, "{python}")
    words = [
        TORCHRUN_AS_RUN if w == TORCHRUN and i and words[i - 1] == "-m" else w
        for i, w in enumerate(words)
    ]
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
    reruns the cell. `--variant` is the built-in variant its model is built from; overrides
    come from `train_overrides` (a named variant's model, a tag's recipe and the cell's name
    among them), less the memory knobs (`memory_args`)."""
    from leviathan.study.sweep import cell_variant

    shards = layout.shards(tokens)
    args = [
        "--scale",
        cell.scale,
        "--vocab",
        cell.vocab,
        "--variant",
        cell_variant(config, cell.variant).base,
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
        if key not in NOT_IDENTITY:
            args += ["--set", format_assignment(key, value)]
    return shlex.join(args)


def memory_args(config: Mapping[str, Any], cell: Cell) -> str:
    """`--set` arguments of the overrides that are no part of the cell's identity
    (`leviathan.train.config.NOT_IDENTITY`: micro_batch). Kept out of the rule's params, so
    lowering train.<scale>.micro_batch after an out-of-memory error reruns nothing: the next
    job resumes the run from its checkpoint. The scale's `resources.<scale>.parallel` (fsdp:
    sharded) is one too, as `--runtime parallel=...`: the same run, sharded or not."""
    args: list[str] = []
    for key, value in sorted(train_overrides(config, cell).items()):
        if key in NOT_IDENTITY:
            args += ["--set", format_assignment(key, value)]
    parallel = scale_resources(config, cell.scale)["parallel"]
    if parallel != "ddp":
        args += ["--runtime", format_assignment("parallel", parallel)]
    return shlex.join(args)


def known_out_of_memory(config: Mapping[str, Any], cell: Cell, run_dir: str) -> str | None:
    """The refusal a training job gives at once, before any work, when the run's
    out-of-memory record (`layout.out_of_memory_file`) says its micro_batch (or a smaller one)
    already ran out of memory: a retry of the same job (the profile's `retries`) fails in
    seconds with the same line instead of repeating the failure; None when it may run."""
    from leviathan.io import read_json

    record_file = layout.out_of_memory_file(run_dir)
    if not record_file.is_file():
        return None
    record = read_json(record_file)
    if cell_train_config(config, cell).micro_batch < int(record["micro_batch"]):
        return None
    return (
        f"{record['message']} (recorded by an earlier attempt in {record_file}; delete it "
        "to try the same micro_batch again, e.g. on a GPU with more memory)"
    )


def runtime_args(config: Mapping[str, Any]) -> str:
    """`--runtime` arguments: the workflow's runtime (leviathan.train.config.workflow_runtime)
    where it differs from RuntimeConfig's defaults, a block's keys dotted (`checkpoint.every=20`);
    how training runs, not what it computes. Kept out of the rule's params, so changing them
    (logging, threads, ...) reruns nothing."""
    from dataclasses import asdict

    from leviathan.train.config import RuntimeConfig, workflow_runtime
    from leviathan.values import flatten

    defaults = flatten(asdict(RuntimeConfig()))
    resolved = flatten(asdict(workflow_runtime(config.get("runtime"))))
    args: list[str] = []
    for key, value in sorted(resolved.items()):
        if value != defaults[key]:
            args += ["--runtime", format_assignment(key, value)]
    return shlex.join(args)


def train_argv(
    launch: str,
    cell: str,
    config: Mapping[str, Any],
    memory: str,
    *,
    python: str,
    rdzv_host: str,
    rdzv_id: str,
) -> list[str]:
    """The words of a cell's training job: the launcher (`launch`: `launcher_args`, filled in by
    `launch_argv`), `-m leviathan.cli train`, the cell's arguments (`cell`: `cell_args`), its
    memory knobs (`memory`: `memory_args`) and the workflow's runtime (`runtime_args`). The
    train rule's script execs these."""
    return [
        *launch_argv(launch, python=python, rdzv_host=rdzv_host, rdzv_id=rdzv_id),
        "-m",
        "leviathan.cli",
        "train",
        *shlex.split(cell),
        *shlex.split(memory),
        *shlex.split(runtime_args(config)),
    ]


def train_command(
    cell: Cell, config: Mapping[str, Any], tokens: str, run_dir: str, python: str = sys.executable
) -> str:
    """The whole command of a cell's training job, as the train rule's script runs it
    (`train_argv`); what only the running job knows is shown as <first node> and <job id>."""
    argv = train_argv(
        launcher_args(config, cell.scale),
        cell_args(cell, config, tokens, run_dir),
        config,
        memory_args(config, cell),
        python=python,
        rdzv_host="<first node>",
        rdzv_id="<job id>",
    )
    return shlex.join(argv)
