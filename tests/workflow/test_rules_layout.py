"""Every path the workflow's rules declare (inputs, outputs, logs, benchmarks of a dry run on the
default config) is one leviathan.layout gives, and every path the layout gives that config's
artifacts is in the DAG: the rules hold no path of their own."""

from __future__ import annotations

import re
from pathlib import Path

from workflow_helpers import ROOT, snakemake, workflow_copy

from leviathan import layout
from leviathan.report.build import PAPER_CHECK, report_inputs
from leviathan.report.figures import FIGURE_NAMES
from leviathan.report.plots import plot_paths
from leviathan.report.registry import table_names, table_paths
from leviathan.report.resources import RESOURCES_TABLE
from leviathan.workflow.actions import enabled_evals, sample_efficiency_groups
from leviathan.workflow.config import resolve
from leviathan.workflow.grid import cells


def _layout_paths(config: dict) -> set[str]:
    """Every path the layout gives the default config's artifacts, logs and benchmarks."""
    corpus, all_cells, evals = (
        config["corpus"]["name"],
        cells(config["studies"]),
        enabled_evals(config),
    )
    word_counts = config.get("evaluate", {}).get("word_counts") is not None
    paths = {str(layout.corpus_file(layout.corpus_dir(corpus), s)) for s in layout.SPLITS} | {
        layout.log_file("fetch_corpus", corpus),
        layout.benchmark_path(layout.corpus_dir(corpus), "fetch_corpus"),
        layout.log_file("report", "report"),
        layout.benchmark_path(layout.REPORT_DIR, "report"),
    }
    for vocab in {c.vocab for c in all_cells}:
        tokens = layout.tokens_dir(corpus, vocab)
        paths |= set(layout.token_files(tokens, word_counts).values())
        for step in ("tokenize", "word_counts"):
            paths |= {layout.log_file(step, corpus, vocab), layout.benchmark_path(tokens, step)}
    for c in all_cells:
        key, out = layout.cell_key(c), layout.eval_output(c, "lm_eval")
        paths |= {layout.final_marker(c), layout.export_dir(c), layout.log_file("train", key)}
        paths |= {layout.log_file("export", key), layout.benchmark_path(layout.run_dir(c), "train")}
        paths |= {str(layout.lm_eval_samples(out)), str(layout.lm_eval_harness_dir(out))}
        for kind in evals:
            paths |= {layout.eval_output(c, kind), layout.log_file("eval", key, kind)}
            paths.add(layout.benchmark_path(layout.eval_dir(c), f"eval_{kind}"))
    for scale, vocab, seed in sample_efficiency_groups(all_cells):
        name = layout.sample_efficiency_name(seed)
        paths |= {
            layout.sample_efficiency_path(scale, vocab, seed),
            layout.log_file("eval", scale, vocab, name),
            layout.benchmark_path(
                layout.sample_efficiency_dir(scale, vocab), "sample_efficiency", f"seed{seed}"
            ),
        }
    files = [
        p
        for n in table_names(report_inputs(config))
        for p in table_paths(layout.TABLES_DIR, n).values()
    ]
    for name in (PAPER_CHECK, RESOURCES_TABLE):
        files += layout.table_files(layout.TABLES_DIR, name, layout.PLAIN_TABLE_FORMATS).values()
    for name in FIGURE_NAMES:
        files += layout.figure_files(layout.FIGURES_DIR, name).values()
    files += [
        layout.dvc_metrics_file(layout.DVC_METRICS_DIR, layout.cell_key(c)) for c in all_cells
    ]
    return paths | {str(p) for p in [*files, *plot_paths().values()]}


def test_every_path_the_rules_declare_comes_from_the_layout(tmp_path: Path) -> None:
    work = workflow_copy(tmp_path)
    out = snakemake(work, "-n", "--forceall", "all", "all_data", "all_export")
    assert out.returncode == 0, out.stderr
    declared = {
        path
        for m in re.finditer(r"^\s+(?:input|output|log|benchmark): (.*)$", out.stdout, re.M)
        for path in m.group(1).split(", ")
    }
    expected = _layout_paths(resolve(root=ROOT))
    paper = {p for p in declared if p.endswith(layout.PAPER_REPORTED)}  # absolute: the checkout's
    assert len(paper) == 1
    assert declared - paper <= expected, sorted(declared - paper - expected)
    # and nothing the layout names for this config is missing from the DAG
    assert expected <= declared, sorted(expected - declared)
