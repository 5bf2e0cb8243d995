# Evaluation of each trained cell (leviathan.eval through leviathan.eval.run; resources: leviathan.study.cluster).
from leviathan.eval import config as eval_settings
from leviathan.eval import run as eval_run

EVAL_CFG = eval_settings.eval_config(config)  # a bad evaluate: key fails here, before any job
EVALS = eval_settings.enabled_evals(config)
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
    log:
        log_file("word_counts", "{corpus}", "{vocab}"),
    benchmark:
        benchmark_path(TOKENS_DIR, "word_counts")
    conda:
        "../envs/leviathan.yaml"
    resources:
        **cluster.rule_resources(config, "word_counts"),
    script:
        "../scripts/rule.py"


# The evaluation rules of a trained cell, eval_<evaluation> for each of eval_settings.CHECKPOINT_EVALS:
# each one's docstring, its inputs (positional, named: val's val_inputs, the others' final marker)
# and its outputs beside the JSON (lm_eval's per-sample log and lm-eval's own layout)
EVAL_DOCS = {
    "val": "Validation loss, perplexity, bits per byte; token- and word-level frequency buckets.",
    "wikitext": "Zero-shot WikiText-103 perplexity (token, word and byte level).",
    "lm_eval": "Zero-shot lm-evaluation-harness tasks, with per-sample logs.",
}
EVAL_INPUTS = {
    "val": ([unpack(val_inputs)], {}),
    # and the datasets the data step fetched for them (data.smk: EVAL_DATA_INPUTS)
    "wikitext": ([], {"final": layout.final_marker(WILDCARDS), **EVAL_DATA_INPUTS["wikitext"]}),
    "lm_eval": ([], {"final": layout.final_marker(WILDCARDS), **EVAL_DATA_INPUTS["lm_eval"]}),
}
EVAL_EXTRA_OUTPUTS = {
    "lm_eval": {
        "samples": str(layout.lm_eval_samples(LM_EVAL_OUT)),
        # lm-eval's own layout (results_<date>.json, samples_<task>_<date>.jsonl), as --output_path writes it
        "harness": directory(str(layout.lm_eval_harness_dir(LM_EVAL_OUT))),
    },
}

for _evaluation in eval_settings.CHECKPOINT_EVALS:

    rule:
        name:
            f"eval_{_evaluation}"
        input:
            *EVAL_INPUTS[_evaluation][0],
            **EVAL_INPUTS[_evaluation][1],
        output:
            layout.eval_output(WILDCARDS, _evaluation),
            **EVAL_EXTRA_OUTPUTS.get(_evaluation, {}),
        log:
            layout.cell_log("eval", WILDCARDS, _evaluation),
        benchmark:
            benchmark_path(EVAL_DIR, f"eval_{_evaluation}")
        conda:
            "../envs/leviathan.yaml"
        threads: lambda wc: cluster.eval_resources(config, wc.scale)["threads"]
        resources:
            **EVAL_RESOURCES,
        params:
            # the evaluation, named `kind` as leviathan.study.rules.evaluate reads it
            kind=_evaluation,
            settings=eval_run.result_settings(EVAL_CFG, _evaluation),  # its rerun trigger
            run_dir=lambda wc, input: layout.run_of(input.final),
        script:
            "../scripts/rule.py"

    # a rule's docstring is a literal in its body: one per evaluation is set here
    workflow.get_rule(f"eval_{_evaluation}").docstring = EVAL_DOCS[_evaluation]


rule sample_efficiency:
    """Tokens each variant needs to reach the tied baseline's final validation loss."""
    input:
        lambda wc: [layout.final_marker(c) for c in SE_GROUPS[wc.scale, wc.vocab, int(wc.seed)]],
    output:
        layout.sample_efficiency_path("{results}", "{scale}", "{vocab}", "{seed}"),
    log:
        log_file("eval", "{results}", "{scale}", "{vocab}", layout.sample_efficiency_name("{seed}")),
    benchmark:
        benchmark_path(SE_DIR, "sample_efficiency", "seed{seed}")
    conda:
        "../envs/leviathan.yaml"
    resources:
        **cluster.rule_resources(config, "sample_efficiency"),
    params:
        # the tied baseline first (see actions.sample_efficiency_groups)
        runs=lambda wc, input: [layout.run_of(p) for p in input],
    script:
        "../scripts/rule.py"


EVAL_TARGETS = [layout.eval_output(c, evaluation) for c in CELLS for evaluation in EVALS] + [
    layout.sample_efficiency_path(RESULTS, *key) for key in SE_GROUPS
]
