"""Rule word_counts (logic: leviathan.study.actions / leviathan.eval.val)."""

from leviathan.study.actions import word_counts
from leviathan.study.logs import rule_log

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
rule_log(sm)
word_counts(sm.input.train, sm.input.val, sm.output[0], sm.config)
