# Evaluation along training (config.evaluate.along, with runtime.checkpoint.keep_at): the val evaluation of
# every kept checkpoint of every cell, then each (scale, vocab, seed) group against tied
# (leviathan.study.along, leviathan.eval.along). Off by default: nothing here runs.
from leviathan.study import along as along_plan

# on without runtime.checkpoint.keep_at fails here, before any job
ALONG = eval_run.along_enabled(config)
ALONG_STEPS = {c: along_plan.along_steps(config, c) for c in CELLS} if ALONG else {}
ALONG_GROUPS = along_plan.along_groups(config, SE_GROUPS)
ALONG_DIR = f"{EVAL_DIR}/{layout.ALONG}"


rule eval_val_along:
    """The val evaluation (eval_val's) of one kept checkpoint; input: the cell's final marker
    (a cell's kept checkpoints are all written once its final checkpoint is)."""
    input:
        unpack(val_inputs),
    output:
        layout.along_output(WILDCARDS, "{step}"),
    log:
        layout.cell_log("eval", WILDCARDS, layout.ALONG, "val_step{step}"),
    benchmark:
        benchmark_path(ALONG_DIR, "eval_val_along", "step{step}")
    wildcard_constraints:
        step=r"\d+",
    conda:
        "../envs/leviathan.yaml"
    threads: lambda wc: cluster.eval_resources(config, wc.scale)["threads"]
    resources:
        **EVAL_RESOURCES,
    params:
        kind="val",  # the evaluation, as leviathan.study.rules.evaluate reads it
        settings=eval_run.result_settings(EVAL_CFG, "val"),  # its rerun trigger
        run_dir=lambda wc: layout.kept_checkpoint(cell_of(wc), wc.step),
    script:
        "../scripts/rule.py"


rule along_training:
    """A group's evaluations along training against the tied baseline's (tokens to its loss)."""
    input:
        lambda wc: [p for cell in ALONG_GROUPS[wc.scale, wc.vocab, int(wc.seed)] for p in cell],
    output:
        layout.along_path("{results}", "{scale}", "{vocab}", "{seed}"),
    log:
        log_file("eval", "{results}", "{scale}", "{vocab}", layout.along_name("{seed}")),
    benchmark:
        benchmark_path(SE_DIR, "along_training", "seed{seed}")
    conda:
        "../envs/leviathan.yaml"
    resources:
        **cluster.rule_resources(config, "sample_efficiency"),
    params:
        runs=lambda wc: ALONG_GROUPS[wc.scale, wc.vocab, int(wc.seed)],  # tied first
    script:
        "../scripts/rule.py"


ALONG_TARGETS = [layout.along_output(c, s) for c, steps in ALONG_STEPS.items() for s in steps] + [
    layout.along_path(RESULTS, *key) for key in ALONG_GROUPS
]
ALONG_BENCHMARKS = [
    benchmark_path(f"{layout.eval_dir(c)}/{layout.ALONG}", "eval_val_along", f"step{s}")
    for c, steps in ALONG_STEPS.items()
    for s in steps
] + [
    benchmark_path(layout.sample_efficiency_dir(RESULTS, s, v), "along_training", f"seed{seed}")
    for s, v, seed in ALONG_GROUPS
]
EVAL_TARGETS = EVAL_TARGETS + ALONG_TARGETS
