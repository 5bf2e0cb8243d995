"""What each rule of the Snakemake workflow does, by rule name.

Every rule runs the same script (workflow/scripts/rule.py): it hands its `snakemake` object
to `run`, which sends the job's output to the rule's log and calls the rule's action here.
So the script never changes. Snakemake reruns a rule's finished jobs when its script
changes; a change to a rule's logic here reruns nothing by itself. Each action imports what it
needs when it runs: a job loads its own rule's modules only (a fetch job does not load torch)."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from typing import Any

from leviathan import layout
from leviathan.study.logs import rule_log

# the evaluation rules (eval_val, eval_wikitext, eval_lm_eval, eval_val_along) share one action
EVAL_PREFIX = "eval_"


def fetch_corpus(sm: Any) -> None:
    """Rule fetch_corpus: write the configured corpus."""
    from leviathan.data.fetch_dispatch import fetch_corpus as fetch

    fetch(sm.params.corpus, sm.params.out_dir)


def fetch_eval_data(sm: Any) -> None:
    """Rule fetch_eval_data: one evaluation dataset into data/eval/."""
    from leviathan.data.eval_data import Need
    from leviathan.data.eval_fetch import fetch_need

    fetch_need(Need(**sm.params.need))


def tokenize(sm: Any) -> None:
    """Rule tokenize: token shards and counts for one vocabulary."""
    from leviathan.study.actions import tokenize as encode

    encode(sm.params.corpus_dir, sm.wildcards.vocab, sm.params.out_dir, sm.params.options)


def train(sm: Any) -> None:
    """Rule train: become the cell's training command (exec, same process: SLURM's signals
    reach it directly), its output in the rule's log. On several nodes that is `srun` starting
    one torchrun per node; their c10d rendezvous is on this host, the allocation's first node.

    params hold the cell's identity (its arguments, the launcher); how training runs
    (config.runtime) and its memory knobs (train.<scale>.micro_batch) are read here, so
    changing them reruns nothing. A micro_batch that already ran out of memory in this run is
    refused at once (exit status 4), so the profile's retries do not repeat the failure."""
    from leviathan.cells import Cell
    from leviathan.study.launch import known_out_of_memory, launch_env, memory_args, train_argv
    from leviathan.train.errors import OUT_OF_MEMORY_EXIT

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


def word_counts(sm: Any) -> None:
    """Rule word_counts: the word counts of the train and val splits."""
    from leviathan.study.actions import word_counts as count

    count(sm.input.train, sm.input.val, sm.output[0], sm.config)


def evaluate(sm: Any) -> None:
    """Rules eval_val, eval_wikitext, eval_lm_eval and eval_val_along: one evaluation
    (params.kind) of one checkpoint (params.run_dir)."""
    from leviathan.study.actions import evaluate as run_evaluation

    extra = {k: sm.input[k] for k in ("val", "counts", "word_counts") if k in sm.input.keys()}
    run_evaluation(sm.params.kind, sm.params.run_dir, sm.output[0], sm.config, **extra)


def sample_efficiency(sm: Any) -> None:
    """Rule sample_efficiency: the first run is the tied baseline
    (actions.sample_efficiency_groups)."""
    from leviathan.eval.results import write_result
    from leviathan.eval.sample_efficiency import sample_efficiency as compare

    runs = sm.params.runs
    write_result(sm.output[0], compare(runs[0], runs[1:]))


def along_training(sm: Any) -> None:
    """Rule along_training: a group's evaluations along training; the first cell's are the tied
    baseline's."""
    from leviathan.eval.along import along_training as compare
    from leviathan.eval.results import write_result

    write_result(sm.output[0], compare(sm.params.runs))


def export(sm: Any) -> None:
    """Rule export: one trained cell as a transformers checkpoint (`leviathan export`)."""
    from leviathan.export.write import export_run

    # force: Snakemake removed the old output already; only a stale partial one could be left
    export_run(sm.params.run_dir, sm.output[0], dtype=sm.params.dtype, force=True)


def report(sm: Any) -> None:
    """Rule report: tables, figures, plot data, resources and the status page."""
    from leviathan.cells import config_cells
    from leviathan.report.build import write_report
    from leviathan.report.plots import write_plot_data
    from leviathan.report.resources import write_resources

    p = sm.params
    write_report(
        sm.config,
        p.tables_dir,
        p.figures_dir,
        p.sample_efficiency,
        p.metrics_dir,
        p.along,
        sm.output.status,
    )
    write_plot_data(config_cells(sm.config), p.plots_dir)
    write_resources(sm.input.benchmarks, p.tables_dir)


ACTIONS: dict[str, Callable[[Any], None]] = {
    "fetch_corpus": fetch_corpus,
    "fetch_eval_data": fetch_eval_data,
    "tokenize": tokenize,
    "train": train,
    "word_counts": word_counts,
    "sample_efficiency": sample_efficiency,
    "along_training": along_training,
    "export": export,
    "report": report,
}


def action(rule: str) -> Callable[[Any], None]:
    """The action of the rule named `rule`."""
    if rule.startswith(EVAL_PREFIX):
        return evaluate
    try:
        return ACTIONS[rule]
    except KeyError:
        raise SystemExit(
            f"leviathan: error: rule {rule!r} has no action in leviathan.study.rules; "
            f"add one there (known: {', '.join(sorted(ACTIONS))}, {EVAL_PREFIX}*)"
        ) from None


def run(sm: Any) -> None:
    """Run the job of `sm` (a rule script's `snakemake` object): its output to the rule's log,
    then the rule's action."""
    act = action(sm.rule)
    rule_log(sm)
    act(sm)
