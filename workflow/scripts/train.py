"""Rule train: become the cell's training command (exec, same process: SLURM's signals reach it
directly), its output in the rule's log. On several nodes that is `srun` starting one torchrun
per node; their c10d rendezvous is on this host, the allocation's first node, where the rule
runs.

params hold the cell's identity (its arguments, the launcher); how training runs
(config.runtime) and its memory knobs (train.<scale>.micro_batch) are read here, so changing
them reruns nothing. A micro_batch that already ran out of memory in this run is refused at
once (exit status 4), so the profile's retries do not repeat the failure."""

import os
import socket
import sys

from leviathan import layout
from leviathan.cells import Cell
from leviathan.study.launch import known_out_of_memory, launch_env, memory_args, train_argv
from leviathan.study.logs import rule_log
from leviathan.train.errors import OUT_OF_MEMORY_EXIT

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
rule_log(sm)
wc = sm.wildcards
cell = Cell(wc.scale, wc.vocab, wc.variant, int(wc.seed), wc.results)
refusal = known_out_of_memory(sm.config, cell, layout.run_of(sm.output.final))
if refusal:
    print(f"leviathan train: error: {refusal}", file=sys.stderr)
    sys.exit(OUT_OF_MEMORY_EXIT)
argv = train_argv(
    sm.params.launch,
    sm.params.cell,
    sm.config,
    memory_args(sm.config, cell),
    python=sys.executable,
    rdzv_host=socket.gethostname(),
    rdzv_id=os.environ.get("SLURM_JOB_ID", "leviathan"),
)
os.environ.update(launch_env(sm.config, wc.scale))
os.execvp(argv[0], argv)
