# Report: tables from the evaluation results (leviathan.report).
REPORT_TARGETS = ["results/report/summary.csv", "results/report/summary.md"]


rule report:
    """One row per cell: val loss/ppl/bpb, WikiText-103 ppl, lm-eval mean accuracy."""
    input:
        EVAL_TARGETS,
    output:
        csv="results/report/summary.csv",
        md="results/report/summary.md",
    conda:
        "../envs/leviathan.yaml"
    log:
        "logs/report/summary.log",
    script:
        "../scripts/report.py"
