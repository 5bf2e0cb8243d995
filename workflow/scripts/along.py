"""Rule along: the first cell's evaluations are the tied baseline's (see along.smk)."""

from leviathan.eval.along import along_training
from leviathan.eval.results import write_result
from leviathan.study.logs import rule_log

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
rule_log(sm)
write_result(sm.output[0], along_training(sm.params.runs))
