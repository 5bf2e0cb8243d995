"""Rule report (logic: leviathan.report.summary)."""
from leviathan.report.summary import summary_table, write_summary

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
results = [p for p in sm.input if not p.rsplit("/", 1)[-1].startswith("sample_efficiency")]
write_summary(summary_table(results), sm.output.csv, sm.output.md)
