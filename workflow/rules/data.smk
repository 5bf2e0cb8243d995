rule fetch_corpus:
    """Raw text of the configured corpus, split into train/val (with manifests)."""
    output:
        train="data/corpus/{corpus}/train.jsonl.zst",
        val="data/corpus/{corpus}/val.jsonl.zst",
    params:
        corpus=steps.corpus_settings(config),
    conda:
        "../envs/leviathan.yaml"
    log:
        "logs/fetch_corpus/{corpus}.log",
    resources:
        mem_mb=2000,
        runtime=240,
    script:
        "../scripts/fetch_corpus.py"
