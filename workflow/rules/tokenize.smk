rule tokenize:
    """Token shards per vocabulary (uint16/uint32 .bin + manifests) and train-split id counts."""
    input:
        train="data/corpus/{corpus}/train.jsonl.zst",
        val="data/corpus/{corpus}/val.jsonl.zst",
    output:
        train="data/tokens/{corpus}/{vocab}/train.bin",
        val="data/tokens/{corpus}/{vocab}/val.bin",
        counts="data/tokens/{corpus}/{vocab}/counts.npy",
    params:
        options=config["tokenize"],
    threads: steps.rule_threads(config, "tokenize")
    conda:
        "../envs/leviathan.yaml"
    log:
        "logs/tokenize/{corpus}/{vocab}.log",
    benchmark:
        benchmark_path("data/tokens/{corpus}/{vocab}", "tokenize")
    resources:
        **steps.rule_resources(config, "tokenize"),
    script:
        "../scripts/tokenize.py"
