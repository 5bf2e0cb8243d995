rule tokenize:
    """Token shards per vocabulary (uint16/uint32 .bin + manifests) and train-split id counts."""
    input:
        **CORPUS_FILES,
    output:
        **layout.token_files(TOKENS_DIR),
    log:
        log_file("tokenize", "{corpus}", "{vocab}"),
    benchmark:
        benchmark_path(TOKENS_DIR, "tokenize")
    conda:
        "../envs/leviathan.yaml"
    threads: cluster.rule_threads(config, "tokenize")
    resources:
        **cluster.rule_resources(config, "tokenize"),
    params:
        # what the shards hold (tokenize.max_bytes, resolved): the rerun trigger
        shards=lambda wc: actions.tokenize_content(config, wc.vocab),
        # that and how the job runs (tokenize.threads, processes), which the script reads: a
        # function of the job's threads, so Snakemake records no rerun trigger of it (another
        # study's parallelism never rebuilds the shards it shares)
        options=lambda wc, threads: actions.tokenize_options(config, wc.vocab),
        corpus_dir=lambda wc, input: layout.dir_of(input.train),
        out_dir=lambda wc, output: layout.dir_of(output.train),
    script:
        "../scripts/rule.py"
