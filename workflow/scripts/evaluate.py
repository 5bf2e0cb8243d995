"""Rules eval_val / eval_wikitext / eval_lm_eval / eval_val_along: one evaluation (params.kind)."""

from leviathan.study.actions import evaluate
from leviathan.study.logs import rule_log

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
rule_log(sm)
extra = {k: sm.input[k] for k in ("val", "counts", "word_counts") if k in sm.input.keys()}
evaluate(sm.params.kind, sm.params.run_dir, sm.output[0], sm.config, **extra)
