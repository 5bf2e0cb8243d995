"""Rules eval_val / eval_wikitext / eval_lm_eval: one evaluation of one cell."""

from pathlib import Path

from leviathan.workflow.steps import evaluate

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
kind = sm.rule.removeprefix("eval_")
run_dir = Path(sm.input.final).parents[2]
extra = {k: sm.input[k] for k in ("val", "counts", "word_counts") if k in sm.input.keys()}
evaluate(kind, run_dir, sm.output[0], sm.config, **extra)
