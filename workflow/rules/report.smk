# Report: the paper's tables (CSV, Markdown, LaTeX) and figures (PNG, PDF), each with a
# manifest, from the evaluation outputs (leviathan.report). Captions: workflow/report/.
from leviathan.paper import reported_path


REPORT_TARGETS = [
    f"{TABLES_DIR}/{name}.{fmt}" for name in REPORT_TABLES for fmt in ("csv", "md", "tex")
] + [f"{TABLES_DIR}/paper_check.csv", f"{TABLES_DIR}/paper_check.md"] + [f"{FIGURES_DIR}/{name}.{fmt}" for name in FIGURE_NAMES for fmt in ("png", "pdf")]


rule report:
    """The paper's tables beside its reported figures, the summary of every cell, and the figures."""
    input:
        evals=EVAL_TARGETS,
        checkpoints=[c.final_marker for c in CELLS],
        paper=str(reported_path()),
    output:
        table_outputs(),
        figure_outputs(),
    conda:
        "../envs/leviathan.yaml"
    log:
        "logs/report/report.log",
    script:
        "../scripts/report.py"
