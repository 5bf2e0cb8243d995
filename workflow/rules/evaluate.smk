# Evaluation of each trained cell (leviathan.eval through leviathan.workflow.steps).
EVAL_CFG = steps.eval_config(config)  # a bad evaluate: key fails here, before any job
EVALS = steps.enabled_evals(config)
SE_GROUPS = steps.sample_efficiency_groups(CELLS)


rule word_counts:
    """Training-corpus counts of the validation text's words (word-level frequency buckets)."""
    input:
        train="data/tokens/{corpus}/{vocab}/train.bin",
        val="data/tokens/{corpus}/{vocab}/val.bin",
    output:
        "data/tokens/{corpus}/{vocab}/word_counts.json",
    conda:
        "../envs/leviathan.yaml"
    log:
        "logs/word_counts/{corpus}/{vocab}.log",
    benchmark:
        benchmark_path("data/tokens/{corpus}/{vocab}", "word_counts")
    resources:
        **steps.rule_resources(config, "word_counts"),
    script:
        "../scripts/word_counts.py"


rule eval_val:
    """Validation loss, perplexity, bits per byte; token- and word-level frequency buckets."""
    input:
        unpack(val_inputs),
    output:
        "results/eval/{scale}/{vocab}/{variant}/seed{seed}/val.json",
    params:
        settings=EVAL_CFG.val,
    conda:
        "../envs/leviathan.yaml"
    log:
        "logs/eval/{scale}/{vocab}/{variant}/seed{seed}/val.log",
    benchmark:
        benchmark_path("results/eval/{scale}/{vocab}/{variant}/seed{seed}", "eval_val")
    resources:
        **steps.rule_resources(config, "eval_val"),
    script:
        "../scripts/evaluate.py"


rule eval_wikitext:
    """Zero-shot WikiText-103 perplexity (token, word and byte level)."""
    input:
        final="results/runs/{scale}/{vocab}/{variant}/seed{seed}/checkpoints/final/state.json",
    output:
        "results/eval/{scale}/{vocab}/{variant}/seed{seed}/wikitext.json",
    params:
        settings=EVAL_CFG.wikitext,
    conda:
        "../envs/leviathan.yaml"
    log:
        "logs/eval/{scale}/{vocab}/{variant}/seed{seed}/wikitext.log",
    benchmark:
        benchmark_path("results/eval/{scale}/{vocab}/{variant}/seed{seed}", "eval_wikitext")
    resources:
        **steps.rule_resources(config, "eval_wikitext"),
    script:
        "../scripts/evaluate.py"


rule eval_lm_eval:
    """Zero-shot lm-evaluation-harness tasks, with per-sample logs."""
    input:
        final="results/runs/{scale}/{vocab}/{variant}/seed{seed}/checkpoints/final/state.json",
    output:
        "results/eval/{scale}/{vocab}/{variant}/seed{seed}/lm_eval.json",
        samples="results/eval/{scale}/{vocab}/{variant}/seed{seed}/lm_eval.samples.jsonl",
        # lm-eval's own layout (results_<date>.json, samples_<task>_<date>.jsonl), as --output_path writes it
        harness=directory("results/eval/{scale}/{vocab}/{variant}/seed{seed}/lm_eval_harness"),
    params:
        settings=EVAL_CFG.lm_eval,
    conda:
        "../envs/leviathan.yaml"
    log:
        "logs/eval/{scale}/{vocab}/{variant}/seed{seed}/lm_eval.log",
    benchmark:
        benchmark_path("results/eval/{scale}/{vocab}/{variant}/seed{seed}", "eval_lm_eval")
    resources:
        **steps.rule_resources(config, "eval_lm_eval"),
    script:
        "../scripts/evaluate.py"


rule sample_efficiency:
    """Tokens each variant needs to reach the tied baseline's final validation loss."""
    input:
        lambda wc: [c.final_marker for c in SE_GROUPS[wc.scale, wc.vocab, int(wc.seed)]],
    output:
        "results/eval/{scale}/{vocab}/sample_efficiency_seed{seed}.json",
    conda:
        "../envs/leviathan.yaml"
    log:
        "logs/eval/{scale}/{vocab}/sample_efficiency_seed{seed}.log",
    benchmark:
        benchmark_path("results/eval/{scale}/{vocab}", "sample_efficiency", "seed{seed}")
    resources:
        **steps.rule_resources(config, "sample_efficiency"),
    script:
        "../scripts/sample_efficiency.py"


EVAL_TARGETS = [c.eval_output(kind) for c in CELLS for kind in EVALS] + [
    sample_efficiency_path(*key) for key in SE_GROUPS
]
