"""Rule train: become `leviathan train` (exec, same process: SLURM's signals reach it directly).

params hold the cell's identity (its arguments, the torchrun launcher); how training runs
(config.runtime) is read here, so changing it reruns nothing."""

import os
import shlex
import sys

from leviathan.workflow.steps import runtime_args

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
argv = [
    sys.executable,
    *shlex.split(sm.params.launch),
    "-m",
    "leviathan.cli",
    "train",
    *shlex.split(sm.params.cell),
    *shlex.split(runtime_args(sm.config)),
]
log = os.open(sm.log[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
sys.stdout.flush()
sys.stderr.flush()
os.dup2(log, 1)
os.dup2(log, 2)
os.execv(argv[0], argv)
