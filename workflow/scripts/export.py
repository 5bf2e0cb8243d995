"""Rule export: one trained cell as a transformers checkpoint (`leviathan export`)."""

from leviathan.export.write import export_run
from leviathan.study.logs import rule_log

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
rule_log(sm)
# force: Snakemake removed the old output already; only a stale partial one could be left
export_run(sm.params.run_dir, sm.output[0], dtype=sm.params.dtype, force=True)
