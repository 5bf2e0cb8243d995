"""Every path the workflow's rules declare (inputs, outputs, logs, benchmarks of a dry run on the
default config) is one leviathan.layout gives, and every path the layout gives that config's
artifacts is in the DAG: the rules hold no path of their own."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from workflow_helpers import ROOT, snakemake, workflow_copy

from leviathan import layout
from leviathan.cells import config_cells
from leviathan.eval.config import enabled_evals
from leviathan.report.build import PAPER_CHECK, report_inputs
from leviathan.report.plots import plot_paths
from leviathan.report.registry import table_names, table_paths
from leviathan.report.resources import RESOURCES_TABLE
from leviathan.study import actions
from leviathan.study.actions import sample_efficiency_groups
from leviathan.study.config import resolve


def _layout_paths(config: dict) -> set[str]:
    """Every path the layout gives the default config's artifacts, logs and benchmarks."""
    corpus, all_cells, evals = (
        config["corpus"]["name"],
        config_cells(config),
        enabled_evals(config),
    )
    results = layout.config_results_key(config)
    word_counts = config.get("evaluate", {}).get("word_counts") is not None
    paths = {str(layout.corpus_file(layout.corpus_dir(corpus), s)) for s in layout.SPLITS} | {
        layout.log_file("fetch_corpus", corpus),
        layout.benchmark_path(layout.corpus_dir(corpus), "fetch_corpus"),
        layout.log_file("report", results),
        layout.benchmark_path(layout.report_dir(results), "report"),
        layout.status_file(results),
    }
    for vocab in {c.vocab for c in all_cells}:
        tokens = layout.tokens_dir(corpus, vocab)
        paths |= set(layout.token_files(tokens, word_counts).values())
        for step in ("tokenize", "word_counts"):
            paths |= {layout.log_file(step, corpus, vocab), layout.benchmark_path(tokens, step)}
    for c in all_cells:
        out = layout.eval_output(c, "lm_eval")
        paths |= {layout.final_marker(c), layout.export_dir(c), layout.cell_log("train", c)}
        paths |= {layout.cell_log("export", c), layout.benchmark_path(layout.run_dir(c), "train")}
        paths |= {str(layout.lm_eval_samples(out)), str(layout.lm_eval_harness_dir(out))}
        for evaluation in evals:
            paths |= {layout.eval_output(c, evaluation), layout.cell_log("eval", c, evaluation)}
            paths.add(layout.benchmark_path(layout.eval_dir(c), f"eval_{evaluation}"))
    for scale, vocab, seed in sample_efficiency_groups(all_cells):
        name = layout.sample_efficiency_name(seed)
        paths |= {
            layout.sample_efficiency_path(results, scale, vocab, seed),
            layout.log_file("eval", results, scale, vocab, name),
            layout.benchmark_path(
                layout.sample_efficiency_dir(results, scale, vocab),
                "sample_efficiency",
                f"seed{seed}",
            ),
        }
    files = [
        p
        for n in table_names(report_inputs(config))
        for p in table_paths(layout.tables_dir(results), n).values()
    ]
    for name in (PAPER_CHECK, RESOURCES_TABLE):
        tables = layout.tables_dir(results)
        files += layout.table_files(tables, name, layout.PLAIN_TABLE_FORMATS).values()
    for name in layout.report_figures(table_names(report_inputs(config))):
        files += layout.figure_files(layout.figures_dir(results), name).values()
    metrics = layout.dvc_metrics_dir_of(results)
    files += [layout.dvc_metrics_file(metrics, layout.cell_key(c)) for c in all_cells]
    return paths | {str(p) for p in [*files, *plot_paths(layout.plots_dir(results)).values()]}


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


def test_two_studies_in_one_clone_share_no_result_log_or_report_file() -> None:
    """The default study, a study on one's own text and a named study on the default corpus:
    every path the layout gives their results, logs and reports is their own; only the data
    of a corpus they share is shared."""
    default = resolve(root=ROOT)
    own_text = {**default, "corpus": {**default["corpus"], "name": "mytext", "kind": "text"}}
    own_text["study_name"] = "mytext"
    named = {**default, "study_name": "lr_sweep"}
    paths = [_layout_paths(c) for c in (default, own_text, named)]
    data = (layout.CORPUS_ROOT, layout.TOKENS_ROOT, "logs/fetch_corpus", "logs/tokenize")
    data += ("logs/word_counts",)
    for i, a in enumerate(paths):
        for b in paths[i + 1 :]:
            shared = {p for p in a & b if not p.startswith(data)}
            assert not shared, sorted(shared)[:5]
    assert layout.run_dir(config_cells(named)[0]).startswith("results/runs/lr_sweep/")


NOT_STUDIES = {Path(layout.PAPER_REPORTED).name, Path(layout.DVC_OVERRIDES).name}
SHIPPED = sorted(p for p in (ROOT / "config").glob("*.yaml") if p.name not in NOT_STUDIES)
DATA_LOGS = ("logs/fetch_corpus", "logs/tokenize", "logs/word_counts")


def test_the_shipped_studies_share_data_only() -> None:
    """Each shipped study writes its results, logs and report under its own name; two studies of
    one corpus share that corpus's data (and its logs), nothing else."""
    configs = {p.name: resolve([p], root=ROOT) for p in SHIPPED}
    for path in SHIPPED:  # each names its study, none left to its corpus's name
        assert "study_name" in yaml.safe_load(path.read_text()), path.name
    assert {"config.yaml", "tiny.yaml", "scale.yaml", "paper.yaml", "recon.yaml"} <= set(configs)
    paths = {name: _layout_paths(config) for name, config in configs.items()}
    data = (layout.CORPUS_ROOT, layout.TOKENS_ROOT, *DATA_LOGS)
    names = sorted(configs)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            shared = paths[a] & paths[b]
            assert all(p.startswith(data) for p in shared), (a, b, sorted(shared)[:3])
            same_corpus = configs[a]["corpus"]["name"] == configs[b]["corpus"]["name"]
            assert bool(shared) == same_corpus, (a, b)
            if same_corpus:  # the data they share are the same data: no switch rebuilds them
                both = _vocabs(configs[a]) & _vocabs(configs[b])
                assert _data_params(configs[a], both) == _data_params(configs[b], both), (a, b)


def _vocabs(config: dict[str, Any]) -> set[str]:
    return {cell.vocab for cell in config_cells(config)}


def _data_params(config: dict[str, Any], vocabs: set[str]) -> tuple[Any, ...]:
    """What the data rules' rerun triggers hold: the fetch's settings and, for `vocabs`, what
    the tokenize rule's shards hold."""
    return (
        actions.corpus_settings(config),
        {v: actions.tokenize_content(config, v) for v in sorted(vocabs)},
    )
