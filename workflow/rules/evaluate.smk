# Evaluation of each trained cell (leviathan.eval through leviathan.eval.run; resources: leviathan.workflow.cluster).
from leviathan.eval import run as eval_run

EVAL_CFG = eval_run.eval_config(config)  # a bad evaluate: key fails here, before any job
EVALS = eval_run.enabled_evals(config)
SE_GROUPS = actions.sample_efficiency_groups(CELLS)
SE_DIR = layout.sample_efficiency_dir("{results}", "{scale}", "{vocab}")
LM_EVAL_OUT = layout.eval_output(WILDCARDS, "lm_eval")
for _scale in sorted({c.scale for c in CELLS}):
    cluster.eval_resources(config, _scale)  # a GPU scale without eval_resources fails here
# an evaluation job's resources and SLURM settings, by the cell's scale (config.eval_resources)
EVAL_RESOURCES = cluster.eval_rule_resources(
    config, getattr(workflow.resource_settings.default_resources, "args", None)
)

rule word_counts:
    """Training-corpus counts of the validation text's words (word-level frequency buckets)."""
    input:
        **layout.shards(TOKENS_DIR),
    output:
        layout.token_files(TOKENS_DIR, word_counts=True)["word_counts"],
    conda:
        "../envs/leviathan.yaml"
    log:
        log_file("word_counts", "{corpus}", "{vocab}"),
    benchmark:
        benchmark_path(TOKENS_DIR, "word_counts")
    resources:
        **cluster.rule_resources(config, "word_counts"),
    script:
        "../scripts/word_counts.py"


rule eval_val:
    """Validation loss, perplexity, bits per byte; token- and word-level frequency buckets."""
    input:
        unpack(val_inputs),
    output:
        layout.eval_output(WILDCARDS, "val"),
    params:
        settings=EVAL_CFG.val,
        run_dir=lambda wc, input: layout.run_of(input.final),
    conda:
        "../envs/leviathan.yaml"
    log:
        layout.cell_log("eval", WILDCARDS, "val"),
    benchmark:
        benchmark_path(EVAL_DIR, "eval_val")
    threads: lambda wc: cluster.eval_resources(config, wc.scale)["threads"]
    resources:
        **EVAL_RESOURCES,
    script:
        "../scripts/evaluate.py"


rule eval_wikitext:
    """Zero-shot WikiText-103 perplexity (token, word and byte level)."""
    input:
        final=layout.final_marker(WILDCARDS),
    output:
        layout.eval_output(WILDCARDS, "wikitext"),
    params:
        settings=EVAL_CFG.wikitext,
        run_dir=lambda wc, input: layout.run_of(input.final),
    conda:
        "../envs/leviathan.yaml"
    log:
        layout.cell_log("eval", WILDCARDS, "wikitext"),
    benchmark:
        benchmark_path(EVAL_DIR, "eval_wikitext")
    threads: lambda wc: cluster.eval_resources(config, wc.scale)["threads"]
    resources:
        **EVAL_RESOURCES,
    script:
        "../scripts/evaluate.py"


rule eval_lm_eval:
    """Zero-shot lm-evaluation-harness tasks, with per-sample logs."""
    input:
        final=layout.final_marker(WILDCARDS),
    output:
        LM_EVAL_OUT,
        samples=str(layout.lm_eval_samples(LM_EVAL_OUT)),
        # lm-eval's own layout (results_<date>.json, samples_<task>_<date>.jsonl), as --output_path writes it
        harness=directory(str(layout.lm_eval_harness_dir(LM_EVAL_OUT))),
    params:
        settings=EVAL_CFG.lm_eval,
        run_dir=lambda wc, input: layout.run_of(input.final),
    conda:
        "../envs/leviathan.yaml"
    log:
        layout.cell_log("eval", WILDCARDS, "lm_eval"),
    benchmark:
        benchmark_path(EVAL_DIR, "eval_lm_eval")
    threads: lambda wc: cluster.eval_resources(config, wc.scale)["threads"]
    resources:
        **EVAL_RESOURCES,
    script:
        "../scripts/evaluate.py"


rule sample_efficiency:
    """Tokens each variant needs to reach the tied baseline's final validation loss."""
    input:
        lambda wc: [layout.final_marker(c) for c in SE_GROUPS[wc.scale, wc.vocab, int(wc.seed)]],
    output:
        layout.sample_efficiency_path("{results}", "{scale}", "{vocab}", "{seed}"),
    params:
        # the tied baseline first (see actions.sample_efficiency_groups)
        runs=lambda wc, input: [layout.run_of(p) for p in input],
    conda:
        "../envs/leviathan.yaml"
    log:
        log_file("eval", "{results}", "{scale}", "{vocab}", layout.sample_efficiency_name("{seed}")),
    benchmark:
        benchmark_path(SE_DIR, "sample_efficiency", "seed{seed}")
    resources:
        **cluster.rule_resources(config, "sample_efficiency"),
    script:
        "../scripts/sample_efficiency.py"


EVAL_TARGETS = [layout.eval_output(c, kind) for c in CELLS for kind in EVALS] + [
    layout.sample_efficiency_path(RESULTS, *key) for key in SE_GROUPS
]
