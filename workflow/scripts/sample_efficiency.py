"""Rule sample_efficiency: the first run is the tied baseline (see actions.sample_efficiency_groups)."""

from leviathan.eval.results import write_result
from leviathan.eval.sample_efficiency import sample_efficiency
from leviathan.study.logs import rule_log

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
rule_log(sm)
runs = sm.params.runs
write_result(sm.output[0], sample_efficiency(runs[0], runs[1:]))
