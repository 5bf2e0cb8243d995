# Report: the paper's tables (CSV, Markdown, LaTeX) and figures (PNG, PDF), each with a
# manifest, from the evaluation outputs (leviathan.report). Captions: workflow/report/.
from leviathan.paper import reported_path


REPORT_TARGETS = [
    str(p) for name in REPORT_TABLES for p in table_paths(TABLES_DIR, name).values()
] + [f"{TABLES_DIR}/paper_check.csv", f"{TABLES_DIR}/paper_check.md"] + [
    f"{TABLES_DIR}/resources.{fmt}" for fmt in ("csv", "md")
] + [f"{FIGURES_DIR}/{name}.{fmt}" for name in FIGURE_NAMES for fmt in ("png", "pdf")] + [
    str(p) for p in plot_paths().values()
]

# every job's benchmark file (the report's own excepted: it is written after the job), for the
# resource table; the paths are those of the rules' `benchmark:` directives
BENCHMARKS = (
    [benchmark_path(corpus_dir(CORPUS), "fetch_corpus")]
    + [benchmark_path(tokens_dir(CORPUS, vocab), "tokenize") for vocab in VOCABS]
    + ([benchmark_path(tokens_dir(CORPUS, vocab), "word_counts") for vocab in VOCABS] if WORD_COUNTS else [])
    + [benchmark_path(c.run_dir, "train") for c in CELLS]
    + [benchmark_path(c.eval_dir, f"eval_{kind}") for c in CELLS for kind in EVALS]
    + [benchmark_path(f"results/eval/{s}/{v}", "sample_efficiency", f"seed{seed}") for s, v, seed in SE_GROUPS]
)


rule report:
    """The paper's tables beside its reported figures, the summary of every cell, and the figures."""
    input:
        evals=EVAL_TARGETS,
        checkpoints=[c.final_marker for c in CELLS],
        paper=str(reported_path()),
        benchmarks=BENCHMARKS,
    output:
        table_outputs(),
        figure_outputs(),
        plots=[str(p) for p in plot_paths().values()],
    conda:
        "../envs/leviathan.yaml"
    log:
        "logs/report/report.log",
    benchmark:
        benchmark_path("results/report", "report")
    resources:
        **steps.rule_resources(config, "report"),
    script:
        "../scripts/report.py"
