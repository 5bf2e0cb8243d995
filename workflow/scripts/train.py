"""Rule train: become the cell's training command (exec, same process: SLURM's signals reach it
directly). On several nodes that is `srun` starting one torchrun per node; their c10d
rendezvous is on this host, the allocation's first node, where the rule runs.

params hold the cell's identity (its arguments, the launcher); how training runs
(config.runtime) is read here, so changing it reruns nothing."""

import os
import shlex
import socket
import sys

from leviathan.workflow.steps import launch_argv, launch_env, runtime_args

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
launch = launch_argv(
    sm.params.launch,
    python=sys.executable,
    rdzv_host=socket.gethostname(),
    rdzv_id=os.environ.get("SLURM_JOB_ID", "leviathan"),
)
argv = [
    *launch,
    "-m",
    "leviathan.cli",
    "train",
    *shlex.split(sm.params.cell),
    *shlex.split(runtime_args(sm.config)),
]
os.environ.update(launch_env(sm.config, sm.wildcards.scale))
log = os.open(sm.log[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
sys.stdout.flush()
sys.stderr.flush()
os.dup2(log, 1)
os.dup2(log, 2)
os.execvp(argv[0], argv)
