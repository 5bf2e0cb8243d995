"""Rules eval_val / eval_wikitext / eval_lm_eval: one evaluation of one cell."""

from leviathan.eval.run import evaluate
from leviathan.workflow.logs import rule_log

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
rule_log(sm)
kind = getattr(sm.params, "kind", None) or sm.rule.removeprefix("eval_")  # eval_val_along: val
extra = {k: sm.input[k] for k in ("val", "counts", "word_counts") if k in sm.input.keys()}
evaluate(kind, sm.params.run_dir, sm.output[0], sm.config, **extra)
