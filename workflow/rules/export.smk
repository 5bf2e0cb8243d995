# Each trained cell as a transformers checkpoint (leviathan.export; the rule only names its inputs and outputs).
# Behind the stage target all_export, not in `rule all`: see the Snakefile.


rule export:
    """The cell's final checkpoint as a transformers LlamaForCausalLM with its tokenizer."""
    input:
        final=layout.final_marker(WILDCARDS),
    output:
        directory(layout.export_dir(WILDCARDS)),
    log:
        layout.cell_log("export", WILDCARDS),
    conda:
        "../envs/leviathan.yaml"
    resources:
        **cluster.rule_resources(config, "export"),
    params:
        dtype=config["export"]["dtype"],
        run_dir=lambda wc, input: layout.run_of(input.final),
    script:
        "../scripts/rule.py"


EXPORT_TARGETS = [layout.export_dir(c) for c in CELLS]
