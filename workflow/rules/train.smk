rule train:
    """Train one cell. Only the final checkpoint's state.json is declared as output, so the
    step checkpoints of a failed or preempted job survive and the rerun resumes from them."""
    input:
        train=f"data/tokens/{CORPUS}/{{vocab}}/train.bin",
        val=f"data/tokens/{CORPUS}/{{vocab}}/val.bin",
    output:
        final="results/runs/{scale}/{vocab}/{variant}/seed{seed}/checkpoints/final/state.json",
    params:
        # the cell's identity only: changing it reruns the cell (and what depends on it)
        launch=lambda wc: steps.launcher_args(config, wc.scale),
        cell=lambda wc: steps.cell_args(
            cell_of(wc), config, tokens_dir(CORPUS, wc.vocab), cell_of(wc).run_dir
        ),
    conda:
        "../envs/leviathan.yaml"
    log:
        "logs/train/{scale}/{vocab}/{variant}/seed{seed}.log",
    benchmark:
        benchmark_path("results/runs/{scale}/{vocab}/{variant}/seed{seed}", "train")
    threads: lambda wc: steps.resources(config, wc.scale)["threads"]
    resources:
        gpu=res("gpu"),
        gpu_model=res("gpu_model"),
        cpus_per_gpu=res("cpus_per_gpu"),
        mem_mb=res("mem_mb"),
        runtime=res("runtime"),
        **TRAIN_SLURM,
    script:
        "../scripts/train.py"
