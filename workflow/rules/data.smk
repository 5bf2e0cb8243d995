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
    benchmark:
        benchmark_path("data/corpus/{corpus}", "fetch_corpus")
    resources:
        **steps.rule_resources(config, "fetch_corpus"),
    script:
        "../scripts/fetch_corpus.py"
