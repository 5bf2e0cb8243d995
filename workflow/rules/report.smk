# Report: the paper's tables (CSV, Markdown, LaTeX) and figures (PNG, PDF), each with a
# manifest, from the evaluation outputs (leviathan.report). A table's caption is written with it
# (from its description in the code); the figures' and the first page's: workflow/report/.
from leviathan.report.paper import reported_path

REPORT_TARGETS = (
    [
        str(p)
        for name in REPORT_TABLES
        for p in table_paths(layout.tables_dir(RESULTS), name).values()
    ]
    + [str(p) for name in (PAPER_CHECK, RESOURCES_TABLE) for p in plain_table_paths(name).values()]
    + [
        str(p)
        for name in layout.report_figures(REPORT_TABLES)
        for p in layout.figure_files(layout.figures_dir(RESULTS), name).values()
    ]
    + [str(p) for p in plot_paths(layout.plots_dir(RESULTS)).values()]
    + [layout.status_file(RESULTS)]
)

# every job's benchmark file (the report's own excepted: it is written after the job), for the
# resource table; the paths are those of the rules' `benchmark:` directives
BENCHMARKS = (
    [benchmark_path(CORPUS_DIR, "fetch_corpus")]
    + [benchmark_path(layout.tokens_dir(CORPUS, vocab), "tokenize") for vocab in VOCABS]
    + (
        [benchmark_path(layout.tokens_dir(CORPUS, vocab), "word_counts") for vocab in VOCABS]
        if WORD_COUNTS
        else []
    )
    + [benchmark_path(layout.run_dir(c), "train") for c in CELLS]
    + [
        benchmark_path(layout.eval_dir(c), f"eval_{evaluation}")
        for c in CELLS
        for evaluation in EVALS
    ]
    + [
        benchmark_path(
            layout.sample_efficiency_dir(RESULTS, s, v), "sample_efficiency", f"seed{seed}"
        )
        for s, v, seed in SE_GROUPS
    ]
    + ALONG_BENCHMARKS
)


rule report:
    """The paper's tables beside its reported figures, the summary of every cell, and the figures."""
    input:
        evals=EVAL_TARGETS,
        checkpoints=[layout.final_marker(c) for c in CELLS],
        paper=str(reported_path()),
        benchmarks=BENCHMARKS,
    output:
        tables=table_outputs(),
        figures=figure_outputs(),
        plots=[str(p) for p in plot_paths(layout.plots_dir(RESULTS)).values()],
        metrics=[
            str(layout.dvc_metrics_file(layout.dvc_metrics_dir_of(RESULTS), c.key)) for c in CELLS
        ],
        # the first page of the HTML report (`leviathan report html`) includes it: workflow.rst
        status=report(
            layout.status_file(RESULTS), category="Status", caption="../report/status.rst"
        ),
    log:
        log_file("report", RESULTS),
    benchmark:
        benchmark_path(layout.report_dir(RESULTS), "report")
    conda:
        "../envs/leviathan.yaml"
    resources:
        **cluster.rule_resources(config, "report"),
    params:
        tables_dir=lambda wc, output: layout.dir_of(output.tables[0]),
        figures_dir=lambda wc, output: layout.dir_of(output.figures[0]),
        plots_dir=lambda wc, output: layout.dir_of(output.plots[0]),
        metrics_dir=lambda wc, output: layout.dvc_metrics_dir(output.metrics[0], CELLS[0].key),
        sample_efficiency=lambda wc, input: [
            p for p in input.evals if layout.is_sample_efficiency(p)
        ],
        along=lambda wc, input: [p for p in input.evals if layout.is_along(p)],
    script:
        "../scripts/rule.py"
