# Each trained cell as a transformers checkpoint (leviathan.export through leviathan.workflow.steps).
# Behind the stage target all_export, not in `rule all`: see the Snakefile.


rule export:
    """The cell's final checkpoint as a transformers LlamaForCausalLM with its tokenizer."""
    input:
        final="results/runs/{scale}/{vocab}/{variant}/seed{seed}/checkpoints/final/state.json",
    output:
        directory("results/export/{scale}/{vocab}/{variant}/seed{seed}"),
    params:
        dtype=config["export"]["dtype"],
    conda:
        "../envs/leviathan.yaml"
    log:
        "logs/export/{scale}/{vocab}/{variant}/seed{seed}.log",
    resources:
        **steps.rule_resources(config, "export"),
    script:
        "../scripts/export.py"


EXPORT_TARGETS = [c.export_dir for c in CELLS]
