rule train:
    """Train one cell. Only the final checkpoint's state.json is declared as output, so the
    step checkpoints of a failed or preempted job survive and the rerun resumes from them."""
    input:
        **layout.shards(layout.tokens_dir(CORPUS, "{vocab}")),
    output:
        final=layout.final_marker(WILDCARDS),
    log:
        layout.cell_log("train", WILDCARDS),
    benchmark:
        benchmark_path(RUN_DIR, "train")
    conda:
        "../envs/leviathan.yaml"
    threads: lambda wc: cluster.resources(config, wc.scale)["threads"]
    resources:
        **TRAIN_SLURM,
        gpu=res("gpu"),
        gpu_model=res("gpu_model"),
        cpus_per_gpu=res("cpus_per_gpu"),
        mem_mb=res("mem_mb"),
        runtime=res("runtime"),
    params:
        # the cell's identity only: changing it reruns the cell (and what depends on it). A
        # function of the wildcards, not of input/output: Snakemake leaves params derived from
        # files out of its params rerun trigger
        launch=lambda wc: launch.launcher_args(config, wc.scale),
        cell=lambda wc: launch.cell_args(
            cell_of(wc), config, layout.tokens_dir(CORPUS, wc.vocab), layout.run_dir(wc)
        ),
    script:
        "../scripts/rule.py"
