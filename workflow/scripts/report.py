"""Rule report (logic: leviathan.report.summary, .build, .plots and .resources)."""
from leviathan.report.build import FIGURES_DIR, TABLES_DIR, write_report
from leviathan.report.plots import write_plot_data
from leviathan.report.resources import write_resources
from leviathan.report.summary import summary_table, write_summary
from leviathan.workflow.grid import cells

sm = snakemake  # type: ignore[name-defined]  # noqa: F821
results = [p for p in sm.input.evals if not p.rsplit("/", 1)[-1].startswith("sample_efficiency")]
write_summary(summary_table(results), sm.output.csv, sm.output.md)
se = [p for p in sm.input.evals if p.rsplit("/", 1)[-1].startswith("sample_efficiency")]
write_report(sm.config, TABLES_DIR, FIGURES_DIR, se)
write_plot_data(cells(sm.config["studies"]))
write_resources(sm.input.benchmarks, TABLES_DIR)
