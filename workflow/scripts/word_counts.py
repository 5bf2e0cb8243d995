"""Rule word_counts (logic: leviathan.workflow.steps / leviathan.eval.validation)."""

from leviathan.workflow.steps import word_counts

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
word_counts(sm.input.train, sm.input.val, sm.output[0], sm.config)
