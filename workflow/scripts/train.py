"""Rule train: become the cell's training command (exec, same process: SLURM's signals reach it
directly), its output in the rule's log. On several nodes that is `srun` starting one torchrun
per node; their c10d rendezvous is on this host, the allocation's first node, where the rule
runs.

params hold the cell's identity (its arguments, the launcher); how training runs
(config.runtime) is read here, so changing it reruns nothing."""

import os
import socket
import sys

from leviathan.workflow.launch import launch_env, train_argv
from leviathan.workflow.logs import rule_log

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
rule_log(sm)
argv = train_argv(
    sm.params.launch,
    sm.params.cell,
    sm.config,
    python=sys.executable,
    rdzv_host=socket.gethostname(),
    rdzv_id=os.environ.get("SLURM_JOB_ID", "leviathan"),
)
os.environ.update(launch_env(sm.config, sm.wildcards.scale))
os.execvp(argv[0], argv)
