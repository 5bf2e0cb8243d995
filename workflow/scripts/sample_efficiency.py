"""Rule sample_efficiency: the first run is the tied baseline (see steps.sample_efficiency_groups)."""

from leviathan.eval.results import write_result
from leviathan.eval.sample_efficiency import sample_efficiency

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
runs = sm.params.runs
write_result(sm.output[0], sample_efficiency(runs[0], runs[1:]))
