rule fetch_corpus:
    """Raw text of the configured corpus, split into train/val (with manifests)."""
    output:
        **CORPUS_FILES,
    params:
        corpus=actions.corpus_settings(config),
        out_dir=lambda wc, output: layout.dir_of(output.train),
    conda:
        "../envs/leviathan.yaml"
    log:
        log_file("fetch_corpus", "{corpus}"),
    benchmark:
        benchmark_path(layout.corpus_dir("{corpus}"), "fetch_corpus")
    resources:
        **cluster.rule_resources(config, "fetch_corpus"),
    script:
        "../scripts/fetch_corpus.py"
