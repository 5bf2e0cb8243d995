"""Evaluation: everything the paper reports about a trained model, from its checkpoint.

Modules, one job each:
    checkpoint         find/read/hash a checkpoint; EvalModel (input table materialised once)
    perplexity         one pass over a token shard (per-id loss sums), bits per byte; sliding windows
    frequency          frequency-stratified loss: fixed log10 bins and equal-mass quantile bins
    words              tokenizer-independent words, word losses, training word counts
    validation         the `val` output: overall + token- and word-level buckets
    wikitext           WikiText-103 zero-shot perplexity through HF `datasets`
    lm_eval_adapter    the lm-eval model `leviathan` (TemplateLM)
    lm_eval_tasks      lm-eval's official tasks, optionally on local files; the `lm_eval` output
    sample_efficiency  tokens to reach the tied baseline's final loss, from training curves
    hub                fast, clear failure when the Hugging Face Hub is unreachable
    config             evaluation settings (val / wikitext / lm_eval sections)
    results            the JSON envelope every output shares (checkpoint sha256, data manifests)
    cli                `leviathan eval ...`
"""

from leviathan.eval.checkpoint import Checkpoint, EvalModel, open_checkpoint, read_checkpoint
from leviathan.eval.config import EvalConfig, LmEvalConfig, LocalTaskData, ValConfig, WikitextConfig
from leviathan.eval.errors import EvalInputError, HubUnreachable
from leviathan.eval.results import read_result, write_result

__all__ = [
    "Checkpoint",
    "EvalConfig",
    "EvalInputError",
    "EvalModel",
    "HubUnreachable",
    "LmEvalConfig",
    "LocalTaskData",
    "ValConfig",
    "WikitextConfig",
    "open_checkpoint",
    "read_checkpoint",
    "read_result",
    "write_result",
]
