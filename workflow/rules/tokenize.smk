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
    threads: 2
    conda:
        "../envs/leviathan.yaml"
    log:
        "logs/tokenize/{corpus}/{vocab}.log",
    resources:
        mem_mb=2000,
        runtime=240,
    script:
        "../scripts/tokenize.py"
