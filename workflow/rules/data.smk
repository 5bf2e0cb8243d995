rule fetch_corpus:
    """Raw text of the configured corpus, split into train/val (with manifests)."""
    output:
        **CORPUS_FILES,
    log:
        log_file("fetch_corpus", "{corpus}"),
    benchmark:
        benchmark_path(layout.corpus_dir("{corpus}"), "fetch_corpus")
    conda:
        "../envs/leviathan.yaml"
    resources:
        **cluster.rule_resources(config, "fetch_corpus"),
    params:
        corpus=actions.corpus_settings(config),
        out_dir=lambda wc, output: layout.dir_of(output.train),
    script:
        "../scripts/rule.py"


# The datasets the enabled evaluations read from the Hub (none where the config gives
# data_files, as the default's stand-ins): fetched here, where the data step runs, so that
# evaluation jobs on compute nodes without internet read them from data/eval/.
from leviathan.data import eval_data

EVAL_DATA_NEEDS = {need.key: need for need in eval_data.needs(config)}
EVAL_DATA_TARGETS = [str(need.source) for need in EVAL_DATA_NEEDS.values()]
# each evaluation rule's named input of the fetched datasets it reads (nothing where none)
EVAL_DATA_INPUTS = {
    evaluation: {"eval_data": files} if files else {}
    for evaluation in ("wikitext", "lm_eval")
    for files in [[str(n.source) for n in EVAL_DATA_NEEDS.values() if n.evaluation == evaluation]]
}

if EVAL_DATA_NEEDS:

    rule fetch_eval_data:
        """One evaluation dataset (WikiText-103, an lm-eval task's) from the Hub into data/eval/."""
        output:
            str(layout.eval_data_source("{eval_data}")),
        log:
            log_file("fetch_eval_data", "{eval_data}"),
        wildcard_constraints:
            eval_data="wikitext|lm_eval/[^/]+",
        conda:
            "../envs/leviathan.yaml"
        resources:
            # a download, as the corpus's (config.rule_resources.fetch_corpus)
            **cluster.rule_resources(config, "fetch_corpus"),
        params:
            need=lambda wc: eval_data.need_record(EVAL_DATA_NEEDS[wc.eval_data]),
        script:
            "../scripts/rule.py"
