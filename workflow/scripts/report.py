"""Rule report (logic: leviathan.report.summary and leviathan.report.build)."""
from leviathan.report.build import FIGURES_DIR, TABLES_DIR, write_report
from leviathan.report.summary import summary_table, write_summary

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
results = [p for p in sm.input.evals if not p.rsplit("/", 1)[-1].startswith("sample_efficiency")]
write_summary(summary_table(results), sm.output.csv, sm.output.md)
se = [p for p in sm.input.evals if p.rsplit("/", 1)[-1].startswith("sample_efficiency")]
write_report(sm.config, TABLES_DIR, FIGURES_DIR, se)
