"""Evaluation: everything the paper reports about a trained model, from its checkpoint.

Modules, one job each:
    checkpoint         find/read/hash a checkpoint; EvalModel (input table materialised once)
    perplexity         one pass over a token shard (per-id loss sums), bits per byte; sliding windows
    frequency          frequency-stratified loss: fixed log10 bins and equal-mass quantile bins
    words              tokenizer-independent words, word losses, training word counts
    val                the `val` output: overall + token- and word-level buckets
    wikitext           WikiText-103 zero-shot perplexity through HF `datasets`
    lm_eval_adapter    the lm-eval model `leviathan` (TemplateLM)
    lm_eval_tasks      lm-eval's official tasks, optionally on local files; the `lm_eval` output
    sample_efficiency  tokens to reach the tied baseline's final loss, from training curves
    hub                fast, clear failure when the Hugging Face Hub is unreachable
    config             evaluation settings (val / wikitext / lm_eval sections)
    run                the evaluation kinds, which the config runs; the one dispatcher (rules, CLI)
    memory             an evaluation job's GPU memory, its forward traced on FakeTensors (the plan)
    results            the JSON envelope every output shares (checkpoint sha256, data manifests);
                       the result shapes the report reads
    along              the `val` evaluation along training, against the tied baseline
    generate           samples of a trained cell (`leviathan generate`)
    errors, standin, token_bytes, lm_eval_cli   input errors; offline stand-ins; bytes per
                       token; lm-eval's own command line with our model registered
The command line: `leviathan eval ...` (leviathan.commands.eval).
"""
