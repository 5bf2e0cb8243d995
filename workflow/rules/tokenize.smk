rule tokenize:
    """Token shards per vocabulary (uint16/uint32 .bin + manifests) and train-split id counts."""
    input:
        **CORPUS_FILES,
    output:
        **layout.token_files(TOKENS_DIR),
    params:
        options=lambda wc: actions.tokenize_options(config, wc.vocab),
        corpus_dir=lambda wc, input: layout.dir_of(input.train),
        out_dir=lambda wc, output: layout.dir_of(output.train),
    threads: cluster.rule_threads(config, "tokenize")
    conda:
        "../envs/leviathan.yaml"
    log:
        log_file("tokenize", "{corpus}", "{vocab}"),
    benchmark:
        benchmark_path(TOKENS_DIR, "tokenize")
    resources:
        **cluster.rule_resources(config, "tokenize"),
    script:
        "../scripts/tokenize.py"
